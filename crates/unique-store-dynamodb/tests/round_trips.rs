//! Store round trips per claim through the `Arbiter`, counted on the wire
//! (every HTTP attempt the store's SDK client sends) against dynalite.
//!
//! Every claim starts with the write-first `UpdateItem` (C11), which claims an absent
//! record. Over any other record its condition fails; real DynamoDB returns the item with
//! the failure (`ALL_OLD`) and the claim goes on from it without a read, but dynalite
//! returns nothing, so here each such claim reads too: one `GetItem` more than on DynamoDB.
//!
//! Run with `--nocapture` to see the numbers.

mod common;

use std::sync::Arc;

use unique_core::{Arbiter, ClaimInput, Key, Owner, Store};
use unique_store_contract::RivalKicker;
use unique_store_dynamodb::RequestCounts;

fn claim(key: &Key, endpoint: &str, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: Owner::new("r", "c", endpoint),
        claim_id: claim_id.into(),
    }
}

fn counts(get_item: u64, update_item: u64) -> RequestCounts {
    RequestCounts {
        get_item,
        update_item,
        batch_get_item: 0,
        query: 0,
        other: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_per_uncontended_claim_replay_and_contended_retry() {
    let store = common::store().await;
    let arbiter = Arbiter::new(store.clone());
    let key = Key::new("roundtrips", "test", 1);

    let before = store.request_counts();
    let first = arbiter
        .claim(&claim(&key, "http://a.invalid/kick", "cid-a"))
        .await
        .unwrap();
    let uncontended = store.request_counts().since(&before);
    assert_eq!((first.generation, first.replayed), (1, false));
    assert_eq!(uncontended, counts(0, 1), "first login: one UpdateItem");

    let before = store.request_counts();
    let replay = arbiter
        .claim(&claim(&key, "http://a.invalid/kick", "cid-a"))
        .await
        .unwrap();
    let replayed = store.request_counts().since(&before);
    assert_eq!((replay.generation, replay.replayed), (1, true));
    assert_eq!(
        replayed,
        counts(1, 1),
        "replay: the failed vacant write, then (dynalite) a GetItem"
    );

    // Replacing an online session without contention: still 2.
    let before = store.request_counts();
    let second = arbiter
        .claim(&claim(&key, "http://b.invalid/kick", "cid-b"))
        .await
        .unwrap();
    let replacing = store.request_counts().since(&before);
    assert_eq!((second.generation, second.has_prev), (2, true));
    assert_eq!(
        replacing,
        counts(1, 2),
        "replacing a session: failed vacant write, (dynalite) GetItem, UpdateItem"
    );

    // A contended claim: the rival writes gen 3 between our read and our CAS.
    let kicker = Arc::new(RivalKicker::new(common::store().await, key.clone()));
    let contended_arbiter = Arbiter::builder(store.clone())
        .kicker(Arc::clone(&kicker))
        .build();
    let before = store.request_counts();
    let won = contended_arbiter
        .claim(&claim(&key, "http://c.invalid/kick", "cid-c"))
        .await
        .unwrap();
    let contended = store.request_counts().since(&before);
    assert_eq!(won.generation, 4, "the rival took gen 3, we took 4");
    assert_eq!(won.prev_generation, 3);
    assert_eq!(kicker.kicks(), 2, "b kicked, then the rival");
    // dynalite does not return ALL_OLD with a failed condition, so the retry
    // reads again: 2 more round trips (1 with DynamoDB's ALL_OLD).
    assert_eq!(
        contended,
        counts(2, 3),
        "contended: failed vacant write, read, lost CAS, re-read, winning CAS"
    );
    let extra = contended.total() - replacing.total();
    assert_eq!(extra, 2);

    // A login after a logout: the tombstone fails the vacant write (DynamoDB cannot build
    // its next `won` list in an update expression), then the fenced claim.
    assert!(arbiter.release(&key, 4).await.unwrap());
    let before = store.request_counts();
    let after_logout = arbiter
        .claim(&claim(&key, "http://d.invalid/kick", "cid-d"))
        .await
        .unwrap();
    let relogin = store.request_counts().since(&before);
    assert_eq!((after_logout.generation, after_logout.has_prev), (5, false));
    assert_eq!(
        relogin,
        counts(1, 2),
        "login after logout: failed vacant write, (dynalite) GetItem, UpdateItem"
    );

    println!(
        "dynamodb round trips through the Arbiter (dynalite): uncontended first login = {}, \
         replacing an online session = {}, replay = {}, login after logout = {}, contended \
         claim = {} (retry costs {} more)",
        uncontended.total(),
        replacing.total(),
        replayed.total(),
        relogin.total(),
        contended.total(),
        extra
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_is_one_round_trip_and_nonpositive_gen_is_none() {
    let store = common::store().await;
    let arbiter = Arbiter::new(store.clone());
    let key = Key::new("roundtrips", "test", 2);
    let outcome = arbiter
        .claim(&claim(&key, "http://a.invalid/kick", "cid-a"))
        .await
        .unwrap();

    let before = store.request_counts();
    assert!(arbiter.release(&key, outcome.generation).await.unwrap());
    assert_eq!(store.request_counts().since(&before), counts(0, 1));

    let before = store.request_counts();
    assert!(!store.release(&key, 0).await.unwrap());
    assert!(!store.release(&key, -5).await.unwrap());
    assert_eq!(store.request_counts().since(&before), counts(0, 0));
}
