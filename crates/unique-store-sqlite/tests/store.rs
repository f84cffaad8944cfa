//! Behaviour specific to the SQLite store: durability across reopen, startup
//! errors, lock contention, group commit under concurrent tasks, odd stored data.
//! The generic C1–C10 behaviour is in `contract.rs`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Fixture;
use rusqlite::Connection;
use unique_core::{Arbiter, CasOutcome, ClaimInput, Key, Owner, OwnerState, RecentClaims, Store};
use unique_store_contract::{RawRecord, RawWriter};
use unique_store_sqlite::{SqliteStore, Synchronous};

fn owner(n: usize) -> Owner {
    Owner::new("r", "c", format!("http://node-{n}.test/kick"))
}

fn claim(key: &Key, n: usize, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: owner(n),
        claim_id: claim_id.into(),
    }
}

fn open_error(path: &std::path::Path) -> String {
    SqliteStore::open(path)
        .map(|_| ())
        .expect_err("open must fail")
        .to_string()
}

/// I2 across restarts: gens continue from the file, never reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_continues_generations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unique.db");
    let key = Key::new("p", "e", 1);
    {
        let arbiter = Arbiter::new(SqliteStore::open(&path).unwrap());
        assert_eq!(
            arbiter
                .claim(&claim(&key, 1, "a"))
                .await
                .unwrap()
                .generation,
            1
        );
        assert_eq!(
            arbiter
                .claim(&claim(&key, 2, "b"))
                .await
                .unwrap()
                .generation,
            2
        );
        assert!(arbiter.release(&key, 2).await.unwrap());
    }
    let store = SqliteStore::open(&path).unwrap();
    let snap = store.read_owner(&key).await.unwrap();
    assert_eq!(
        snap,
        OwnerState {
            exists: true,
            generation: 2,
            owner: None,
            owner_corrupt: false,
            claim_id: None,
            recent_claims: RecentClaims::from_wins([("a", 1), ("b", 2)]),
        },
        "the tombstone, its gen and its recent claims survive the reopen"
    );
    let arbiter = Arbiter::new(store);
    let outcome = arbiter.claim(&claim(&key, 3, "c")).await.unwrap();
    assert_eq!((outcome.generation, outcome.prev_generation), (3, 2));
    // The claim made after the reopen is replayable with the stored gen.
    let replay = arbiter.claim(&claim(&key, 3, "c")).await.unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.generation, 3);
}

/// Every acknowledged claim of many concurrent tasks is in the file after a
/// reopen, and each got gen 1 on its own key (group commit answers each caller
/// with its own statement's result).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_are_all_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unique.db");
    let tasks = 200;
    {
        let arbiter = Arbiter::new(SqliteStore::open(&path).unwrap());
        let handles: Vec<_> = (0..tasks)
            .map(|i| {
                let arbiter = arbiter.clone();
                tokio::spawn(async move {
                    let key = Key::new("p", "e", i64::try_from(i).unwrap() + 1);
                    arbiter.claim(&claim(&key, i, &format!("c{i}"))).await
                })
            })
            .collect();
        for handle in handles {
            assert_eq!(handle.await.unwrap().unwrap().generation, 1);
        }
    }
    let conn = Connection::open(&path).unwrap();
    let (count, gens): (i64, i64) = conn
        .query_row("SELECT count(*), sum(gen) FROM records", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let tasks = i64::try_from(tasks).unwrap();
    assert_eq!((count, gens), (tasks, tasks));
}

/// Many tasks claiming one key from the same snapshot through one store:
/// exactly one wins, the others lose the race and carry the winner's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_snapshot_race_has_one_winner_and_losers_see_it() {
    let fixture = Fixture::new();
    let key = Key::new("p", "e", 7);
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let handles: Vec<_> = (0..32)
        .map(|i| {
            let store = fixture.store.clone();
            let key = key.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let cid = format!("c{i}");
                (
                    cid.clone(),
                    store
                        .claim_cas(&key, &owner(i), &cid, &OwnerState::absent())
                        .await,
                )
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for handle in handles {
        match handle.await.unwrap() {
            (cid, Ok(CasOutcome::Written { generation })) => winners.push((cid, generation)),
            (_, Ok(CasOutcome::LostRace { current })) => losers.push(current),
            (_, Err(other)) => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let (winner_cid, generation) = &winners[0];
    assert_eq!(*generation, 1);
    for current in losers {
        let current = current.expect("the loser carries the record");
        assert_eq!(current.generation, 1);
        assert_eq!(current.claim_id.as_ref(), Some(winner_cid));
    }
}

#[test]
fn open_fails_clearly_when_the_directory_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let msg = open_error(&dir.path().join("nope").join("unique.db"));
    assert!(msg.contains("does not exist"), "{msg}");
    assert!(msg.contains("nope"), "the message names the path: {msg}");
}

#[test]
fn open_fails_clearly_when_the_parent_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let msg = open_error(&file.join("unique.db"));
    assert!(msg.contains("is not a directory"), "{msg}");
}

#[test]
fn open_fails_clearly_when_the_path_is_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let msg = open_error(dir.path());
    assert!(msg.contains("is a directory"), "{msg}");
}

