//! DynamoDB-specific behaviour beyond the shared contract, on dynalite: the
//! builder, table administration, the startup check, refusals that must cost
//! no request, and decoding of records this library never writes.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::types::{AttributeValue, BillingMode};
use unique_core::{CasOutcome, Key, Owner, OwnerState, Store, ready_key};
use unique_store_dynamodb::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_OPERATION_TIMEOUT, DEFAULT_RETRY_BACKOFF, DynamoStore, RequestCounts,
};
use unique_testsupport::dynalite::{ACCESS_KEY_ID, Dynalite, REGION, SECRET_ACCESS_KEY};
use unique_testsupport::free_port;
use unique_testsupport::proxy::StallProxy;

const BOUND: Duration = Duration::from_secs(10);

async fn store_on_table(table: &str) -> DynamoStore {
    DynamoStore::builder()
        .table(table)
        .endpoint_url(Dynalite::shared().endpoint_url())
        .region(REGION)
        .static_credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY)
        .attempt_timeout(BOUND)
        .operation_timeout(BOUND)
        .max_attempts(1)
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn create_table_if_missing_creates_once_then_reports_existing() {
    let store = store_on_table("unique-created-once").await;
    let missing = store.check_reachable(BOUND).await.unwrap_err();
    assert!(missing.is_unavailable());
    assert_eq!(
        missing.to_string(),
        "unavailable: dynamodb table unique-created-once does not exist"
    );

    assert!(
        store.create_table_if_missing(BOUND).await.unwrap(),
        "created"
    );
    assert!(
        !store.create_table_if_missing(BOUND).await.unwrap(),
        "already there"
    );
    store.check_reachable(BOUND).await.unwrap();

    let table = store
        .client()
        .describe_table()
        .table_name("unique-created-once")
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    // The layout of the crate docs: the user as partition key, the slot as sort key.
    let key: Vec<_> = table
        .key_schema()
        .iter()
        .map(|k| (k.attribute_name(), k.key_type().as_str()))
        .collect();
    assert_eq!(key, [("pk", "HASH"), ("sk", "RANGE")]);
    let mut definitions: Vec<_> = table
        .attribute_definitions()
        .iter()
        .map(|d| (d.attribute_name(), d.attribute_type().as_str()))
        .collect();
    definitions.sort_unstable();
    assert_eq!(definitions, [("pk", "S"), ("sk", "S")]);
    let billing = table.billing_mode_summary().and_then(|b| b.billing_mode());
    assert_eq!(billing, Some(&BillingMode::PayPerRequest));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_create_table_if_missing_creates_exactly_once() {
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(tokio::spawn(async {
            let store = store_on_table("unique-created-racing").await;
            store.create_table_if_missing(BOUND).await.unwrap()
        }));
    }
    let mut created = 0;
    for task in tasks {
        created += usize::from(task.await.unwrap());
    }
    assert_eq!(created, 1);
}

#[tokio::test]
async fn check_reachable_fails_closed_on_a_dead_endpoint() {
    let dead = format!("http://127.0.0.1:{}", free_port());
    let store = common::store_at(&dead, 1).await;
    let err = store.check_reachable(BOUND).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert_eq!(
        err.to_string(),
        "unavailable: dynamodb DescribeTable could not be sent"
    );
}

#[tokio::test]
async fn check_reachable_is_bounded_when_the_server_never_answers() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let store = common::store_at(&format!("http://{addr}"), 1).await;
    let err = store
        .check_reachable(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("did not finish within"), "{err}");
    holder.abort();
}

/// Connect, attempt and operation timeouts, and attempts, of the store's client.
fn limits(store: &DynamoStore) -> [Option<Duration>; 3] {
    let timeouts = store.client().config().timeout_config().unwrap();
    [
        timeouts.connect_timeout(),
        timeouts.operation_attempt_timeout(),
        timeouts.operation_timeout(),
    ]
}

fn max_attempts(store: &DynamoStore) -> u32 {
    store
        .client()
        .config()
        .retry_config()
        .unwrap()
        .max_attempts()
}

#[tokio::test]
async fn a_built_client_has_the_documented_timeouts_and_attempts() {
    let store = common::builder().build().await.unwrap();
    assert_eq!(
        limits(&store),
        [
            Some(DEFAULT_CONNECT_TIMEOUT),
            Some(DEFAULT_ATTEMPT_TIMEOUT),
            Some(DEFAULT_OPERATION_TIMEOUT)
        ]
    );
    assert_eq!(max_attempts(&store), DEFAULT_MAX_ATTEMPTS);
    let retry = store.client().config().retry_config().unwrap();
    assert_eq!(retry.initial_backoff(), DEFAULT_RETRY_BACKOFF);

    let ms = Duration::from_millis;
    let tuned = common::builder()
        .connect_timeout(ms(50))
        .attempt_timeout(ms(60))
        .operation_timeout(ms(70))
        .max_attempts(5)
        .build()
        .await
        .unwrap();
    assert_eq!(limits(&tuned), [Some(ms(50)), Some(ms(60)), Some(ms(70))]);
    assert_eq!(max_attempts(&tuned), 5);
}

