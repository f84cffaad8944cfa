//! The lease contract suite on the in-memory backend.

use std::sync::Arc;

use unique_lease::{ManualClock, MemoryDirectory};
use unique_lease_contract::{self as contract, Subject};

async fn memory() -> Subject {
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    Subject::new(Arc::new(MemoryDirectory::with_clock(clock.clone())), clock)
}

unique_lease_contract::lease_contract_tests!(memory);

/// The sweep cases (D12) with the directory's rows.
async fn memory_rows() -> Subject {
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    Subject::with_rows(Arc::new(MemoryDirectory::with_clock(clock.clone())), clock)
}

unique_lease_contract::lease_sweep_tests!(memory_rows);

/// The single entry point runs every case too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_runs_every_case() {
    contract::run_all(memory).await;
    assert!(
        contract::CASES.len() >= 30,
        "{} cases",
        contract::CASES.len()
    );
}
