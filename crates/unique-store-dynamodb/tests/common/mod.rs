//! Shared by the integration tests: stores on the shared dynalite of this test binary.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use unique_core::Key;
use unique_store_dynamodb::{DynamoStore, DynamoStoreBuilder};
use unique_testsupport::dynalite::{ACCESS_KEY_ID, Dynalite, REGION, SECRET_ACCESS_KEY};

/// Every case uses its own keys, so one table per server is enough.
pub(crate) const TABLE: &str = "unique-test";

/// A store on the shared dynalite, with the table created. No SDK retry, so a
/// test sees every request it causes.
pub(crate) async fn store() -> DynamoStore {
    let store = store_at(&Dynalite::shared().endpoint_url(), 1).await;
    store
        .create_table_if_missing(Duration::from_secs(10))
        .await
        .expect("create the test table on dynalite");
    store
}

/// A builder with the fixed test credentials and region and nothing else set.
pub(crate) fn builder() -> DynamoStoreBuilder {
    DynamoStore::builder()
        .region(REGION)
        .static_credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY)
}

/// A store on `endpoint` (dynalite or a proxy in front of it) making at most
/// `max_attempts` HTTP attempts per operation. Fixed test credentials and
/// region, so the SDK never looks for credentials or a region itself. The
/// timeouts are far above the defaults, so a loaded test machine never turns a
/// slow answer into a failure; the tests of the timeouts set their own.
pub(crate) async fn store_at(endpoint: &str, max_attempts: u32) -> DynamoStore {
    builder()
        .table(TABLE)
        .endpoint_url(endpoint)
        .connect_timeout(Duration::from_secs(2))
        .attempt_timeout(Duration::from_secs(10))
        .operation_timeout(Duration::from_secs(10))
        .max_attempts(max_attempts)
        .build()
        .await
        .expect("build a dynamodb store for dynalite")
}

/// The primary key of `key`'s item, spelled out as the crate docs define the
/// layout: `pk` = the user (`project#env#uid`), `sk` = `#` followed by the slot
/// (`#` alone for the default slot).
pub(crate) fn item_key(key: &Key) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), AttributeValue::S(key.user().to_string())),
        ("sk".to_owned(), AttributeValue::S(format!("#{}", key.slot))),
    ])
}
