//! The table's key schema on dynalite: each slot is one item in its user's
//! partition, the startup check refuses a table of the layout from before slots
//! (saying how to move) or of any other key schema (saying what it found), and
//! the move it describes keeps every old record.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use unique_core::{Arbiter, ClaimInput, Key, Owner, Store, UserKey};
use unique_store_dynamodb::DynamoStore;

const BOUND: Duration = Duration::from_secs(10);

/// A store on `table` of the shared dynalite, without creating the table.
async fn store_on(table: &str) -> DynamoStore {
    common::builder()
        .table(table)
        .endpoint_url(unique_testsupport::dynalite::Dynalite::shared().endpoint_url())
        .attempt_timeout(BOUND)
        .operation_timeout(BOUND)
        .max_attempts(1)
        .build()
        .await
        .unwrap()
}

/// Creates `table` with exactly `key` as its key schema, the way another tool
/// (or an older version of this crate) would, and waits until it is active.
async fn create_table(store: &DynamoStore, key: &[(&str, KeyType, ScalarAttributeType)]) {
    let mut create = store
        .client()
        .create_table()
        .table_name(store.table())
        .billing_mode(BillingMode::PayPerRequest);
    for (name, kind, ty) in key {
        create = create
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(*name)
                    .key_type(kind.clone())
                    .build()
                    .unwrap(),
            )
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(*name)
                    .attribute_type(ty.clone())
                    .build()
                    .unwrap(),
            );
    }
    create.send().await.unwrap();
    // dynalite answers CREATING first; create_table_if_missing waits for ACTIVE
    // and reports that it did not create the table.
    assert!(!store.create_table_if_missing(BOUND).await.unwrap());
}

