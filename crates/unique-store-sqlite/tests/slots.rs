//! Device slots and the per-user listing (C10) in the SQLite file: each slot is a row
//! of its own (`project#env#uid#slot`), a row written before slots existed is the
//! default slot's, the record cache keeps slots apart, and a listing reads the file
//! (never the cache) and sees every claim and release answered before it.
//! The generic C10 cases are in `contract.rs`.

mod common;

use common::Fixture;
use rusqlite::Connection;
use unique_core::{Arbiter, ClaimInput, Key, Owner, OwnerState, Store, UserKey};
use unique_store_contract::{RawRecord, RawWriter};
use unique_store_sqlite::{ReadsOn, Synchronous};

fn login(key: &Key, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: Owner::new("r", "c", format!("http://{claim_id}.test/kick")),
        claim_id: claim_id.into(),
    }
}

/// `(pk, gen)` of every row of the file, in key order.
fn rows(fixture: &Fixture) -> Vec<(String, i64)> {
    let conn = Connection::open(fixture.raw.path()).unwrap();
    let mut stmt = conn
        .prepare("SELECT pk, gen FROM records ORDER BY pk")
        .unwrap();
    stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// `(slot, gen)` of the user's listing, sorted by slot.
async fn listed(store: &dyn Store, user: &UserKey) -> Vec<(String, i64)> {
    let mut sessions: Vec<(String, i64)> = store
        .list_sessions(user)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.slot, s.generation))
        .collect();
    sessions.sort();
    sessions
}

/// Claims on three slots of one user write three rows, each with its own gen, with the
/// record cache off and on: the default slot's row is the key as it was before slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_slot_is_a_row_of_its_own() {
    for record_cache in [0, 64] {
        let fixture = Fixture::with_cache(Synchronous::Full, ReadsOn::default(), record_cache);
        let arbiter = Arbiter::new(fixture.store.clone());
        let user = UserKey::new("p", "e", 1);
        for (slot, claim_id) in [("", "d1"), ("mobile", "m1"), ("pc", "p1"), ("mobile", "m2")] {
            arbiter
                .claim(&login(&user.key(slot), claim_id))
                .await
                .unwrap();
        }
        assert_eq!(
            rows(&fixture),
            [
                ("p#e#1".to_owned(), 1),
                ("p#e#1#mobile".to_owned(), 2),
                ("p#e#1#pc".to_owned(), 1)
            ],
            "cache {record_cache}"
        );
        let default = fixture.store.read_owner(&user.key("")).await.unwrap();
        assert_eq!(
            (default.generation, default.claim_id.as_deref()),
            (1, Some("d1")),
            "cache {record_cache}: the slots' claims never touched the default slot"
        );
    }
}

/// A row written before slots existed (`project#env#uid`) is the default slot's: read
/// through `Key::new` and listed with slot `""`, next to the slots claimed since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_from_before_slots_is_the_default_slot() {
    let fixture = Fixture::new();
    fixture.raw.execute(
        r#"INSERT INTO records (pk, gen, owner, cid) VALUES ('old#prod#9', 5, '{"endpoint":"http://old.test/kick"}', 'c-old')"#,
    );
    let user = UserKey::new("old", "prod", 9);
    let read = fixture
        .store
        .read_owner(&Key::new("old", "prod", 9))
        .await
        .unwrap();
    assert_eq!(
        (read.generation, read.claim_id.as_deref()),
        (5, Some("c-old"))
    );
    Arbiter::new(fixture.store.clone())
        .claim(&login(&user.key("tablet"), "t1"))
        .await
        .unwrap();
    assert_eq!(
        listed(fixture.store.as_ref(), &user).await,
        [(String::new(), 5), ("tablet".to_owned(), 1)]
    );
}

/// With the record cache on, `forget_cached` of a slot's key drops that slot's record:
/// its next read sees what a tool wrote to the file behind the store's back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_cached_forgets_the_slots_record() {
    let fixture = Fixture::with_cache(Synchronous::Full, ReadsOn::default(), 64);
    let key = Key::new("p", "e", 2).with_slot("pc");
    let arbiter = Arbiter::new(fixture.store.clone());
    arbiter.claim(&login(&key, "c1")).await.unwrap();
    // The raw hook calls `forget_cached(&key)` after its write.
    fixture
        .raw
        .put_raw(
            &key,
            RawRecord {
                generation: 7,
                owner: Some(String::new()),
                claim_id: None,
                won: None,
            },
        )
        .await
        .unwrap();
    let read = fixture.store.read_owner(&key).await.unwrap();
    assert_eq!(
        read,
        OwnerState {
            exists: true,
            generation: 7,
            ..OwnerState::absent()
        }
    );
}

/// A listing reads the file, with the record cache on too: it sees each claim and
/// release the moment it was answered, and a tombstone or a gen-0 row is not listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_sees_every_answered_write() {
    let fixture = Fixture::with_cache(Synchronous::Full, ReadsOn::default(), 64);
    let store = fixture.store.as_ref();
    let arbiter = Arbiter::new(fixture.store.clone());
    let user = UserKey::new("p", "e", 3);
    assert_eq!(listed(store, &user).await, []);
    let pc = arbiter.claim(&login(&user.key("pc"), "p1")).await.unwrap();
    assert_eq!(listed(store, &user).await, [("pc".to_owned(), 1)]);
    arbiter.claim(&login(&user.key(""), "d1")).await.unwrap();
    arbiter.claim(&login(&user.key("pc"), "p2")).await.unwrap();
    assert_eq!(
        listed(store, &user).await,
        [(String::new(), 1), ("pc".to_owned(), 2)]
    );
    assert!(
        !arbiter
            .release(&user.key("pc"), pc.generation)
            .await
            .unwrap()
    );
    assert!(arbiter.release(&user.key("pc"), 2).await.unwrap());
    fixture
        .raw
        .execute("INSERT INTO records (pk, gen, owner, cid) VALUES ('p#e#3#zero', 0, '{\"endpoint\":\"http://z.test/k\"}', 'z')");
    assert_eq!(listed(store, &user).await, [(String::new(), 1)]);
}
