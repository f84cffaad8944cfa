//! The store contract suite (`unique-store-contract`, C1–C10 and the traps) run
//! against `SqliteStore`: every case on a fresh database file in its own
//! temporary directory (on disk, so WAL and the fsync path are the real ones).
//! One test per case with the default reads (on the calling task); the single
//! entry point runs every case again with reads on the blocking pool, so both
//! read modes pass the whole suite, and again with the record cache on.

mod common;

use unique_store_contract::store_contract_tests;

store_contract_tests!(common::subject);
unique_store_contract::online_count_tests!(common::subject);

/// The single entry point runs the same cases in sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_passes() {
    unique_store_contract::run_all(common::subject).await;
}

/// The whole suite again with the record cache on (the raw writer forgets
/// each key it writes, see `common::SqliteRaw`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_passes_with_the_record_cache() {
    unique_store_contract::run_all(common::subject_with_record_cache).await;
}

/// The whole suite again with `ReadsOn::BlockingPool`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_passes_with_reads_on_the_blocking_pool() {
    unique_store_contract::run_all(common::subject_reading_on_blocking_pool).await;
}
