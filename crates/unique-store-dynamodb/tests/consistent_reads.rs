//! C2 on the wire: every read the store sends (`GetItem`, `BatchGetItem`,
//! `Query`) asks for a strongly consistent read. An SDK interceptor on the client the store is built with
//! records each request body; the read paths run against dynalite.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Credentials, Intercept, Region, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use unique_core::{Arbiter, ClaimInput, Key, Owner, Store, UserKey};
use unique_store_dynamodb::DynamoStore;
use unique_testsupport::dynalite::{ACCESS_KEY_ID, Dynalite, REGION, SECRET_ACCESS_KEY};

/// The table the other integration tests share (this binary has its own dynalite).
const TABLE: &str = "unique-test";

/// The read operations, as the `x-amz-target` header names them.
const READS: [&str; 3] = ["GetItem", "BatchGetItem", "Query"];

/// Records the operation and body of every read request the client transmits.
#[derive(Debug, Clone, Default)]
struct ReadBodies(Arc<Mutex<Vec<(&'static str, String)>>>);

impl Intercept for ReadBodies {
    fn name(&self) -> &'static str {
        "test: read body recorder"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let target = request.headers().get("x-amz-target").unwrap_or_default();
        let operation = target.rsplit('.').next().unwrap_or_default();
        if let Some(read) = READS.into_iter().find(|read| *read == operation) {
            let body = request.body().bytes().expect("a read's body is in memory");
            self.0
                .lock()
                .unwrap()
                .push((read, String::from_utf8_lossy(body).into_owned()));
        }
        Ok(())
    }
}

#[tokio::test]
async fn every_read_is_a_consistent_read() {
    let recorder = ReadBodies::default();
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version_latest()
        .region(Region::new(REGION))
        .endpoint_url(Dynalite::shared().endpoint_url())
        .credentials_provider(Credentials::new(
            ACCESS_KEY_ID,
            SECRET_ACCESS_KEY,
            None,
            None,
            "test",
        ))
        .interceptor(recorder.clone())
        .build();
    let store = DynamoStore::builder()
        .client(aws_sdk_dynamodb::Client::from_conf(conf))
        .table(TABLE)
        .max_attempts(1)
        .build()
        .await
        .unwrap();
    store
        .create_table_if_missing(Duration::from_secs(10))
        .await
        .unwrap();
    store
        .check_reachable(Duration::from_secs(10))
        .await
        .unwrap();

    // Every read path: absent and present records, directly and through the Arbiter.
    let key = Key::new("consistent-reads", "test", 1);
    store.read_owner(&key).await.unwrap();
    store.current(&key).await.unwrap();
    let arbiter = Arbiter::new(store.clone());
    let owner = Owner::new("r", "c", "http://127.0.0.1:9/kick");
    let input = ClaimInput {
        key: key.clone(),
        owner,
        claim_id: "c1".into(),
    };
    // The first login writes first (C11) and reads nothing; its replay reads.
    arbiter.claim(&input).await.unwrap();
    assert!(arbiter.claim(&input).await.unwrap().replayed);
    store.read_owner(&key).await.unwrap();
    store.current(&key).await.unwrap();
    store
        .read_owners(&[key.clone(), key.clone().with_slot("mobile")])
        .await
        .unwrap();
    let listing = store
        .list_sessions(&UserKey::new("consistent-reads", "test", 1))
        .await
        .unwrap();
    assert_eq!(listing.len(), 1);
    // The readiness probe's read of its sentinel key.
    store.check_ready().await.unwrap();

    let bodies = recorder.0.lock().unwrap().clone();
    for read in READS {
        assert!(
            bodies.iter().any(|(sent, _)| *sent == read),
            "the read paths sent no {read}: {bodies:?}"
        );
    }
    assert!(bodies.len() >= 8, "every read path was sent: {bodies:?}");
    for (read, body) in &bodies {
        assert!(
            body.contains(r#""ConsistentRead":true"#),
            "a {read} without ConsistentRead: true: {body}"
        );
    }
}
