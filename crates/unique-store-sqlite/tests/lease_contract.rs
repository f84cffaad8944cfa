//! The lease contract suite (`unique-lease-contract`, D1–D10 and N1–N4) run against
//! `SqliteDirectory`, one test per case, each on a fresh file in its own temporary
//! directory (on disk, so WAL and the file locks are real).

use std::sync::Arc;

use tempfile::TempDir;
use unique_lease::ManualClock;
use unique_lease_contract::{self as contract, Subject};
use unique_store_sqlite::SqliteDirectory;

async fn subject() -> Subject {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("leases.db");
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    let open = || {
        SqliteDirectory::builder(&path)
            .clock(clock.clone())
            .open()
            .expect("open the lease directory")
    };
    let directory = open();
    // Another process's directory: its own connection to the same file, the same clock.
    let peer = open();
    Subject::new(Arc::new(directory), clock.clone())
        .with_peer(Arc::new(peer))
        .keep_alive(Arc::new(dir))
}

unique_lease_contract::lease_contract_tests!(subject);

/// The sweep cases (D12) with the directory's rows; `synchronous = NORMAL`, so that a
/// hundred thousand grants do not wait for as many fsyncs (durability is not what they test).
async fn rows_subject() -> Subject {
    let dir = TempDir::new().expect("tempdir");
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    let directory = SqliteDirectory::builder(dir.path().join("leases.db"))
        .clock(clock.clone())
        .synchronous(unique_store_sqlite::Synchronous::Normal)
        .open()
        .expect("open the lease directory");
    Subject::with_rows(Arc::new(directory), clock).keep_alive(Arc::new(dir))
}

unique_lease_contract::lease_sweep_tests!(rows_subject);
