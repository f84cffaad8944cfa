//! `Arbiter::claim` on the memory store, each scenario beside the same store calls
//! made directly (`raw_claim`: read, replay check, fenced CAS, retry), so the
//! Arbiter's overhead reads as a ratio of the two.
//!
//! - `first_login`: a fresh key per claim (read + first-login CAS);
//! - `replay`: the same claim_id again (one read, the replay short-circuit);
//! - `replace_online`: two nodes taking one key from each other in turn (read +
//!   kick to a kicker that confirms at once + double-pin CAS);
//! - `race64`: 64 tasks on a two-worker runtime claiming one fresh key at once;
//!   the time is per race of 64 claims.
//!
//! Batches run inside one `block_on` (criterion's `iter_custom`), so the runtime's
//! entry cost is not part of a claim. Numbers: `BENCHMARKS.md`.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{
    arbiter, arbiter_race, current_thread, input, multi_thread, next_login, raw_claim, raw_race,
};
use criterion::{Criterion, criterion_main};
use unique_store_memory::MemoryStore;

fn first_login(c: &mut Criterion) {
    let rt = current_thread();
    let mut group = c.benchmark_group("first_login");
    // A fresh store per batch keeps the map from growing across samples.
    group.bench_function("arbiter", |b| {
        b.iter_custom(|iters| {
            let arbiter = arbiter();
            let mut claim = input(0, 1, "login");
            rt.block_on(async {
                let started = Instant::now();
                for uid in 1..=iters {
                    claim.key.uid = uid.cast_signed();
                    black_box(arbiter.claim(&claim).await.expect("claim"));
                }
                started.elapsed()
            })
        });
    });
    group.bench_function("store", |b| {
        b.iter_custom(|iters| {
            let store = MemoryStore::new();
            let mut claim = input(0, 1, "login");
            rt.block_on(async {
                let started = Instant::now();
                for uid in 1..=iters {
                    claim.key.uid = uid.cast_signed();
                    black_box(raw_claim(&store, &claim).await.expect("claim"));
                }
                started.elapsed()
            })
        });
    });
    group.finish();
}

fn replay(c: &mut Criterion) {
    let rt = current_thread();
    let mut group = c.benchmark_group("replay");
    let claim = input(1, 1, "login");
    let arbiter = arbiter();
    rt.block_on(arbiter.claim(&claim)).expect("first claim");
    group.bench_function("arbiter", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    let outcome = arbiter.claim(&claim).await.expect("replay");
                    debug_assert!(outcome.replayed);
                    black_box(outcome);
                }
                started.elapsed()
            })
        });
    });
    let store = arbiter.store().clone();
    group.bench_function("store", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    black_box(raw_claim(&store, &claim).await.expect("replay"));
                }
                started.elapsed()
            })
        });
    });
    group.finish();
}

fn replace_online(c: &mut Criterion) {
    let rt = current_thread();
    let mut group = c.benchmark_group("replace_online");
    // Two nodes with their own endpoints take the key from each other: every claim
    // finds the other node's session, kicks it (confirmed at once) and writes.
    // Each claim is a new login (its own claim_id), counted across batches.
    let mut nodes = [input(1, 1, "node-1"), input(1, 2, "node-2")];
    let mut login = 0_u64;
    let arbiter = arbiter();
    group.bench_function("arbiter", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    login += 1;
                    let node = next_login(&mut nodes[usize::from(login % 2 == 1)], login);
                    black_box(arbiter.claim(node).await.expect("claim"));
                }
                started.elapsed()
            })
        });
    });
    let store = MemoryStore::new();
    group.bench_function("store", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    login += 1;
                    let node = next_login(&mut nodes[usize::from(login % 2 == 1)], login);
                    black_box(raw_claim(&store, node).await.expect("claim"));
                }
                started.elapsed()
            })
        });
    });
    group.finish();
}

fn race64(c: &mut Criterion) {
    let rt = multi_thread();
    let mut group = c.benchmark_group("race64");
    group.bench_function("arbiter", |b| {
        b.iter_custom(|iters| {
            let arbiter = arbiter();
            rt.block_on(async {
                let started = Instant::now();
                for uid in 1..=iters {
                    black_box(arbiter_race(&arbiter, uid.cast_signed()).await);
                }
                started.elapsed()
            })
        });
    });
    group.bench_function("store", |b| {
        b.iter_custom(|iters| {
            let store = MemoryStore::new();
            rt.block_on(async {
                let started = Instant::now();
                for uid in 1..=iters {
                    black_box(raw_race(&store, uid.cast_signed()).await);
                }
                started.elapsed()
            })
        });
    });
    group.finish();
}

/// Shorter than criterion's defaults so the whole file runs in about a minute;
/// command-line flags still override.
fn configured() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args()
}

fn benches() {
    let mut criterion = configured();
    first_login(&mut criterion);
    replay(&mut criterion);
    replace_online(&mut criterion);
    race64(&mut criterion);
    criterion.final_summary();
}

criterion_main!(benches);
