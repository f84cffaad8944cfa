//! The store contract suite (`unique-store-contract`) run against `DynamoStore`
//! on a real DynamoDB-compatible server (dynalite, started by the test tooling).

mod common;

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use unique_core::{Error, Key, async_trait};
use unique_store_contract::{RawRecord, RawWriter, Subject, store_contract_tests};
use unique_store_dynamodb::DynamoStore;

/// The raw-record hook: one unconditional `PutItem` of the key's item (`pk`, `sk`)
/// holding exactly the given attributes (an absent `owner`, `cid` or `won` is left out of the item, so a
/// put over an item that had one removes it).
struct RawPut(DynamoStore);

#[async_trait]
impl RawWriter for RawPut {
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error> {
        let mut put = self
            .0
            .client()
            .put_item()
            .table_name(self.0.table())
            .set_item(Some(common::item_key(key)))
            .item("gen", AttributeValue::N(record.generation.to_string()));
        if let Some(owner) = record.owner {
            put = put.item("owner", AttributeValue::S(owner));
        }
        if let Some(cid) = record.claim_id {
            put = put.item("cid", AttributeValue::S(cid));
        }
        if let Some(won) = record.won {
            put = put.item("won", AttributeValue::S(won));
        }
        put.send()
            .await
            .map(|_| ())
            .map_err(|e| Error::unavailable_with("raw put_item failed", e))
    }
}

async fn subject() -> Subject {
    let store = common::store().await;
    Subject {
        store: Arc::new(store.clone()),
        raw: Arc::new(RawPut(store)),
    }
}

store_contract_tests!(subject);

/// The write-first cases (C11) run here for absent records: an update expression cannot
/// build a tombstone's next `won` list, so the store claims absent records only, and none
/// of those cases passes by skipping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_writes_first_over_absent_records() {
    let subject = subject().await;
    assert_eq!(
        subject.store.vacant_claims(),
        unique_core::VacantClaims::AbsentOnly
    );
}
