//! Round trips per operation, counted on the wire (every `ReadyForQuery` the server sends
//! through a proxy) against a real PostgreSQL, with one pooled connection whose statements
//! are already prepared (the steady state of a running server).
//!
//! Run with `--nocapture` to see the numbers.

mod common;

use std::sync::Arc;

use common::claim;
use common::wire::{WireProxy, url_via};
use unique_core::{Arbiter, Key, Store};
use unique_store_contract::RivalKicker;

const TABLE: &str = "unique_round_trips";

// One connection's steady state walked through every operation in order; split, each part
// would repeat the warm-up.
#[allow(clippy::too_many_lines)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_per_claim_replay_lost_race_release_and_listing() {
    let server = common::server();
    let rival = common::store_on(&server, TABLE).await;
    let proxy = WireProxy::start(server.addr().expect("a private server")).await;
    let store = common::builder(&url_via(server.url(), proxy.addr()), TABLE)
        .max_connections(1)
        .build()
        .unwrap();
    // The startup check prepares every statement on the one connection. Its own inspection
    // query was prepared unnamed and is closed afterwards (one more round trip, at the next
    // request): a warm-up read absorbs it.
    store.check().await.unwrap();
    store.read_owner(&unique_core::ready_key()).await.unwrap();
    let arbiter = Arbiter::new(store.clone());
    let key = Key::new("roundtrips", "test", 1);

    let before = proxy.round_trips();
    let first = arbiter
        .claim(&claim(&key, "http://a.invalid/kick", "cid-a"))
        .await
        .unwrap();
    let first_login = proxy.round_trips() - before;
    assert_eq!(
        (first.generation, first_login),
        (1, 1),
        "the vacant write (C11)"
    );

    let before = proxy.round_trips();
    let replay = arbiter
        .claim(&claim(&key, "http://a.invalid/kick", "cid-a"))
        .await
        .unwrap();
    let replayed = proxy.round_trips() - before;
    assert!(replay.replayed);
    assert_eq!(
        replayed, 1,
        "replay: the failed vacant write hands back the record"
    );

    let before = proxy.round_trips();
    let second = arbiter
        .claim(&claim(&key, "http://b.invalid/kick", "cid-b"))
        .await
        .unwrap();
    let replacing = proxy.round_trips() - before;
    assert_eq!(
        (second.generation, replacing),
        (2, 2),
        "failed vacant write (with the record) + update"
    );

    // The rival writes gen 3 between our read and our CAS; the lost CAS hands back the
    // record, so the second attempt starts without a read.
    let kicker = Arc::new(RivalKicker::new(rival, key.clone()));
    let contended_arbiter = Arbiter::builder(store.clone())
        .kicker(Arc::clone(&kicker))
        .build();
    let before = proxy.round_trips();
    let won = contended_arbiter
        .claim(&claim(&key, "http://c.invalid/kick", "cid-c"))
        .await
        .unwrap();
    let contended = proxy.round_trips() - before;
    assert_eq!((won.generation, won.prev_generation), (4, 3));
    assert_eq!(kicker.kicks(), 2, "b, then the rival");
    assert_eq!(
        contended, 3,
        "failed vacant write (with the record), lost CAS (with the record), winning CAS"
    );

    let before = proxy.round_trips();
    assert!(arbiter.release(&key, 4).await.unwrap());
    let release = proxy.round_trips() - before;
    assert_eq!(release, 1, "release: one update");
    let before = proxy.round_trips();
    assert!(!store.release(&key, 0).await.unwrap());
    assert_eq!(proxy.round_trips() - before, 0, "gen <= 0: nothing sent");

    // A login after the logout takes the tombstone in the one vacant write.
    let before = proxy.round_trips();
    let again = arbiter
        .claim(&claim(&key, "http://e.invalid/kick", "cid-e"))
        .await
        .unwrap();
    let relogin = proxy.round_trips() - before;
    assert_eq!((again.generation, again.prev_generation), (5, 4));
    assert_eq!(relogin, 1, "login after logout: the vacant write");
    assert!(arbiter.release(&key, 5).await.unwrap());

    // A batch read of 100 keys (one held, the rest absent) is one statement.
    let keys: Vec<Key> = (1..=100)
        .map(|uid| Key::new("roundtrips", "test", uid))
        .collect();
    let before = proxy.round_trips();
    let states = store.read_owners(&keys).await.unwrap();
    let batch = proxy.round_trips() - before;
    assert_eq!(batch, 1, "batch read of 100 keys: one query");
    assert_eq!(states.len(), 100);
    assert_eq!(states[0].as_ref().unwrap().generation, 5);
    assert!(states[1..].iter().all(|s| !s.as_ref().unwrap().exists));

    // A listing of a user with sessions on three slots is one statement.
    let user = Key::new("roundtrips", "test", 7).user();
    for slot in ["", "pc", "mobile"] {
        let cid = format!("cid-{slot}");
        arbiter
            .claim(&claim(&user.key(slot), "http://d.invalid/kick", &cid))
            .await
            .unwrap();
    }
    let before = proxy.round_trips();
    let sessions = store.list_sessions(&user).await.unwrap();
    let listing = proxy.round_trips() - before;
    assert_eq!(listing, 1, "listing of three slots: one query");
    assert_eq!(sessions.len(), 3);

    assert_eq!(
        proxy.connections(),
        1,
        "one pooled connection served everything"
    );
    println!(
        "postgres round trips (wire): first login = {first_login}, login after logout = \
         {relogin}, replacing a session = {replacing}, replay = {replayed}, lost race then win = {contended}, release = {release}, \
         batch read of 100 keys = {batch}, listing = {listing}"
    );
}
