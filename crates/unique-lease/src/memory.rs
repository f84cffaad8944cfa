//! The in-memory backend: for tests, simulations and single-process use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use crate::directory::{LeaseBackend, StoredLease, StoredNode, new_lease_token};
use crate::error::LeaseError;
use crate::time::{Clock, SystemClock, to_millis};

/// A [`Directory`](crate::Directory) and [`NodeRegistry`](crate::NodeRegistry) in
/// process memory, safe to share between tasks (`Arc<MemoryDirectory>`). One mutex
/// serialises every operation, which makes each one atomic and linearizable (D8).
/// Expiry is judged on the directory's [`Clock`] (the system clock unless a test
/// injects a [`ManualClock`](crate::ManualClock)): every caller in the process
/// shares it, so their `now` arguments never matter (D10).
///
/// Expired leases stay until they are replaced or released (there is no background
/// sweep), so a long-lived process with many short-lived rooms should prefer a
/// shared backend or release rooms it stops serving. The epoch counter lives as long
/// as the value: a new `MemoryDirectory` starts again at epoch 1, so fencing across
/// process restarts needs a durable backend.
#[derive(Debug)]
pub struct MemoryDirectory {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

/// A holding as stored: expiry in whole milliseconds on the directory's clock.
#[derive(Debug, Clone)]
struct Held {
    node_id: String,
    lease_token: String,
    epoch: u64,
    expires_ms: u64,
}

impl Held {
    fn report(&self, now_ms: u64) -> StoredLease {
        StoredLease {
            node_id: self.node_id.clone(),
            lease_token: self.lease_token.clone(),
            epoch: self.epoch,
            ttl_left_ms: self.expires_ms.saturating_sub(now_ms),
        }
    }
}

#[derive(Debug)]
struct Registered {
    grpc_addr: String,
    updated_ms: u64,
    expires_ms: u64,
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<String, Held>,
    /// The last epoch issued in any room (D4: one counter, never decreases).
    last_epoch: u64,
    nodes: HashMap<String, Registered>,
}

impl Default for MemoryDirectory {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryDirectory {
    /// An empty directory judging time on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty directory judging leases and registrations on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock, but a poisoned lock must not turn
        // every later call into a panic either.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> Result<u64, LeaseError> {
        to_millis(self.clock.now(), "clock")
    }

    /// Test-only: makes the room's lease expired, as if its ttl had run out. A room
    /// without a lease is left alone. Not part of the production traits.
    #[cfg(any(test, feature = "test-util"))]
    pub fn force_expire(&self, room_id: &str) {
        if let Some(lease) = self.state().leases.get_mut(room_id) {
            lease.expires_ms = 0;
        }
    }
}

#[async_trait]
impl LeaseBackend for MemoryDirectory {
    async fn read_lease(&self, room_id: &str) -> Result<Option<StoredLease>, LeaseError> {
        let now_ms = self.now_ms()?;
        Ok(self.state().leases.get(room_id).map(|h| h.report(now_ms)))
    }

    async fn ensure_lease(
        &self,
        room_id: &str,
        node_id: &str,
        ttl_ms: u64,
    ) -> Result<StoredLease, LeaseError> {
        let now_ms = self.now_ms()?;
        let wanted = now_ms + ttl_ms;
        let mut state = self.state();
        if let Some(current) = state.leases.get_mut(room_id)
            && now_ms < current.expires_ms
        {
            if current.node_id == node_id {
                // D2: extend, never shorten; token and epoch stay.
                current.expires_ms = current.expires_ms.max(wanted);
            }
            return Ok(current.report(now_ms));
        }
        let epoch = state
            .last_epoch
            .checked_add(1)
            .ok_or_else(|| LeaseError::backend("epoch counter exhausted"))?;
        state.last_epoch = epoch;
        let held = Held {
            node_id: node_id.to_owned(),
            lease_token: new_lease_token(),
            epoch,
            expires_ms: wanted,
        };
        let report = held.report(now_ms);
        state.leases.insert(room_id.to_owned(), held);
        Ok(report)
    }

    async fn release_lease(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        let mut state = self.state();
        if state
            .leases
            .get(room_id)
            .is_some_and(|l| l.node_id == node_id && l.lease_token == lease_token)
        {
            state.leases.remove(room_id);
            return Ok(true);
        }
        Ok(false)
    }

    async fn write_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl_ms: u64,
    ) -> Result<StoredNode, LeaseError> {
        let now_ms = self.now_ms()?;
        self.state().nodes.insert(
            node_id.to_owned(),
            Registered {
                grpc_addr: grpc_addr.to_owned(),
                updated_ms: now_ms,
                expires_ms: now_ms + ttl_ms,
            },
        );
        Ok(StoredNode {
            grpc_addr: grpc_addr.to_owned(),
            age_ms: 0,
            ttl_left_ms: ttl_ms,
        })
    }

    async fn read_node(&self, node_id: &str) -> Result<Option<StoredNode>, LeaseError> {
        let now_ms = self.now_ms()?;
        let mut state = self.state();
        match state.nodes.get(node_id) {
            Some(node) if now_ms < node.expires_ms => Ok(Some(StoredNode {
                grpc_addr: node.grpc_addr.clone(),
                age_ms: now_ms.saturating_sub(node.updated_ms),
                ttl_left_ms: node.expires_ms - now_ms,
            })),
            Some(_) => {
                // Expired: drop it so dead nodes do not accumulate.
                state.nodes.remove(node_id);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn delete_node(&self, node_id: &str) -> Result<(), LeaseError> {
        self.state().nodes.remove(node_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::Directory;

    #[tokio::test]
    async fn force_expire_lets_another_node_take_over() {
        let dir = MemoryDirectory::new();
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let ttl = Duration::from_secs(30);
        let first = dir.ensure_owner("room", "a", now, ttl).await.unwrap();
        assert!(
            dir.ensure_owner("room", "b", now, ttl)
                .await
                .unwrap()
                .is_held_by("a")
        );

        dir.force_expire("room");
        assert!(
            !dir.verify_owner("room", "a", &first.lease_token, now)
                .await
                .unwrap()
        );
        let second = dir.ensure_owner("room", "b", now, ttl).await.unwrap();
        assert!(second.is_held_by("b"));
        assert!(second.epoch > first.epoch);
        assert_ne!(second.lease_token, first.lease_token);

        dir.force_expire("no-such-room");
        assert_eq!(dir.lookup("no-such-room").await.unwrap(), None);
    }
}