#[tokio::test]
async fn a_given_client_keeps_its_own_timeouts_unless_set() {
    let mine = TimeoutConfig::builder()
        .operation_timeout(Duration::from_secs(42))
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version_latest()
            .region(aws_sdk_dynamodb::config::Region::new(REGION))
            .timeout_config(mine)
            .build(),
    );
    let store = DynamoStore::builder()
        .client(client)
        .attempt_timeout(Duration::from_millis(60))
        .build()
        .await
        .unwrap();
    assert_eq!(
        limits(&store),
        [
            None,
            Some(Duration::from_millis(60)),
            Some(Duration::from_secs(42))
        ]
    );
}

/// Readiness is one strongly consistent `GetItem` of the sentinel key; it writes nothing.
#[tokio::test]
async fn check_ready_is_one_get_item_and_writes_nothing() {
    let store = common::store().await;
    let before = store.request_counts();
    store.check_ready().await.unwrap();
    assert_eq!(
        store.request_counts().since(&before),
        RequestCounts {
            get_item: 1,
            update_item: 0,
            batch_get_item: 0,
            query: 0,
            other: 0
        }
    );
    assert!(!store.read_owner(&ready_key()).await.unwrap().exists);
}

/// A store behind a proxy that stops answering: readiness and reads fail `Unavailable`
/// within the operation timeout, on connections opened during the stall and on the pooled
/// one silenced by it; once the proxy forwards again, the next calls succeed on new
/// connections (the silenced one is never used again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_endpoint_fails_within_the_timeouts_and_recovers() {
    common::store().await; // the table exists
    let proxy = StallProxy::start(Dynalite::shared().addr());
    let store = common::builder()
        .table(common::TABLE)
        .endpoint_url(proxy.url())
        .attempt_timeout(Duration::from_millis(500))
        .operation_timeout(Duration::from_millis(1500))
        .max_attempts(3)
        .build()
        .await
        .unwrap();
    let key = Key::new("stalled", "test", 1);
    store.check_ready().await.unwrap(); // a pooled connection now exists

    proxy.stall();
    let not_ready = store.check_ready().await.unwrap_err();
    assert!(not_ready.is_unavailable(), "{not_ready:?}");
    assert_eq!(
        not_ready.to_string(),
        "unavailable: dynamodb GetItem timed out"
    );
    let read = store.read_owner(&key).await.unwrap_err();
    assert!(read.is_unavailable(), "{read:?}");

    proxy.forward();
    store.check_ready().await.unwrap();
    assert!(!store.read_owner(&key).await.unwrap().exists);
}

#[tokio::test]
async fn builder_refuses_an_empty_table_name() {
    let err = DynamoStore::builder()
        .table("")
        .region(REGION)
        .static_credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY)
        .build()
        .await
        .unwrap_err();
    assert!(err.is_invalid_params(), "{err:?}");
}

#[tokio::test]
async fn builder_refuses_static_credentials_without_region() {
    let err = DynamoStore::builder()
        .static_credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY)
        .build()
        .await
        .unwrap_err();
    assert!(err.is_invalid_params(), "{err:?}");
}

#[tokio::test]
async fn builder_debug_never_prints_the_secret() {
    let builder = DynamoStore::builder()
        .region(REGION)
        .static_credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY);
    let shown = format!("{builder:?}");
    assert!(!shown.contains(SECRET_ACCESS_KEY), "{shown}");
    assert!(shown.contains("static_credentials: true"), "{shown}");
}

#[tokio::test]
async fn a_given_client_is_used_and_counted() {
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version_latest()
        .region(aws_sdk_dynamodb::config::Region::new(REGION))
        .endpoint_url(Dynalite::shared().endpoint_url())
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            ACCESS_KEY_ID,
            SECRET_ACCESS_KEY,
            None,
            None,
            "test",
        ))
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(conf);
    let store = DynamoStore::builder()
        .client(client)
        .table(common::TABLE)
        .build()
        .await
        .unwrap();
    assert_eq!(store.table(), common::TABLE);
    store.create_table_if_missing(BOUND).await.unwrap();
    let before = store.request_counts();
    let state = store
        .read_owner(&Key::new("given-client", "test", 1))
        .await
        .unwrap();
    assert_eq!(state, OwnerState::absent());
    assert_eq!(
        store.request_counts().since(&before),
        RequestCounts {
            get_item: 1,
            update_item: 0,
            batch_get_item: 0,
            query: 0,
            other: 0
        }
    );
}