#[test]
fn open_fails_clearly_on_a_file_that_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unique.db");
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    let msg = open_error(&path);
    assert!(msg.contains("not an sqlite database"), "{msg}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        vec![b'x'; 4096],
        "the foreign file is left untouched"
    );
}

#[test]
fn open_refuses_another_applications_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
        .unwrap();
    let msg = open_error(&path);
    assert!(msg.contains("another application"), "{msg}");
}

#[test]
fn open_refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unique.db");
    drop(SqliteStore::open(&path).unwrap());
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 99")
        .unwrap();
    let msg = open_error(&path);
    assert!(msg.contains("schema version 99 is newer"), "{msg}");
}

/// A file of the previous release (schema version 1: no `won` column), made here
/// with that release's DDL, opens: the column is added (NULL on the old rows,
/// which read as no recent claims), the version becomes 2, the old records keep
/// working (a replay of the stored claim, a new claim, a release) and the file
/// opens again unchanged. A file set back to version 1 by hand after that (to
/// run the older release on it) is brought forward again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_schema_file_is_migrated_and_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unique.db");
    let old = Connection::open(&path).unwrap();
    old.execute_batch(
        "PRAGMA page_size = 1024;
         PRAGMA journal_mode = WAL;
         CREATE TABLE records (
             pk    TEXT PRIMARY KEY NOT NULL,
             gen   INTEGER NOT NULL,
             owner TEXT,
             cid   TEXT
         ) WITHOUT ROWID;
         PRAGMA application_id = 1970170225;
         PRAGMA user_version = 1;
         INSERT INTO records VALUES ('p#e#1', 3, '{\"endpoint\":\"http://node-1.test/kick\"}', 'c3');
         INSERT INTO records VALUES ('p#e#2', 5, '', NULL);",
    )
    .unwrap();
    drop(old);
    let version = |path: &std::path::Path| -> (i64, Vec<String>) {
        let conn = Connection::open(path).unwrap();
        let version = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        let mut columns = conn
            .prepare("SELECT name FROM pragma_table_info('records')")
            .unwrap();
        let columns = columns
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        (version, columns)
    };
    let migrated = (
        2,
        ["pk", "gen", "owner", "cid", "won"]
            .map(String::from)
            .to_vec(),
    );

    let (live, released) = (Key::new("p", "e", 1), Key::new("p", "e", 2));
    {
        let store = SqliteStore::open(&path).expect("a file of the previous release opens");
        assert_eq!(version(&path), migrated);
        let snap = store.read_owner(&live).await.unwrap();
        assert_eq!(
            (
                snap.generation,
                snap.claim_id.as_deref(),
                snap.owner.is_some()
            ),
            (3, Some("c3"), true)
        );
        assert!(snap.recent_claims.is_empty(), "NULL won: no recent claims");
        let tombstone = store
            .read_owners(std::slice::from_ref(&released))
            .await
            .unwrap();
        let tombstone = tombstone[0].as_ref().unwrap();
        assert_eq!((tombstone.generation, tombstone.owner.as_ref()), (5, None));
        let arbiter = Arbiter::new(store);
        let replay = arbiter.claim(&claim(&live, 1, "c3")).await.unwrap();
        assert!(replay.replayed && replay.generation == 3, "{replay:?}");
        let won = arbiter.claim(&claim(&live, 2, "c4")).await.unwrap();
        assert_eq!(won.generation, 4);
        let first = arbiter.claim(&claim(&released, 1, "t")).await.unwrap();
        assert_eq!(first.generation, 6);
        assert!(arbiter.release(&live, 4).await.unwrap());
    }
    // Reopened (with the record cache on this time): what was written, with its
    // recent claims, and nothing migrated twice.
    let store = SqliteStore::builder(&path)
        .record_cache(100)
        .open()
        .expect("the migrated file opens again");
    assert_eq!(version(&path), migrated);
    let snap = store.read_owner(&live).await.unwrap();
    assert_eq!((snap.generation, snap.owner.as_ref()), (4, None));
    assert_eq!(snap.recent_claims, RecentClaims::from_wins([("c4", 4)]));
    let snap = store.read_owner(&released).await.unwrap();
    assert_eq!(snap.recent_claims, RecentClaims::from_wins([("t", 6)]));
    drop(store);
    let stored: Option<String> = Connection::open(&path)
        .unwrap()
        .query_row("SELECT won FROM records WHERE pk = 'p#e#1'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(stored.as_deref(), Some(r#"[["c4",4]]"#));

    // Set back to version 1 by hand, the column still there: brought forward again.
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 1")
        .unwrap();
    let store = SqliteStore::open(&path).expect("opens");
    assert_eq!(version(&path), migrated);
    let snap = store.read_owner(&Key::new("p", "e", 1)).await.unwrap();
    assert_eq!(snap.recent_claims, RecentClaims::from_wins([("c4", 4)]));
}

