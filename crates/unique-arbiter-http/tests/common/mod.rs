//! Shared by this crate's integration tests.

// Each test file uses some of these helpers, not all.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use unique_core::{Error, StoreAnswer, StoreCall, StoreLayer, StoreOperation};
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

/// A `StoreLayer`: every call reaches the memory store (write-first claims and its own
/// readiness check included), counted as a read or a write.
impl StoreLayer for CountingStore {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn around<'a, T: StoreAnswer + 'a>(
        &'a self,
        operation: StoreOperation,
        call: StoreCall<'a, T>,
    ) -> Result<T, Error> {
        let counter = match operation {
            StoreOperation::ClaimCas | StoreOperation::ClaimVacant | StoreOperation::Release => {
                &self.writes
            }
            StoreOperation::ReadOwner
            | StoreOperation::Current
            | StoreOperation::ReadOwners
            | StoreOperation::ListSessions
            | StoreOperation::CheckReady
            | StoreOperation::CountOnline => &self.reads,
        };
        counter.fetch_add(1, Ordering::SeqCst);
        call.await
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
