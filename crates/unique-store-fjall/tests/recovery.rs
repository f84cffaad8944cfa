//! A failed fsync does not stop the store for good: the group it failed and every write
//! until the writer recovers answer `Unavailable`, readiness fails meanwhile, and the writer
//! then opens the database again from its journal, the way a crash recovery does, without a
//! restart. Everything acknowledged before survives, and gens keep growing (I2).

use std::time::{Duration, Instant};

use unique_core::{Key, Owner, Store, VacantClaim};
use unique_store_fjall::FjallStore;

fn owner() -> Owner {
    Owner::new("eu", "c1", "http://127.0.0.1:9/kick")
}

async fn claim(store: &FjallStore, key: &Key, claim_id: &str) -> Result<i64, unique_core::Error> {
    match store.claim_vacant(key, &owner(), claim_id).await? {
        VacantClaim::Written { generation } => Ok(generation),
        other => {
            // Occupied: a fenced claim over what was read.
            let VacantClaim::Occupied(snap) = other else {
                panic!("unexpected {other:?}")
            };
            match store.claim_cas(key, &owner(), claim_id, &snap).await? {
                unique_core::CasOutcome::Written { generation } => Ok(generation),
                lost @ unique_core::CasOutcome::LostRace { .. } => panic!("no race here: {lost:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_fails_closed_then_the_store_recovers_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = FjallStore::open(&path).unwrap();
    let (a, b) = (Key::new("game", "prod", 1), Key::new("game", "prod", 2));
    assert_eq!(claim(&store, &a, "a-1").await.unwrap(), 1);
    store.check_ready().await.expect("ready before the fault");

    store.fail_next_fsyncs(1);
    let failed = claim(&store, &b, "b-1").await.unwrap_err();
    assert!(failed.is_unavailable(), "{failed:?}");
    let why = store.check_ready().await.unwrap_err();
    assert!(
        why.to_string().contains("fsync"),
        "readiness says why: {why}"
    );
    // Reads of what was durable go on while writes fail.
    assert_eq!(store.read_owner(&a).await.unwrap().generation, 1);

    let deadline = Instant::now() + Duration::from_secs(10);
    while store.check_ready().await.is_err() {
        assert!(Instant::now() < deadline, "the store never recovered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(claim(&store, &a, "a-2").await.unwrap(), 2);
    let b_gen = claim(&store, &b, "b-2").await.unwrap();
    assert!(b_gen >= 1);
    drop(store);

    // What was acknowledged is on disk.
    let store = FjallStore::open(&path).unwrap();
    assert_eq!(store.read_owner(&a).await.unwrap().generation, 2);
    assert_eq!(store.read_owner(&b).await.unwrap().generation, b_gen);
}
