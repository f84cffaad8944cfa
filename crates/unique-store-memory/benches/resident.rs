//! Heap bytes the memory store keeps per session: users with only the default
//! slot, and users with a second slot (whose record, and entry in the shard's
//! index of slots, the listing reads). Prints a table; `cargo bench -p
//! unique-store-memory --bench resident`.
//!
//! Counted by `stats_alloc`'s wrapper around the system allocator (see
//! `unique-core/benches/claim_allocations.rs` for why not a hand-written one):
//! the bytes allocated minus the bytes freed while the sessions are claimed,
//! so the growth of the maps is included and the claim's own temporaries are not.

use std::alloc::System;

use futures::executor::block_on;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use unique_core::{CasOutcome, Key, Owner, OwnerState, Store};
use unique_store_memory::MemoryStore;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Users per scenario: enough that the maps' growth is amortised.
const USERS: i64 = 100_000;

/// Net heap bytes per key after claiming every key `slots` gives for each of
/// `USERS` users, on a fresh store.
fn bytes_per_session(slots: &[&str]) -> f64 {
    let store = MemoryStore::new();
    let owner = Owner::new("eu", "a", "http://10.0.0.1:7000/kick");
    let absent = OwnerState::absent();
    let region = Region::new(GLOBAL);
    for uid in 1..=USERS {
        for slot in slots {
            let key = Key::new("bench", "prod", uid).with_slot(*slot);
            let claimed = block_on(store.claim_cas(&key, &owner, "login-000001", &absent));
            assert_eq!(
                claimed.expect("claim"),
                CasOutcome::Written { generation: 1 }
            );
        }
    }
    let stats = region.change();
    drop(store);
    // Counts of a few hundred million at most: exact enough in f64.
    #[allow(clippy::cast_precision_loss)]
    let net = stats.bytes_allocated as f64 - stats.bytes_deallocated as f64
        + stats.bytes_reallocated as f64;
    #[allow(clippy::cast_precision_loss)]
    let sessions = (USERS * i64::try_from(slots.len()).expect("a few slots")) as f64;
    net / sessions
}

fn main() {
    println!("| users' slots | heap bytes per session |");
    println!("|---|---|");
    for (name, slots) in [
        ("default slot only", &[""][..]),
        ("default slot + \"mobile\"", &["", "mobile"][..]),
        ("\"pc\" + \"mobile\"", &["pc", "mobile"][..]),
    ] {
        println!("| {name} | {:.1} |", bytes_per_session(slots));
    }
}
