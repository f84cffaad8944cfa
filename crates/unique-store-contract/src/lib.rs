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

/// A [`Store`] under test, plus the raw-record hook the suite needs.
#[async_trait]
pub trait ContractStore: Store {
    /// Writes `record` for `key` unconditionally, replacing whatever is stored.
    /// Test-only: it bypasses every fence.
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error>;
}

/// What every case receives.
pub type DynStore = Arc<dyn ContractStore>;