/// The layout before slots: partition key `pk` only.
fn old_layout() -> [(&'static str, KeyType, ScalarAttributeType); 1] {
    [("pk", KeyType::Hash, ScalarAttributeType::S)]
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn claim(key: &Key, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: Owner::new("r", "c", "http://127.0.0.1:9/kick"),
        claim_id: claim_id.into(),
    }
}

#[tokio::test]
async fn each_slot_is_one_item_in_its_users_partition() {
    let store = common::store().await;
    let arbiter = Arbiter::new(store.clone());
    let user = Key::new("layout", "test", 1);
    arbiter.claim(&claim(&user, "d")).await.unwrap();
    arbiter
        .claim(&claim(&user.clone().with_slot("mobile"), "m"))
        .await
        .unwrap();
    // Spelled out, not derived: pk is the user, sk is "#" and the slot.
    for (sk, cid) in [("#", "d"), ("#mobile", "m")] {
        let item = store
            .client()
            .get_item()
            .table_name(store.table())
            .key("pk", s("layout#test#1"))
            .key("sk", s(sk))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .unwrap_or_else(|| panic!("no item at sk {sk:?}"));
        assert_eq!(item.get("cid"), Some(&s(cid)), "{sk}");
        assert_eq!(item.get("gen"), Some(&n(1)), "{sk}");
    }
}

#[tokio::test]
async fn a_table_from_before_slots_is_refused_with_how_to_move() {
    let store = store_on("unique-layout-before-slots").await;
    create_table(&store, &old_layout()).await;
    let err = store.check_reachable(BOUND).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    let message = err.to_string();
    for part in [
        "dynamodb table unique-layout-before-slots has the key schema from before device slots",
        "needs partition key pk (S) with sort key sk (S)",
        "stop every server",
        "--create-table --table NEW",
        "adding sk = \"#\" and keeping pk and every other attribute",
        "start the servers with --table NEW",
    ] {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
    // --create-table leaves an existing table as it is: still refused.
    assert!(!store.create_table_if_missing(BOUND).await.unwrap());
    assert_eq!(
        store.check_reachable(BOUND).await.unwrap_err().to_string(),
        message
    );
}

#[tokio::test]
async fn a_table_of_another_key_schema_is_refused_naming_it() {
    use KeyType::{Hash, Range};
    use ScalarAttributeType::{N, S};
    let cases = [
        (
            "unique-layout-numeric-sk",
            vec![("pk", Hash, S), ("sk", Range, N)],
            "key schema pk (HASH, S), sk (RANGE, N),",
        ),
        (
            "unique-layout-other-names",
            vec![("id", Hash, S), ("slot", Range, S)],
            "key schema id (HASH, S), slot (RANGE, S),",
        ),
        (
            "unique-layout-numeric-pk",
            vec![("pk", Hash, N)],
            "key schema pk (HASH, N),",
        ),
    ];
    for (table, key, found) in cases {
        let store = store_on(table).await;
        create_table(&store, &key).await;
        let message = store.check_reachable(BOUND).await.unwrap_err().to_string();
        assert!(
            message.contains(&format!("dynamodb table {table} has")),
            "{message}"
        );
        assert!(message.contains(found), "{found:?} missing from: {message}");
        assert!(
            message.contains("needs pk (HASH, S), sk (RANGE, S)"),
            "{message}"
        );
        assert!(!message.contains("before device slots"), "{message}");
    }
}

/// The refusal's steps, followed: copy every item of the old table into one that
/// `create_table_if_missing` made, adding `sk = "#"`. Sessions, tombstones and
/// recent claims carry over, so logins go on from the old gens.
#[tokio::test]
async fn the_described_move_keeps_every_old_record() {
    let old = store_on("unique-layout-move-from").await;
    create_table(&old, &old_layout()).await;
    let owner = r#"{"endpoint":"http://127.0.0.1:9/old"}"#;
    let old_items: [HashMap<String, AttributeValue>; 2] = [
        HashMap::from([
            ("pk".to_owned(), s("move#test#1")),
            ("gen".to_owned(), n(3)),
            ("owner".to_owned(), s(owner)),
            ("cid".to_owned(), s("c3")),
            ("won".to_owned(), s(r#"[["c2",2],["c3",3]]"#)),
        ]),
        HashMap::from([
            ("pk".to_owned(), s("move#test#2")),
            ("gen".to_owned(), n(5)),
            ("owner".to_owned(), s("")),
        ]),
    ];
    for item in &old_items {
        old.client()
            .put_item()
            .table_name(old.table())
            .set_item(Some(item.clone()))
            .send()
            .await
            .unwrap();
    }

    let new = store_on("unique-layout-move-to").await;
    assert!(new.create_table_if_missing(BOUND).await.unwrap());
    let scanned = old
        .client()
        .scan()
        .table_name(old.table())
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    for mut item in scanned.items.unwrap_or_default() {
        item.insert("sk".to_owned(), s("#"));
        new.client()
            .put_item()
            .table_name(new.table())
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }
    new.check_reachable(BOUND).await.unwrap();

    let session = Key::new("move", "test", 1);
    let state = new.read_owner(&session).await.unwrap();
    assert_eq!(
        (state.generation, state.claim_id.as_deref()),
        (3, Some("c3"))
    );
    assert_eq!(
        new.list_sessions(&UserKey::new("move", "test", 1))
            .await
            .unwrap()
            .iter()
            .map(|s| (s.slot.as_str(), s.generation, s.owner.endpoint.as_str()))
            .collect::<Vec<_>>(),
        [("", 3, "http://127.0.0.1:9/old")]
    );
    let arbiter = Arbiter::new(new.clone());
    let replay = arbiter.claim(&claim(&session, "c3")).await.unwrap();
    assert_eq!((replay.generation, replay.replayed), (3, true));
    let superseded = arbiter.claim(&claim(&session, "c2")).await.unwrap_err();
    assert!(
        superseded.is_superseded(),
        "old recent claims carry over (C9): {superseded:?}"
    );
    assert_eq!(
        arbiter
            .claim(&claim(&session, "c4"))
            .await
            .unwrap()
            .generation,
        4
    );
    let tombstone = Key::new("move", "test", 2);
    assert_eq!(
        arbiter
            .claim(&claim(&tombstone, "t"))
            .await
            .unwrap()
            .generation,
        6
    );
}