#[tokio::test]
async fn refusals_send_no_request() {
    let store = common::store().await;
    let key = Key::new("refusals", "test", 1);
    let before = store.request_counts();

    let no_endpoint = Owner::new("r", "c", "");
    let err = store
        .claim_cas(&key, &no_endpoint, "cid", &OwnerState::absent())
        .await
        .unwrap_err();
    assert!(err.is_invalid_params(), "{err:?}");

    let exhausted = OwnerState {
        exists: true,
        generation: i64::MAX - 1,
        owner: None,
        owner_corrupt: false,
        claim_id: Some("cid".into()),
        ..OwnerState::default()
    };
    let owner = Owner::new("r", "c", "http://h/k");
    let err = store
        .claim_cas(&key, &owner, "cid-2", &exhausted)
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");

    assert!(!store.release(&key, 0).await.unwrap());
    assert_eq!(store.request_counts().since(&before).total(), 0);
}

/// Records this library never writes, put directly on the server.
async fn put(store: &DynamoStore, key: &Key, attributes: &[(&str, AttributeValue)]) {
    let mut put = store
        .client()
        .put_item()
        .table_name(store.table())
        .set_item(Some(common::item_key(key)));
    for (name, value) in attributes {
        put = put.item(*name, value.clone());
    }
    put.send().await.unwrap();
}

#[tokio::test]
async fn records_without_a_usable_gen_are_unavailable() {
    let store = common::store().await;
    let cases = [
        (2, vec![("gen", AttributeValue::S("1".into()))]),
        (3, vec![("gen", AttributeValue::N("1.5".into()))]),
    ];
    for (uid, attributes) in cases {
        let key = Key::new("bad-gen", "test", uid);
        put(&store, &key, &attributes).await;
        assert!(
            store.read_owner(&key).await.unwrap_err().is_unavailable(),
            "{uid}"
        );
        assert!(
            store.current(&key).await.unwrap_err().is_unavailable(),
            "{uid}"
        );
    }
}

