//! The lease contract suite (`unique-lease-contract`, D1–D10 and N1–N4) run against
//! `FjallDirectory`, one test per case, each on a fresh store in its own temporary
//! directory (on disk, so every grant is committed and fsynced for real).

use std::sync::Arc;

use tempfile::TempDir;
use unique_lease::ManualClock;
use unique_lease_contract::{self as contract, Subject};
use unique_store_fjall::FjallStore;

async fn subject() -> Subject {
    let dir = TempDir::new().expect("tempdir");
    let store = FjallStore::open(dir.path().join("unique.fjall")).expect("open the store");
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    // A second directory over the same store and clock, as another task would take one.
    let directory = store.directory_with_clock(clock.clone());
    let peer = store.directory_with_clock(clock.clone());
    Subject::new(Arc::new(directory), clock)
        .with_peer(Arc::new(peer))
        .keep_alive(Arc::new((store, dir)))
}

unique_lease_contract::lease_contract_tests!(subject);

/// The sweep cases (D12) with the directory's rows.
async fn rows_subject() -> Subject {
    let dir = TempDir::new().expect("tempdir");
    let store = FjallStore::open(dir.path().join("unique.fjall")).expect("open the store");
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    let directory = store.directory_with_clock(clock.clone());
    Subject::with_rows(Arc::new(directory), clock).keep_alive(Arc::new((store, dir)))
}

unique_lease_contract::lease_sweep_tests!(rows_subject);

/// Leases, registrations and the epoch counter are durable: a reopened store still has
/// the holding, and the next grant of any room is fenced above it (D4 across restarts).
/// An imported dump moves the counter above its epochs, and a second import of it
/// changes nothing.
#[tokio::test]
async fn leases_survive_a_reopen_and_imports_keep_epochs_ordered() {
    use std::time::{Duration, SystemTime};
    use unique_lease::{Directory, LeaseDump, LeaseRow, NodeRegistry};

    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("unique.fjall");
    let ttl = Duration::from_mins(1);
    let first = {
        let store = FjallStore::open(&path).expect("open");
        let leases = store.directory();
        leases
            .register_node("n1", "127.0.0.1:9001", ttl)
            .await
            .expect("register");
        leases
            .ensure_owner("room", "n1", SystemTime::now(), ttl)
            .await
            .expect("grant")
    };
    let store = FjallStore::open(&path).expect("reopen");
    let leases = store.directory();
    let kept = leases.lookup("room").await.expect("lookup").expect("kept");
    assert_eq!(
        (kept.lease_token.as_str(), kept.epoch),
        (first.lease_token.as_str(), first.epoch)
    );
    assert!(leases.lookup_node("n1").await.expect("node").is_some());
    let other = leases
        .ensure_owner("other", "n2", SystemTime::now(), ttl)
        .await
        .expect("grant");
    assert!(
        other.epoch > first.epoch,
        "{} after {}",
        other.epoch,
        first.epoch
    );

    let dump = LeaseDump {
        last_epoch: 40,
        leases: vec![(
            "imported".into(),
            LeaseRow {
                node_id: "n3".into(),
                lease_token: "t".into(),
                epoch: 41,
                expires_ms: 0,
                ttl_ms: None,
            },
        )],
        nodes: Vec::new(),
    };
    leases.import(dump.clone()).await.expect("import");
    leases.import(dump).await.expect("import again");
    let expired = leases
        .lookup("imported")
        .await
        .expect("lookup")
        .expect("row");
    assert_eq!((expired.epoch, expired.node_id.as_str()), (41, "n3"));
    let next = leases
        .ensure_owner("imported", "n2", SystemTime::now(), ttl)
        .await
        .expect("grant");
    assert_eq!(next.epoch, 42);
}
