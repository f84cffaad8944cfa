#![doc = include_str!("../README.md")]

#[cfg(all(test, loom))]
mod loom_models;
mod owners;
#[cfg(all(test, loom))]
mod pool_loom_models;
mod record;
mod sync;
mod table;
mod won;

use std::fmt;
use std::sync::Arc;

use unique_core::{
    CasOutcome, CurrentView, Error, Fence, Key, Owner, OwnerState, Store, UserKey, UserSession,
    VacantClaim, VacantClaims, async_trait,
};

use crate::record::state_of;
#[cfg(feature = "test-util")]
use crate::record::{OwnerAttr, Record};
use crate::table::Table;

/// Shards of a store built with [`MemoryStore::new`]: enough that tasks on
/// different keys rarely meet on one lock.
const DEFAULT_SHARDS: usize = 64;

/// An in-memory, linearizable-per-key [`Store`].
///
/// Cloning is cheap and every clone sees the same records. Records live as long
/// as the last clone; there is no TTL and gens are never reset.
#[derive(Clone)]
pub struct MemoryStore {
    table: Arc<Table>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self {
            table: Arc::new(Table::with_shards(DEFAULT_SHARDS)),
        }
    }

    /// **Test hook that bypasses every fence**: unconditionally replaces `key`'s
    /// record with exactly these attributes (`None` = attribute absent).
    ///
    /// It exists so the contract suite can build records the Arbiter never
    /// writes: corrupt owners, empty cids, tombstones, gens near `i64::MAX`.
    /// `owner` is stored as if it were the raw JSON string of another backend:
    /// empty or absent reads as a tombstone, unparseable reads as corrupt (C7).
    /// Never use it in production code: it can move a gen backwards. Compiled
    /// only with the `test-util` feature.
    #[cfg(feature = "test-util")]
    pub fn put_raw(
        &self,
        key: &Key,
        generation: i64,
        owner: Option<&str>,
        claim_id: Option<&str>,
        won: Option<&str>,
    ) {
        self.table.put(
            key,
            Record::raw(
                generation,
                OwnerAttr::from_raw(owner),
                claim_id,
                &unique_core::RecentClaims::decode(won),
            ),
        );
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.table.shard_count())
            .finish_non_exhaustive()
    }
}

/// C8: refuses an owner with neither an endpoint nor a node before the record is touched.
/// An `Owner` is strings and always serialises, so that is the only rule left to check;
/// building its JSON (as `encode_owner` does) would cost an allocation per claim for a
/// string this store never keeps.
fn check_owner(owner: &Owner) -> Result<(), Error> {
    if owner.endpoint.is_empty() && owner.node.is_empty() {
        return Err(Error::invalid("owner must name an endpoint or a node"));
    }
    Ok(())
}

/// Every method is synchronous under the hood: one shard lock, held for a
/// lookup and at most one write, never across an `.await`.
#[async_trait]
impl Store for MemoryStore {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        Ok(self.table.read_with(key, state_of))
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        check_owner(owner)?;
        let fence = Fence::for_snapshot(snap)?;
        Ok(self
            .table
            .claim(key, fence, owner, claim_id, &snap.recent_claims))
    }

    /// Absent records and tombstones alike: the check and the write share one
    /// critical section, so a first login is one lookup instead of two.
    fn vacant_claims(&self) -> VacantClaims {
        VacantClaims::AbsentAndTombstones
    }

    async fn claim_vacant(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
    ) -> Result<VacantClaim, Error> {
        check_owner(owner)?;
        Ok(self.table.claim_vacant(key, owner, claim_id))
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.table.read_with(key, state_of).into_current_view()
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        Ok(self.table.release(key, generation))
    }

    /// One shard lock: every slot of a user is in its uid's shard, and the shard's
    /// index names the user's slots, so nothing is scanned.
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        self.table.sessions(user)
    }

    /// C13: every shard counted under its own lock, one after the other.
    async fn count_online(&self) -> Result<Option<u64>, Error> {
        Ok(Some(self.table.count_online()))
    }

    /// One pass over the keys, each shard locked once.
    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        Ok(self.table.read_many(keys, |record| Ok(state_of(record))))
    }
}
