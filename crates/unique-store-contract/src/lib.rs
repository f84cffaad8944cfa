#![doc = include_str!("../README.md")]

use std::sync::Arc;

use unique_core::{Error, Key, Store, async_trait};

/// A record exactly as stored, for building states the Arbiter never writes
/// (corrupt owners, empty cids, near-`i64::MAX` gens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// The `gen` attribute.
    pub generation: i64,
    /// The `owner` attribute as a raw string; `None` = attribute absent.
    pub owner: Option<String>,
    /// The `cid` attribute; `None` = attribute absent.
    pub claim_id: Option<String>,
}

/// The raw-record hook a backend gives the suite: an unconditional write that
/// bypasses every fence. Test-only; implemented next to the backend's contract test.
#[async_trait]
pub trait RawWriter: Send + Sync + 'static {
    /// Writes `record` for `key`, replacing whatever is stored.
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error>;
}

/// What every case receives: the store under test and its raw-record hook
/// (both views of the same backend state).
#[derive(Clone)]
pub struct Subject {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// Writes raw records into the same backend.
    pub raw: Arc<dyn RawWriter>,
}
