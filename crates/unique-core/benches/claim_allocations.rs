//! Heap allocations per claim, through the `Arbiter` and as bare store calls, for
//! the scenarios of `arbiter_claim`. Prints a table; `cargo bench -p unique-core
//! --bench claim_allocations`.
//!
//! The counting allocator is `stats_alloc`'s wrapper around the system allocator.
//! A hand-written `GlobalAlloc` would need `unsafe impl`, which the workspace's
//! `unsafe_code = "forbid"` rejects even with an `allow` in this file (forbid
//! cannot be lowered); the crate keeps that unsafe code out of this workspace.
//! The counters are process-wide, so each scenario runs alone on this thread
//! (and, for the race, on a runtime doing nothing else).

mod common;

use std::alloc::System;

use common::{
    RACERS, arbiter, arbiter_race, current_thread, input, multi_thread, next_login, raw_claim,
    raw_race,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use unique_store_memory::MemoryStore;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Claims per scenario; large enough that map growth is amortised.
const CLAIMS: u32 = 20_000;

/// Allocations and bytes per claim over `claims` claims run by `run`.
fn per_claim(claims: u32, run: impl FnOnce()) -> (f64, f64) {
    let region = Region::new(GLOBAL);
    run();
    let stats = region.change();
    let claims = f64::from(claims);
    // Counts of a few million at most: exact in f64.
    #[allow(clippy::cast_precision_loss)]
    let per = (
        stats.allocations as f64 / claims,
        stats.bytes_allocated as f64 / claims,
    );
    per
}

fn first_login() -> [(f64, f64); 2] {
    let rt = current_thread();
    let arbiter = arbiter();
    let store = MemoryStore::new();
    let mut claim = input(0, 1, "login");
    let through_arbiter = per_claim(CLAIMS, || {
        rt.block_on(async {
            for uid in 1..=CLAIMS {
                claim.key.uid = i64::from(uid);
                arbiter.claim(&claim).await.expect("claim");
            }
        });
    });
    let direct = per_claim(CLAIMS, || {
        rt.block_on(async {
            for uid in 1..=CLAIMS {
                claim.key.uid = i64::from(uid);
                raw_claim(&store, &claim).await.expect("claim");
            }
        });
    });
    [through_arbiter, direct]
}

fn replay() -> [(f64, f64); 2] {
    let rt = current_thread();
    let arbiter = arbiter();
    let claim = input(1, 1, "login");
    rt.block_on(arbiter.claim(&claim)).expect("first claim");
    let store = arbiter.store().clone();
    let through_arbiter = per_claim(CLAIMS, || {
        rt.block_on(async {
            for _ in 0..CLAIMS {
                assert!(arbiter.claim(&claim).await.expect("replay").replayed);
            }
        });
    });
    let direct = per_claim(CLAIMS, || {
        rt.block_on(async {
            for _ in 0..CLAIMS {
                raw_claim(&store, &claim).await.expect("replay");
            }
        });
    });
    [through_arbiter, direct]
}

fn replace_online() -> [(f64, f64); 2] {
    let rt = current_thread();
    let mut nodes = [input(1, 1, "node-1"), input(1, 2, "node-2")];
    let arbiter = arbiter();
    let store = MemoryStore::new();
    let through_arbiter = per_claim(CLAIMS, || {
        rt.block_on(async {
            for i in 0..CLAIMS {
                let node = next_login(&mut nodes[(i % 2) as usize], u64::from(i));
                arbiter.claim(node).await.expect("claim");
            }
        });
    });
    let direct = per_claim(CLAIMS, || {
        rt.block_on(async {
            for i in 0..CLAIMS {
                let node = next_login(&mut nodes[(i % 2) as usize], u64::from(i));
                raw_claim(&store, node).await.expect("claim");
            }
        });
    });
    [through_arbiter, direct]
}

fn race64() -> [(f64, f64); 2] {
    const RACES: u32 = 200;
    let rt = multi_thread();
    let arbiter = arbiter();
    let store = MemoryStore::new();
    // Per claim, not per race: every racer's claim counts, won or lost.
    let claims = RACES * u32::try_from(RACERS).expect("64 fits");
    let through_arbiter = per_claim(claims, || {
        rt.block_on(async {
            for uid in 1..=RACES {
                arbiter_race(&arbiter, i64::from(uid)).await;
            }
        });
    });
    let direct = per_claim(claims, || {
        rt.block_on(async {
            for uid in 1..=RACES {
                raw_race(&store, i64::from(uid)).await;
            }
        });
    });
    [through_arbiter, direct]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing useful either.
    println!(
        "{:<16} {:>16} {:>14} {:>16} {:>14}",
        "scenario", "arbiter allocs", "arbiter bytes", "store allocs", "store bytes"
    );
    for (name, [arbiter, store]) in [
        ("first_login", first_login()),
        ("replay", replay()),
        ("replace_online", replace_online()),
        ("race64", race64()),
    ] {
        println!(
            "{name:<16} {:>16.2} {:>14.0} {:>16.2} {:>14.0}",
            arbiter.0, arbiter.1, store.0, store.1
        );
    }
    println!("(per claim; race64 counts every racer's claim, won or lost, and the task spawns)");
}
