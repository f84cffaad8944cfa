//! `list_sessions` (C10) and slots on DynamoDB, beyond the shared contract: the
//! listing is one `Query` of the user's partition, a partition past one 1 MB page
//! is listed whole, an item that is not a slot fails the listing, and a batch
//! read tells apart the slots of one user (they share the partition key).

mod common;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use unique_core::{Arbiter, ClaimInput, Key, Owner, Store, UserKey};
use unique_store_dynamodb::{DynamoStore, RequestCounts};

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn claim(key: &Key, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: Owner::new("r", "c", "http://127.0.0.1:9/kick"),
        claim_id: claim_id.into(),
    }
}

/// `(slot, gen)` of the user's listing, sorted by slot.
async fn listed(store: &DynamoStore, user: &UserKey) -> Vec<(String, i64)> {
    let mut listing: Vec<_> = store
        .list_sessions(user)
        .await
        .unwrap()
        .into_iter()
        .map(|session| (session.slot, session.generation))
        .collect();
    listing.sort();
    listing
}

/// Puts `attributes` at the item of `pk` and `sk`, past the store.
async fn put(store: &DynamoStore, pk: &str, sk: &str, attributes: &[(&str, AttributeValue)]) {
    let mut item = HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))]);
    for (name, value) in attributes {
        item.insert((*name).to_owned(), value.clone());
    }
    store
        .client()
        .put_item()
        .table_name(store.table())
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_listing_is_one_query() {
    let store = common::store().await;
    let arbiter = Arbiter::new(store.clone());
    let user = UserKey::new("listing-query", "test", 1);
    for (slot, claim_id) in [("", "d"), ("pc", "p"), ("mobile", "m")] {
        arbiter
            .claim(&claim(&user.key(slot), claim_id))
            .await
            .unwrap();
    }
    assert!(arbiter.release(&user.key("pc"), 1).await.unwrap());

    let before = store.request_counts();
    let listing = listed(&store, &user).await;
    assert_eq!(listing, [(String::new(), 1), ("mobile".to_owned(), 1)]);
    assert_eq!(
        store.request_counts().since(&before),
        RequestCounts {
            query: 1,
            ..RequestCounts::default()
        },
        "one Query, nothing else"
    );
}

/// A user's partition of more than 1 MB comes in pages; the listing reads
/// them all (one `Query` each).
#[tokio::test]
async fn a_partition_past_one_page_is_listed_whole() {
    let store = common::store().await;
    let user = UserKey::new("listing-pages", "test", 1);
    // Five items of 300 kB each: more than one 1 MB page on every DynamoDB.
    let padding = s(&"x".repeat(300_000));
    let owner = s(r#"{"endpoint":"http://127.0.0.1:9/kick"}"#);
    let slots = ["", "a", "b", "c", "d"];
    for slot in slots {
        put(
            &store,
            &user.to_string(),
            &format!("#{slot}"),
            &[
                ("gen", AttributeValue::N("2".into())),
                ("owner", owner.clone()),
                ("cid", s("c")),
                ("padding", padding.clone()),
            ],
        )
        .await;
    }
    let before = store.request_counts();
    let listing = listed(&store, &user).await;
    let expected: Vec<_> = slots.iter().map(|slot| ((*slot).to_owned(), 2)).collect();
    assert_eq!(listing, expected);
    let queries = store.request_counts().since(&before).query;
    assert!(queries >= 2, "the partition took {queries} page(s)");
}

#[tokio::test]
async fn an_item_whose_sort_key_is_not_a_slot_fails_the_listing() {
    let store = common::store().await;
    let user = UserKey::new("listing-foreign", "test", 1);
    Arbiter::new(store.clone())
        .claim(&claim(&user.key(""), "d"))
        .await
        .unwrap();
    put(
        &store,
        &user.to_string(),
        "not-a-slot",
        &[("gen", AttributeValue::N("1".into()))],
    )
    .await;
    let err = store.list_sessions(&user).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("\"not-a-slot\""), "{err}");
}

/// The slots of one user share `pk`: a batch read answers each key with its
/// own slot's record, in the order asked, a key asked twice twice.
#[tokio::test]
async fn a_batch_read_tells_a_users_slots_apart() {
    let store = common::store().await;
    let arbiter = Arbiter::new(store.clone());
    let user = UserKey::new("listing-batch", "test", 1);
    arbiter.claim(&claim(&user.key(""), "d1")).await.unwrap();
    for claim_id in ["m1", "m2", "m3"] {
        arbiter
            .claim(&claim(&user.key("mobile"), claim_id))
            .await
            .unwrap();
    }
    let keys = [
        user.key("mobile"),
        user.key(""),
        user.key("pc"),
        user.key("mobile"),
        Key::new("listing-batch", "test", 10).with_slot("mobile"),
    ];
    let states = store.read_owners(&keys).await.unwrap();
    let read: Vec<_> = states
        .into_iter()
        .map(|state| {
            let state = state.unwrap();
            (state.exists, state.generation, state.claim_id)
        })
        .collect();
    assert_eq!(
        read,
        [
            (true, 3, Some("m3".to_owned())),
            (true, 1, Some("d1".to_owned())),
            (false, 0, None),
            (true, 3, Some("m3".to_owned())),
            (false, 0, None),
        ]
    );
}
