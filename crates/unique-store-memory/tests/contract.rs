//! The store contract suite (`unique-store-contract`) run against `MemoryStore`.

use std::sync::Arc;

use unique_core::{Error, Key, async_trait};
use unique_store_contract::{RawRecord, RawWriter, Subject, store_contract_tests};
use unique_store_memory::MemoryStore;

/// The raw-record hook: a local newtype, because both the trait and the store
/// live in other crates.
struct Raw(MemoryStore);

#[async_trait]
impl RawWriter for Raw {
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error> {
        self.0.put_raw(
            key,
            record.generation,
            record.owner.as_deref(),
            record.claim_id.as_deref(),
            record.won.as_deref(),
        );
        Ok(())
    }
}

async fn subject() -> Subject {
    let store = MemoryStore::new();
    Subject {
        store: Arc::new(store.clone()),
        raw: Arc::new(Raw(store)),
    }
}

store_contract_tests!(subject);
unique_store_contract::online_count_tests!(subject);

/// The single entry point runs the same cases in sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_passes() {
    unique_store_contract::run_all(subject).await;
}
