//! Memory the memory store keeps per session, in several shapes: users with only
//! the default slot, users with a second slot (whose record, and entry in the
//! shard's index of slots, the listing reads), a million users, sessions spread
//! over a thousand nodes (so the sharing of owners is not flattered by one node
//! holding them all), and keys logged into eight times (a full list of recent
//! wins, C9). Prints a table; `cargo bench -p unique-store-memory --bench resident`.
//!
//! Two measures per shape:
//! - **heap**: counted by `stats_alloc`'s wrapper around the system allocator (see
//!   `unique-core/benches/claim_allocations.rs` for why not a hand-written one): the
//!   bytes allocated minus the bytes freed while the sessions are claimed, so the
//!   growth of the maps is included and the claims' own temporaries are not. Bytes
//!   asked for, without the allocator's own overhead.
//! - **resident**: the growth of the process's resident set (`VmRSS`) over the
//!   same claims, which adds the allocator's headers and rounding. Each shape runs
//!   in a fresh child process, so memory freed by an earlier shape is not reused.

use std::alloc::System;
use std::process::Command;

use futures::executor::block_on;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use unique_core::{CasOutcome, Key, Owner, Store};
use unique_store_memory::MemoryStore;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// One shape of stored sessions.
struct Shape {
    users: i64,
    slots: &'static [&'static str],
    /// Distinct owners the sessions are spread over, in turn.
    nodes: usize,
    /// Claims per key, each replacing the last (from the next node, with a new claim_id).
    logins: usize,
}

const SHAPES: &[Shape] = &[
    Shape {
        users: 100_000,
        slots: &[""],
        nodes: 1,
        logins: 1,
    },
    Shape {
        users: 100_000,
        slots: &["", "mobile"],
        nodes: 1,
        logins: 1,
    },
    Shape {
        users: 100_000,
        slots: &["pc", "mobile"],
        nodes: 1,
        logins: 1,
    },
    Shape {
        users: 100_000,
        slots: &[""],
        nodes: 1_000,
        logins: 1,
    },
    Shape {
        users: 1_000_000,
        slots: &[""],
        nodes: 1,
        logins: 1,
    },
    Shape {
        users: 1_000_000,
        slots: &[""],
        nodes: 1_000,
        logins: 1,
    },
    Shape {
        users: 100_000,
        slots: &[""],
        nodes: 2,
        logins: 8,
    },
];

/// The process's resident set, in bytes.
fn resident() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kib * 1024.0
}

/// Claims every session of `shape` on a fresh store; returns the net heap bytes
/// and the resident bytes gained, per session.
fn measure(shape: &Shape) -> (f64, f64) {
    let store = MemoryStore::new();
    let nodes: Vec<Owner> = (0..shape.nodes)
        .map(|n| {
            Owner::new(
                "eu",
                "a",
                format!("http://10.0.{}.{}:7000/kick", n / 250, n % 250),
            )
        })
        .collect();
    let claim_ids: Vec<String> = (1..=shape.logins)
        .map(|n| format!("login-{n:06}"))
        .collect();
    let mut key = Key::new("bench", "prod", 0);
    let mut next_node = 0;
    let rss_before = resident();
    let region = Region::new(GLOBAL);
    for uid in 1..=shape.users {
        key.uid = uid;
        for slot in shape.slots {
            (*slot).clone_into(&mut key.slot);
            for (login, claim_id) in claim_ids.iter().enumerate() {
                let owner = &nodes[next_node];
                next_node = (next_node + 1) % nodes.len();
                let snap = block_on(store.read_owner(&key)).expect("read");
                let claimed = block_on(store.claim_cas(&key, owner, claim_id, &snap));
                let generation = i64::try_from(login).expect("a few logins") + 1;
                assert_eq!(claimed.expect("claim"), CasOutcome::Written { generation });
            }
        }
    }
    let stats = region.change();
    let rss_gained = resident() - rss_before;
    drop(store);
    // Counts of a few hundred million at most: exact enough in f64. `stats_alloc` already
    // adds a realloc's growth to `bytes_allocated` (and a shrink to `bytes_deallocated`);
    // `bytes_reallocated` is the same growth again, so it is not added.
    #[allow(clippy::cast_precision_loss)]
    let net = stats.bytes_allocated as f64 - stats.bytes_deallocated as f64;
    #[allow(clippy::cast_precision_loss)]
    let sessions = (shape.users * i64::try_from(shape.slots.len()).expect("a few slots")) as f64;
    (net / sessions, rss_gained / sessions)
}

fn main() {
    // A child measures the one shape it is given and prints its two figures.
    let mut args = std::env::args().skip_while(|arg| arg != "--shape").skip(1);
    if let Some(index) = args.next() {
        let shape = &SHAPES[index.parse::<usize>().expect("a shape index")];
        let (heap, rss) = measure(shape);
        println!("{heap} {rss}");
        return;
    }
    let exe = std::env::current_exe().expect("the bench's own path");
    println!(
        "| users | users' slots | nodes | logins per key | heap bytes per session | resident bytes per session |"
    );
    println!("|---|---|---|---|---|---|");
    for (index, shape) in SHAPES.iter().enumerate() {
        let output = Command::new(&exe)
            .args(["--shape", &index.to_string()])
            .output()
            .expect("run a shape in a child process");
        assert!(
            output.status.success(),
            "shape {index} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let figures = String::from_utf8(output.stdout).expect("utf-8 figures");
        let (heap, rss) = figures.trim().split_once(' ').expect("two figures");
        let (heap, rss): (f64, f64) = (heap.parse().expect("heap"), rss.parse().expect("rss"));
        let slots = shape
            .slots
            .iter()
            .map(|slot| {
                if slot.is_empty() {
                    "default".to_owned()
                } else {
                    format!("{slot:?}")
                }
            })
            .collect::<Vec<_>>()
            .join(" + ");
        println!(
            "| {} | {slots} | {} | {} | {heap:.1} | {rss:.1} |",
            shape.users, shape.nodes, shape.logins
        );
    }
}
