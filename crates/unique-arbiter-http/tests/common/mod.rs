//! Shared by this crate's integration tests.

// Each test file uses some of these helpers, not all.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use unique_core::{
    CasOutcome, CurrentView, Error, Key, Owner, OwnerState, Store, UserKey, UserSession,
    async_trait,
};
use unique_store_memory::MemoryStore;

/// A memory store that counts reads and writes, to show a refused request touches nothing.
#[derive(Default)]
pub(crate) struct CountingStore {
    inner: MemoryStore,
    pub(crate) reads: AtomicUsize,
    pub(crate) writes: AtomicUsize,
}

impl CountingStore {
    /// Every store call so far, reads and writes.
    pub(crate) fn calls(&self) -> usize {
        self.reads.load(Ordering::SeqCst) + self.writes.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Store for CountingStore {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_owner(key).await
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.claim_cas(key, owner, claim_id, snap).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.release(key, generation).await
    }
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.list_sessions(user).await
    }
}
