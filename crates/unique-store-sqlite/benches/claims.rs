//! Uncontended first-login claims per second through `unique_core::Arbiter` on
//! the SQLite store: one claim in flight versus 64 concurrent callers (where
//! group commit shares one fsync between many claims), with FULL and NORMAL
//! durability, and 64 callers with group commit off for comparison.
//!
//! Each claim is on a fresh key, so it is one strong read plus one conditional
//! INSERT, and with FULL its answer waits for the fsync.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use unique_core::{Arbiter, ClaimInput, Key, Owner};
use unique_store_sqlite::{SqliteStore, Synchronous};

struct Setup {
    name: &'static str,
    synchronous: Synchronous,
    in_flight: u64,
    max_batch: usize,
}

const SETUPS: [Setup; 5] = [
    Setup {
        name: "full/1-in-flight",
        synchronous: Synchronous::Full,
        in_flight: 1,
        max_batch: 256,
    },
    Setup {
        name: "full/64-in-flight",
        synchronous: Synchronous::Full,
        in_flight: 64,
        max_batch: 256,
    },
    Setup {
        name: "full/64-in-flight/no-group-commit",
        synchronous: Synchronous::Full,
        in_flight: 64,
        max_batch: 1,
    },
    Setup {
        name: "normal/1-in-flight",
        synchronous: Synchronous::Normal,
        in_flight: 1,
        max_batch: 256,
    },
    Setup {
        name: "normal/64-in-flight",
        synchronous: Synchronous::Normal,
        in_flight: 64,
        max_batch: 256,
    },
];

fn claims(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("first_login_claims");
    group
        .throughput(Throughput::Elements(1))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for setup in &SETUPS {
        // The bench's own directory, on the same disk as the target dir.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let store = SqliteStore::builder(dir.path().join("bench.db"))
            .synchronous(setup.synchronous)
            .max_batch(setup.max_batch)
            .open()
            .expect("open");
        let arbiter = Arbiter::new(store);
        let next_uid = Arc::new(AtomicI64::new(1));
        group.bench_function(BenchmarkId::from_parameter(setup.name), |b| {
            b.iter_custom(|iters| rt.block_on(run(&arbiter, &next_uid, iters, setup.in_flight)));
        });
    }
    group.finish();
}

/// Runs `iters` claims on fresh keys from `in_flight` concurrent tasks; returns the wall time.
async fn run(
    arbiter: &Arbiter<SqliteStore>,
    next_uid: &Arc<AtomicI64>,
    iters: u64,
    in_flight: u64,
) -> Duration {
    let remaining = Arc::new(AtomicU64::new(iters));
    let started = Instant::now();
    let tasks: Vec<_> = (0..in_flight.min(iters))
        .map(|_| {
            let arbiter = arbiter.clone();
            let next_uid = Arc::clone(next_uid);
            let remaining = Arc::clone(&remaining);
            tokio::spawn(async move {
                while remaining
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let uid = next_uid.fetch_add(1, Ordering::Relaxed);
                    let input = ClaimInput {
                        key: Key::new("bench", "prod", uid),
                        owner: Owner::new("r", "c", "http://node.test/kick"),
                        claim_id: format!("claim-{uid}"),
                    };
                    let outcome = arbiter.claim(&input).await.expect("claim");
                    assert_eq!(outcome.generation, 1);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("claim task");
    }
    started.elapsed()
}

// criterion_group! generates an undocumented pub fn.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::claims);
}
criterion_main!(group::benches);
