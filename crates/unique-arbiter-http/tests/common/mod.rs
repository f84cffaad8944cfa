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

/// A memory lease directory that fails on chosen ids of one project: `<project>#down` →
/// `Unavailable`, `<project>#corrupt` → `Corrupt`, `<project>#broken` → `Backend` (the routes
/// hand the directory ids scoped by project).
pub(crate) struct FailingLeases {
    project: &'static str,
    inner: unique_lease::MemoryDirectory,
}

impl FailingLeases {
    /// Fails on `project`'s `down`, `corrupt` and `broken` ids; `inner` serves the others.
    pub(crate) fn new(project: &'static str, inner: unique_lease::MemoryDirectory) -> Self {
        Self { project, inner }
    }

    fn fault(&self, id: &str) -> Result<(), unique_lease::LeaseError> {
        use unique_lease::LeaseError;
        match id
            .strip_prefix(self.project)
            .and_then(|id| id.strip_prefix('#'))
        {
            Some("down") => Err(LeaseError::unavailable_with(
                "lease store unreachable",
                std::io::Error::other("refused"),
            )),
            Some("corrupt") => Err(LeaseError::Corrupt("lease record without a token".into())),
            Some("broken") => Err(LeaseError::backend("epoch counter exhausted")),
            _ => Ok(()),
        }
    }
}

#[unique_lease::async_trait]
impl unique_lease::LeaseBackend for FailingLeases {
    async fn read_lease(
        &self,
        room_id: &str,
    ) -> Result<Option<unique_lease::StoredLease>, unique_lease::LeaseError> {
        self.fault(room_id)?;
        self.inner.read_lease(room_id).await
    }
    async fn ensure_lease(
        &self,
        room_id: &str,
        node_id: &str,
        ttl_ms: u64,
    ) -> Result<unique_lease::StoredLease, unique_lease::LeaseError> {
        self.fault(room_id)?;
        self.inner.ensure_lease(room_id, node_id, ttl_ms).await
    }
    async fn release_lease(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, unique_lease::LeaseError> {
        self.fault(room_id)?;
        self.inner
            .release_lease(room_id, node_id, lease_token)
            .await
    }
    async fn write_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl_ms: u64,
    ) -> Result<unique_lease::StoredNode, unique_lease::LeaseError> {
        self.fault(node_id)?;
        self.inner.write_node(node_id, grpc_addr, ttl_ms).await
    }
    async fn read_node(
        &self,
        node_id: &str,
    ) -> Result<Option<unique_lease::StoredNode>, unique_lease::LeaseError> {
        self.fault(node_id)?;
        self.inner.read_node(node_id).await
    }
    async fn delete_node(&self, node_id: &str) -> Result<(), unique_lease::LeaseError> {
        self.fault(node_id)?;
        self.inner.delete_node(node_id).await
    }
}
