//! The store contract suite (`unique-store-contract`, C1–C10 and the traps) run against
//! `FjallStore`: every case on a fresh store in its own temporary directory (on disk, so
//! the journal and its fsyncs are the real ones).

use std::sync::Arc;

use tempfile::TempDir;
use unique_core::{Error, Key, async_trait};
use unique_store_contract::{RawRecord, RawWriter, Subject, store_contract_tests};
use unique_store_fjall::FjallStore;

/// Unconditional writes through the store's own writer (fjall locks the directory, so no
/// second handle can write it). Owns the temporary directory; the store it holds is
/// declared first, so it closes before the directory goes.
struct FjallRaw {
    store: Arc<FjallStore>,
    _dir: TempDir,
}

#[async_trait]
impl RawWriter for FjallRaw {
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error> {
        self.store
            .put_raw(
                key,
                record.generation,
                record.owner.as_deref(),
                record.claim_id.as_deref(),
                record.won.as_deref(),
            )
            .await
    }
}

/// The factory the suite calls once per case. Opening does file I/O, so it runs off the
/// async workers.
async fn subject() -> Subject {
    tokio::task::spawn_blocking(|| {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let store = Arc::new(FjallStore::open(dir.path().join("store")).expect("open the store"));
        Subject {
            store: store.clone(),
            raw: Arc::new(FjallRaw { store, _dir: dir }),
        }
    })
    .await
    .expect("open the store")
}

store_contract_tests!(subject);
unique_store_contract::online_count_tests!(subject);

/// The single entry point runs the same cases in sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_passes() {
    unique_store_contract::run_all(subject).await;
}