/// The first-login condition is `attribute_not_exists(gen)` (or gen 0): an
/// item that was never claimed reads as absent and the first login takes it.
#[tokio::test]
async fn an_item_without_gen_reads_absent_and_first_login_claims_it() {
    let store = common::store().await;
    let owner = Owner::new("r", "c", "http://h/k");
    let cases = [
        vec![],
        vec![("owner", AttributeValue::S(String::new()))],
        vec![
            (
                "owner",
                AttributeValue::S(r#"{"endpoint":"http://old"}"#.into()),
            ),
            ("cid", AttributeValue::S("old".into())),
        ],
    ];
    for (uid, attributes) in (1..).zip(cases) {
        let key = Key::new("no-gen", "test", uid);
        put(&store, &key, &attributes).await;
        let state = store.read_owner(&key).await.unwrap();
        assert_eq!(state, OwnerState::absent(), "{attributes:?}");
        let view = store.current(&key).await.unwrap();
        assert!(!view.exists && view.generation == 0, "{attributes:?}");
        assert_eq!(
            store.claim_cas(&key, &owner, "new", &state).await.unwrap(),
            CasOutcome::Written { generation: 1 },
            "{attributes:?}"
        );
        let claimed = store.read_owner(&key).await.unwrap();
        assert_eq!(
            (claimed.generation, claimed.claim_id.as_deref()),
            (1, Some("new"))
        );
        // Now the item has a gen: a second first login loses.
        assert!(matches!(
            store.claim_cas(&key, &owner, "late", &state).await.unwrap(),
            CasOutcome::LostRace { .. }
        ));
    }
}

#[tokio::test]
async fn absent_owner_attribute_reads_as_a_tombstone_and_is_claimable() {
    let store = common::store().await;
    let key = Key::new("no-owner", "test", 1);
    put(&store, &key, &[("gen", AttributeValue::N("5".into()))]).await;
    let state = store.read_owner(&key).await.unwrap();
    assert!(state.exists && state.owner.is_none() && !state.owner_corrupt);
    assert_eq!((state.generation, state.claim_id.as_deref()), (5, None));
    let view = store.current(&key).await.unwrap();
    assert!(view.exists && view.owner.is_none());

    let owner = Owner::new("r", "c", "http://h/k");
    assert_eq!(
        store.claim_cas(&key, &owner, "cid", &state).await.unwrap(),
        CasOutcome::Written { generation: 6 }
    );
}

#[tokio::test]
async fn an_owner_of_the_wrong_type_is_corrupt() {
    let store = common::store().await;
    let key = Key::new("owner-type", "test", 1);
    put(
        &store,
        &key,
        &[
            ("gen", AttributeValue::N("2".into())),
            ("owner", AttributeValue::N("7".into())),
            ("cid", AttributeValue::S("c".into())),
        ],
    )
    .await;
    let state = store.read_owner(&key).await.unwrap();
    assert!(state.owner_corrupt && state.owner.is_none());
    assert!(store.current(&key).await.unwrap_err().is_unavailable());
    let owner = Owner::new("r", "c", "http://h/k");
    assert_eq!(
        store.claim_cas(&key, &owner, "new", &state).await.unwrap(),
        CasOutcome::Written { generation: 3 }
    );
}

/// The item as stored, read past the store's decoding.
async fn raw_item(store: &DynamoStore, key: &Key) -> HashMap<String, AttributeValue> {
    store
        .client()
        .get_item()
        .table_name(store.table())
        .set_key(Some(common::item_key(key)))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the item exists")
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

/// C9 on the wire: a claim writes `won` as S in its `UpdateItem`, next to
/// `gen`, `owner` and `cid`; a release removes `cid` and leaves `won` as it is.
#[tokio::test]
async fn a_claim_sets_won_and_a_release_leaves_it() {
    let store = common::store().await;
    let key = Key::new("won-attribute", "test", 1);
    let owner = Owner::new("r", "c", "http://h/k");
    let owner_json = unique_core::encode_owner(&owner).unwrap();
    for (claim_id, generation) in [("a", 1), ("b", 2)] {
        let snap = store.read_owner(&key).await.unwrap();
        assert_eq!(
            store
                .claim_cas(&key, &owner, claim_id, &snap)
                .await
                .unwrap(),
            CasOutcome::Written { generation }
        );
    }
    let won = s(r#"[["a",1],["b",2]]"#);
    let claimed = raw_item(&store, &key).await;
    assert_eq!(
        claimed,
        HashMap::from([
            ("pk".to_owned(), s(&key.to_string())),
            ("sk".to_owned(), s("#")),
            ("gen".to_owned(), AttributeValue::N("2".into())),
            ("owner".to_owned(), s(&owner_json)),
            ("cid".to_owned(), s("b")),
            ("won".to_owned(), won.clone()),
        ])
    );
    assert!(store.release(&key, 2).await.unwrap());
    let released = raw_item(&store, &key).await;
    assert_eq!(
        released,
        HashMap::from([
            ("pk".to_owned(), s(&key.to_string())),
            ("sk".to_owned(), s("#")),
            ("gen".to_owned(), AttributeValue::N("2".into())),
            ("owner".to_owned(), s("")),
            ("won".to_owned(), won),
        ])
    );
    let state = store.read_owner(&key).await.unwrap();
    assert_eq!(
        state.recent_claims.iter().collect::<Vec<_>>(),
        [("a", 1), ("b", 2)]
    );
}

/// A `won` that is not a string (written by hand or by another tool) reads as
/// no recent claims, like unreadable JSON (C9): the read succeeds, the key
/// stays claimable, and the claim writes `won` again as a string.
#[tokio::test]
async fn a_won_of_another_type_reads_as_no_recent_claims_and_a_claim_rewrites_it() {
    let store = common::store().await;
    let owner = Owner::new("r", "c", "http://h/k");
    let cases = [
        AttributeValue::N("1".into()),
        AttributeValue::Bool(true),
        AttributeValue::Null(true),
        AttributeValue::L(vec![AttributeValue::L(vec![
            s("old"),
            AttributeValue::N("4".into()),
        ])]),
        AttributeValue::M(HashMap::from([(
            "old".to_owned(),
            AttributeValue::N("4".into()),
        )])),
        AttributeValue::Ss(vec!["old".into()]),
    ];
    for (uid, won) in (1..).zip(cases) {
        let key = Key::new("won-type", "test", uid);
        put(
            &store,
            &key,
            &[
                ("gen", AttributeValue::N("4".into())),
                ("owner", s(r#"{"endpoint":"http://old"}"#)),
                ("cid", s("old")),
                ("won", won.clone()),
            ],
        )
        .await;
        let state = store.read_owner(&key).await.unwrap();
        assert!(state.recent_claims.is_empty(), "{won:?}");
        assert_eq!(
            (state.generation, state.claim_id.as_deref()),
            (4, Some("old")),
            "{won:?}"
        );
        assert!(state.owner.is_some(), "{won:?}");
        assert!(store.current(&key).await.unwrap().exists, "{won:?}");
        let batch = store.read_owners(std::slice::from_ref(&key)).await.unwrap();
        assert_eq!(batch[0].as_ref().unwrap(), &state, "{won:?}");
        assert_eq!(
            store.claim_cas(&key, &owner, "new", &state).await.unwrap(),
            CasOutcome::Written { generation: 5 },
            "{won:?}"
        );
        assert_eq!(
            raw_item(&store, &key).await.get("won"),
            Some(&s(r#"[["new",5]]"#)),
            "{won:?}"
        );
    }
}