/// The startup check is bounded: a file locked by another process fails after
/// the busy timeout instead of hanging.
#[test]
fn open_fails_when_the_file_stays_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unique.db");
    drop(SqliteStore::open(&path).unwrap());
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let err = SqliteStore::builder(&path)
        .busy_timeout(Duration::from_millis(50))
        .open()
        .expect_err("the file is locked");
    assert!(err.is_unavailable());
    assert!(err.to_string().contains("locked"), "{err}");
    other.execute_batch("ROLLBACK").unwrap();
    SqliteStore::open(&path).expect("opens once the lock is gone");
}

/// C8: a write lock held past the busy timeout is Unavailable, never a lost
/// race or Throttled, and writes nothing; the store recovers when the lock goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_by_another_process_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unique.db");
    let store = SqliteStore::builder(&path)
        .busy_timeout(Duration::from_millis(50))
        .open()
        .unwrap();
    let key = Key::new("p", "e", 1);
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = store
        .claim_cas(&key, &owner(1), "a", &OwnerState::absent())
        .await
        .expect_err("the writer cannot get the lock");
    assert!(err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("locked"), "{err}");
    // WAL: reads go on while another connection holds the write lock.
    assert!(!store.read_owner(&key).await.unwrap().exists);
    other.execute_batch("ROLLBACK").unwrap();
    let outcome = store
        .claim_cas(&key, &owner(1), "a", &OwnerState::absent())
        .await
        .unwrap();
    assert_eq!(outcome, CasOutcome::Written { generation: 1 });
}

/// Values of unexpected types (a record edited by hand) are a fault, or a
/// corrupt owner, never a panic or a wrong gen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_edited_values_of_the_wrong_type() {
    let fixture = Fixture::new();
    fixture.raw.execute(
        "INSERT INTO records (pk, gen, owner, cid) VALUES ('p#e#1', 'not a number', '{}', 'c');
         INSERT INTO records (pk, gen, owner, cid) VALUES ('p#e#2', 3, x'7b7d', 'c');
         INSERT INTO records (pk, gen, owner, cid)
             VALUES ('p#e#3', 3, '{\"endpoint\":\"http://h\"}', x'00');",
    );
    let gen_text = fixture.store.read_owner(&Key::new("p", "e", 1)).await;
    let err = gen_text.expect_err("a non-integer gen cannot be read");
    assert!(
        err.is_unavailable() && err.to_string().contains("unexpected stored data"),
        "{err}"
    );

    let blob_owner = fixture
        .store
        .read_owner(&Key::new("p", "e", 2))
        .await
        .unwrap();
    assert!(blob_owner.owner_corrupt && blob_owner.owner.is_none());
    assert!(
        fixture
            .store
            .current(&Key::new("p", "e", 2))
            .await
            .unwrap_err()
            .is_unavailable()
    );

    let blob_cid = fixture.store.read_owner(&Key::new("p", "e", 3)).await;
    assert!(blob_cid.unwrap_err().is_unavailable());
}

/// NORMAL is selectable and behaves the same for every operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normal_synchronous_is_selectable() {
    let fixture = Fixture::with(Synchronous::Normal);
    assert_eq!(fixture.store.synchronous(), Synchronous::Normal);
    let key = Key::new("p", "e", 1);
    fixture
        .raw
        .put_raw(
            &key,
            RawRecord {
                generation: 41,
                owner: Some(String::new()),
                claim_id: None,
                won: None,
            },
        )
        .await
        .unwrap();
    let arbiter = Arbiter::new(fixture.store.clone());
    assert_eq!(
        arbiter
            .claim(&claim(&key, 1, "a"))
            .await
            .unwrap()
            .generation,
        42
    );
    fixture.store.check().await.unwrap();
}

/// A caller that gives up mid-claim leaves the writer working for everyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_claim_does_not_stop_the_writer() {
    let fixture = Fixture::new();
    let store = fixture.store.clone();
    let key = Key::new("p", "e", 1);
    let absent = OwnerState::absent();
    for i in 0..50 {
        let new_owner = owner(i);
        let fut = store.claim_cas(&key, &new_owner, "x", &absent);
        // Polled once (queued or not), then dropped.
        let _ = futures::poll!(Box::pin(fut));
    }
    let other = Key::new("p", "e", 2);
    let outcome = store
        .claim_cas(&other, &owner(1), "y", &OwnerState::absent())
        .await
        .unwrap();
    assert_eq!(outcome, CasOutcome::Written { generation: 1 });
    let snap = store.read_owner(&key).await.unwrap();
    assert!(
        snap.generation <= 1,
        "at most one of the cancelled claims was applied"
    );
}

/// Readiness is the pool's cheap read: ready on a working file without writing the
/// sentinel key, `Unavailable` once the records table cannot be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_ready_reads_the_file_and_fails_when_it_cannot() {
    let fixture = Fixture::new();
    let store: Arc<dyn Store> = fixture.store.clone();
    store.check_ready().await.unwrap();
    let sentinel = store.read_owner(&unique_core::ready_key()).await.unwrap();
    assert!(!sentinel.exists, "readiness writes nothing");

    Connection::open(fixture.store.path())
        .unwrap()
        .execute_batch("DROP TABLE records")
        .unwrap();
    let err = store.check_ready().await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
}
