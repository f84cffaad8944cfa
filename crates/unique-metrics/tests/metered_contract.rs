//! The store contract run on `MeteredStore` around the memory store (C12): every case of the
//! suite through the wrapper, and one forwarding case per `Store` method, so a method the
//! wrapper fails to forward fails the case named for it
//! (`store_contract::forwarding::check_ready`, …). `cargo xtask contract` lists it as
//! `unique-metrics / metered_contract`.

use std::sync::Arc;

use unique_core::{Error, Key, Store, VacantClaims, async_trait};
use unique_metrics::MeteredStore;
use unique_store_contract::{RawRecord, RawWriter, Subject, wrapper_contract_tests};
use unique_store_memory::MemoryStore;

/// The memory store's raw-record hook (its `test-util` feature).
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

fn memory() -> Subject {
    let store = MemoryStore::new();
    Subject {
        store: Arc::new(store.clone()),
        raw: Arc::new(Raw(store)),
    }
}

fn metered(store: Arc<dyn Store>) -> Arc<dyn Store> {
    Arc::new(MeteredStore::new(store))
}

wrapper_contract_tests!(|| async { memory() }, metered);

/// The write-first cases run through the wrapper only when it writes first: the memory
/// store does, and so must the wrapper around it.
#[test]
fn the_wrapper_writes_first_as_the_memory_store_does() {
    let store = metered(Arc::new(MemoryStore::new()));
    assert_eq!(store.vacant_claims(), VacantClaims::AbsentAndTombstones);
}
