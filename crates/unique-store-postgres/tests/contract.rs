//! The store contract suite (`unique-store-contract`, C1–C11 and the traps) run against
//! `PostgresStore` on a real PostgreSQL server (started by the test tooling, or the database
//! named by `UNIQUE_TEST_DATABASE_URL`), one test per case.

mod common;

use unique_store_contract::store_contract_tests;

store_contract_tests!(common::subject);
// C13 counts the whole table: each case on a table of its own.
unique_store_contract::online_count_tests!(common::subject_on_own_table);

/// The write-first cases (C11) run in full here: the store claims absent records and
/// tombstones in one statement, so none of them passes by skipping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_writes_first_over_absent_records_and_tombstones() {
    let subject = common::subject().await;
    assert_eq!(
        subject.store.vacant_claims(),
        unique_core::VacantClaims::AbsentAndTombstones
    );
}
