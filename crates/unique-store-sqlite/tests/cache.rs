//! The record cache through the store: reads stay linearizable while claims
//! commit. (The lock that keeps every other store off the file is in `lock.rs`.)

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use unique_core::{CasOutcome, Key, Owner, OwnerState, Store};
use unique_store_sqlite::SqliteStore;

fn owner(n: usize) -> Owner {
    Owner::new("r", "c", format!("http://node-{n}.test/kick"))
}

/// What one task saw of one key, in the order it saw it.
type Seen = Vec<(i64, Option<String>)>;

/// Many concurrent claims (and some releases) on a few keys, while readers read
/// them through the cache (`read_owner`) and straight from the file
/// (`read_owners`, which never uses the cache), alternately. Every reader's gens
/// of a key never go back, and each gen belongs to one claim_id. A cache set
/// before the commit, or a reader putting what it read into the cache, breaks
/// the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_never_go_back_while_claims_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteStore::builder(dir.path().join("unique.db"))
            .record_cache(1000)
            .open()
            .unwrap(),
    );
    let keys: Vec<Key> = (1..=3).map(|uid| Key::new("p", "e", uid)).collect();
    let stop = Arc::new(AtomicBool::new(false));

    let mut claimers = Vec::new();
    for task in 0..6 {
        let (store, keys) = (store.clone(), keys.clone());
        claimers.push(tokio::spawn(async move {
            let mut won: Vec<(Key, i64, String)> = Vec::new();
            for i in 0..120 {
                let key = &keys[(task + i) % keys.len()];
                let cid = format!("t{task}-{i}");
                let mut snap = store.read_owner(key).await.unwrap();
                loop {
                    match store.claim_cas(key, &owner(task), &cid, &snap).await {
                        Ok(CasOutcome::Written { generation }) => {
                            won.push((key.clone(), generation, cid.clone()));
                            if i.is_multiple_of(5) {
                                store.release(key, generation).await.unwrap();
                            }
                            break;
                        }
                        Ok(CasOutcome::LostRace { current: Some(now) }) => snap = now,
                        Ok(CasOutcome::LostRace { current: None }) => {
                            snap = store.read_owner(key).await.unwrap();
                        }
                        Err(e) => panic!("claim failed: {e:?}"),
                    }
                }
            }
            won
        }));
    }

    let mut readers = Vec::new();
    for task in 0..6 {
        let (store, key, stop) = (store.clone(), keys[task % keys.len()].clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            let mut seen: Seen = Vec::new();
            let mut last = 0;
            let mut n = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let (state, via): (OwnerState, &str) = if n.is_multiple_of(2) {
                    (store.read_owner(&key).await.unwrap(), "read_owner")
                } else {
                    let mut states = store.read_owners(std::slice::from_ref(&key)).await.unwrap();
                    (states.remove(0).unwrap(), "read_owners")
                };
                assert!(
                    state.generation >= last,
                    "{key}: gen went back from {last} to {} ({via}, read {n})",
                    state.generation
                );
                last = state.generation;
                seen.push((state.generation, state.claim_id));
                tokio::task::yield_now().await;
            }
            (key, seen)
        }));
    }

    // Which claim wrote each gen of each key.
    let mut writers: HashMap<(Key, i64), String> = HashMap::new();
    for claimer in claimers {
        for (key, generation, cid) in claimer.await.unwrap() {
            assert!(
                writers.insert((key.clone(), generation), cid).is_none(),
                "{key}: gen {generation} written twice"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut reads = 0;
    for reader in readers {
        let (key, seen) = reader.await.unwrap();
        reads += seen.len();
        for (generation, cid) in seen {
            if let Some(cid) = cid {
                assert_eq!(
                    writers.get(&(key.clone(), generation)),
                    Some(&cid),
                    "{key}: gen {generation} read with claim_id {cid}"
                );
            }
        }
    }
    assert!(
        reads > 100,
        "the readers ran while claims committed: {reads}"
    );
}
