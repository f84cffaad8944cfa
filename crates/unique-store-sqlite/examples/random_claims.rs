//! A store-level probe of the durable claim path on random users:
//! `CLAIMS` first-login claims on uids uniform over 1..=10^8 from 64 concurrent
//! callers on one runtime thread, then claims/s and bytes written per claim.
//! Run it under `perf stat -e syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync`
//! (pinned with `taskset -c 0`) for fsyncs per claim.
//!
//! `cargo run --release -p unique-store-sqlite --example random_claims -- DIR PAGE_SIZE MAX_BATCH CLAIMS`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use unique_core::{Arbiter, ClaimInput, Key, Owner};
use unique_store_sqlite::SqliteStore;

const CALLERS: u64 = 64;

fn write_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

// Counts far below 2^52 become f64 exactly enough for a rate.
#[allow(clippy::cast_precision_loss)]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let page_size: i64 = args[2].parse().expect("page size");
    let max_batch: usize = args[3].parse().expect("max batch");
    let claims: u64 = args[4].parse().expect("claims");
    let path = dir.join("probe.db");
    {
        // A new file takes the page size set before its first write.
        let conn = rusqlite::Connection::open(&path).expect("create");
        conn.pragma_update(None, "page_size", page_size)
            .expect("page_size");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
    }
    let store = SqliteStore::builder(&path)
        .max_batch(max_batch)
        .open()
        .expect("open");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let arbiter = Arbiter::new(store);
    let remaining = Arc::new(AtomicU64::new(claims));
    let before = write_bytes();
    let started = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..CALLERS)
            .map(|i| {
                let arbiter = arbiter.clone();
                let remaining = Arc::clone(&remaining);
                tokio::spawn(async move {
                    let mut rng =
                        0x9e37_79b9_7f4a_7c15_u64 ^ (i + 1).wrapping_mul(0xff51_afd7_ed55_8ccd);
                    while remaining
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                        .is_ok()
                    {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let uid = i64::try_from(rng % 100_000_000).expect("fits") + 1;
                        let input = ClaimInput {
                            key: Key::new("bench", "prod", uid),
                            owner: Owner::new("r", "c", "http://node.test/kick"),
                            claim_id: format!("claim-{uid}"),
                        };
                        arbiter.claim(&input).await.expect("claim");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
    });
    let elapsed = started.elapsed();
    drop(arbiter);
    let written = write_bytes() - before;
    let per_claim = written as f64 / claims as f64;
    println!(
        "page_size={page_size} max_batch={max_batch} claims={claims} claims/s={:.0} bytes/claim={per_claim:.0}",
        claims as f64 / elapsed.as_secs_f64()
    );
}
