//! The in-memory backend: for tests, simulations and single-process use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::directory::{Directory, NodeRegistry, new_token};
use crate::error::LeaseError;
use crate::time::{Clock, SystemClock, from_millis, to_millis, ttl_millis};
use crate::types::{Lease, NodeRegistration};
use crate::validate;

/// A [`Directory`] and [`NodeRegistry`] in process memory, safe to share between
/// tasks (`Arc<MemoryDirectory>`). One mutex serialises every operation, which makes
/// each one atomic and linearizable (D8).
///
/// Expired leases stay until they are replaced or released (there is no background
/// sweep), so a long-lived process with many short-lived rooms should prefer the
/// Redis backend or release rooms it stops serving. The epoch counter lives as long
/// as the value: a new `MemoryDirectory` starts again at epoch 1, so fencing across
/// process restarts needs a durable backend.
#[derive(Debug)]
pub struct MemoryDirectory {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<String, Lease>,
    /// The last epoch issued in any room (D4: one counter, never decreases).
    last_epoch: u64,
    nodes: HashMap<String, NodeRegistration>,
}

impl Default for MemoryDirectory {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryDirectory {
    /// An empty directory whose node registry reads the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty directory whose node registry reads `clock` (leases always use the
    /// caller's `now`).
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

    /// Test-only: makes the room's lease expired at every `now`, as if its ttl had
    /// run out (its expiry becomes the zero instant, which is never valid). A room
    /// without a lease is left alone. Not part of the production traits.
    #[cfg(any(test, feature = "test-util"))]
    pub fn force_expire(&self, room_id: &str) {
        if let Some(lease) = self.state().leases.get_mut(room_id) {
            lease.expires_at = std::time::UNIX_EPOCH;
        }
    }
}

#[async_trait]
impl Directory for MemoryDirectory {
    async fn lookup(&self, room_id: &str) -> Result<Option<Lease>, LeaseError> {
        validate::id(room_id, "room_id")?;
        Ok(self.state().leases.get(room_id).cloned())
    }

    async fn ensure_owner(
        &self,
        room_id: &str,
        node_id: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        validate::id(room_id, "room_id")?;
        validate::id(node_id, "node_id")?;
        let now_ms = to_millis(now, "now")?;
        let wanted = from_millis(now_ms + ttl_millis(ttl)?);
        let now = from_millis(now_ms);

        let mut state = self.state();
        if let Some(current) = state.leases.get_mut(room_id)
            && current.valid_at(now)
        {
            if current.node_id == node_id {
                // D2: extend, never shorten; token and epoch stay.
                current.expires_at = current.expires_at.max(wanted);
            }
            return Ok(current.clone());
        }
        let epoch = state
            .last_epoch
            .checked_add(1)
            .ok_or_else(|| LeaseError::backend("epoch counter exhausted"))?;
        state.last_epoch = epoch;
        let lease = Lease {
            room_id: room_id.to_owned(),
            node_id: node_id.to_owned(),
            lease_token: new_token(),
            epoch,
            expires_at: wanted,
        };
        state.leases.insert(room_id.to_owned(), lease.clone());
        Ok(lease)
    }

    async fn verify_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
        now: SystemTime,
    ) -> Result<bool, LeaseError> {
        validate::id(room_id, "room_id")?;
        validate::id(node_id, "node_id")?;
        validate::token(lease_token)?;
        let now = from_millis(to_millis(now, "now")?);
        Ok(self
            .state()
            .leases
            .get(room_id)
            .is_some_and(|lease| lease.fences(node_id, lease_token, now)))
    }

    async fn release_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        validate::id(room_id, "room_id")?;
        validate::id(node_id, "node_id")?;
        validate::token(lease_token)?;
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
}

#[async_trait]
impl NodeRegistry for MemoryDirectory {
    async fn register_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl: Duration,
    ) -> Result<NodeRegistration, LeaseError> {
        validate::id(node_id, "node_id")?;
        validate::addr(grpc_addr)?;
        let ttl_ms = ttl_millis(ttl)?;
        let now_ms = to_millis(self.clock.now(), "clock")?;
        let registration = NodeRegistration {
            node_id: node_id.to_owned(),
            grpc_addr: grpc_addr.to_owned(),
            updated_at: from_millis(now_ms),
            expires_at: from_millis(now_ms + ttl_ms),
        };
        self.state()
            .nodes
            .insert(node_id.to_owned(), registration.clone());
        Ok(registration)
    }

    async fn lookup_node(&self, node_id: &str) -> Result<Option<NodeRegistration>, LeaseError> {
        validate::id(node_id, "node_id")?;
        let now = self.clock.now();
        let mut state = self.state();
        match state.nodes.get(node_id) {
            Some(node) if node.valid_at(now) => Ok(Some(node.clone())),
            Some(_) => {
                // Expired: drop it so dead nodes do not accumulate.
                state.nodes.remove(node_id);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn unregister_node(&self, node_id: &str) -> Result<(), LeaseError> {
        validate::id(node_id, "node_id")?;
        self.state().nodes.remove(node_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

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
