//! The store contract suite run on `MapStore`: one test per case, the count
//! cases included.

use std::sync::Arc;

use out_of_tree_store::MapStore;
use unique_core::{Error, Key, async_trait};
use unique_store_contract::{
    RawRecord, RawWriter, Subject, online_count_tests, store_contract_tests,
};

/// The raw-record hook. A local newtype: the trait and the store live in
/// other crates, so the trait cannot be implemented on the store here.
struct Raw(Arc<MapStore>);

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

/// A fresh store per case: the store under test and its raw hook, two views
/// of the same records.
async fn subject() -> Subject {
    let store = Arc::new(MapStore::new());
    Subject {
        store: store.clone(),
        raw: Arc::new(Raw(store)),
    }
}

store_contract_tests!(subject);

// The store counts its sessions (`count_online` answers `Some`), so it runs the
// count cases too, each on a fresh store: a count is of the whole store.
online_count_tests!(subject);
