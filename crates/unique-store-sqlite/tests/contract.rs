//! The store contract suite (`unique-store-contract`, C1–C8 and the traps) run
//! against `SqliteStore`: every case on a fresh database file in its own
//! temporary directory (on disk, so WAL and the fsync path are the real ones).

mod common;

use unique_store_contract::store_contract_tests;

store_contract_tests!(common::subject);

/// The single entry point runs the same cases in sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_passes() {
    unique_store_contract::run_all(common::subject).await;
}
