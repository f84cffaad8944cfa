//! The two capabilities: the room lease [`Directory`] and the [`NodeRegistry`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::error::LeaseError;
use crate::types::{Lease, NodeRegistration};

/// The room directory: `room_id → node_id` under a lease with ordered fencing.
///
/// Time is the caller's: every decision about expiry compares the stored
/// `expires_at` with the `now` argument (millisecond resolution, see
/// [`time`](crate::time)). Callers should pass their wall clock; nodes whose clocks
/// disagree by `d` can overlap by up to `d`, so keep clocks synchronised and ttls
/// well above the skew.
///
/// # Contract
///
/// Every clause has a case in the `unique-lease-contract` crate whose doc names it.
///
/// - **D1 grant.** When the room has no lease, or its lease is not
///   [`valid_at(now)`](Lease::valid_at) (the expiry instant itself is expired),
///   [`ensure_owner`](Directory::ensure_owner) MUST store and return a new lease for
///   the caller: a fresh random token never issued before, an epoch per D4, and
///   `expires_at = now + ttl`. This holds for the previous holder too: once its
///   lease expired, its old token is dead even if nobody else took the room.
/// - **D2 renewal.** When the caller's own lease is valid at `now`, `ensure_owner`
///   MUST keep `lease_token` and `epoch` (commands fenced by the token survive
///   background renewals) and set `expires_at = max(expires_at, now + ttl)`: a
///   renewal never shortens a lease, so a delayed renewal carrying an older `now`
///   cannot cut short a lease another task of the node relies on.
/// - **D3 held elsewhere.** When another node's lease is valid at `now`,
///   `ensure_owner` MUST return that lease unchanged and write nothing.
/// - **D4 ordered fencing.** Every new lease of a room MUST carry an epoch strictly
///   greater than every epoch issued before for that room. Epochs are never reused
///   and never reset: not by [`release_owner`](Directory::release_owner), not by
///   expiry, not by a backend dropping expired leases. (Backends in this crate draw
///   epochs from one counter per directory, so epochs are also unique across rooms.)
/// - **D5 verify.** [`verify_owner`](Directory::verify_owner) MUST return `true` iff
///   the stored lease has this `node_id` and `lease_token` and is valid at `now`. It
///   never renews, never takes over, never writes.
/// - **D6 release.** `release_owner` MUST delete the stored lease only when its
///   `node_id` and `lease_token` are the caller's (expired or not) and return whether it
///   deleted one. Another node's lease, another holding of the same node (another
///   token), or no lease, is `Ok(false)` with nothing written.
/// - **D7 lookup.** [`lookup`](Directory::lookup) MUST return the stored lease, an
///   expired one included (judge it with [`Lease::valid_at`]), or `None`; it never
///   writes. A backend MAY forget a lease some time after it expired (Redis drops it
///   after a grace period); D4 still holds afterwards.
/// - **D8 atomicity.** Each operation MUST be atomic and linearizable per room:
///   among concurrent `ensure_owner` calls on a free room exactly one is granted, and
///   every caller receives that same lease. Rooms never interfere with each other.
/// - **D9 input.** Empty, over-long or control-character ids, an empty token, a
///   `now` before the Unix epoch or at/after [`MAX_TIME_MILLIS`](crate::MAX_TIME_MILLIS),
///   or a ttl above [`MAX_TTL`](crate::MAX_TTL) MUST be
///   [`LeaseError::InvalidParams`] before storage is touched. A zero ttl MUST mean
///   [`DEFAULT_TTL`](crate::DEFAULT_TTL) (30 s).
///
/// # Errors and retries
///
/// Besides `InvalidParams`: [`LeaseError::Unavailable`] (backend unreachable; the
/// operation may or may not have happened), [`LeaseError::Corrupt`] (a stored record
/// this crate did not write; no lease is granted over it), [`LeaseError::Backend`].
/// Retrying `ensure_owner` after `Unavailable` is safe: if the lost call granted the
/// lease, the retry (before expiry) is a renewal and returns the same token.
#[async_trait]
pub trait Directory: Send + Sync + 'static {
    /// The stored lease of `room_id`, expired or not; `None` when there is none (D7).
    async fn lookup(&self, room_id: &str) -> Result<Option<Lease>, LeaseError>;

    /// Grants, renews, or reports the current holder (D1–D4, D8). The caller got the
    /// room iff the returned lease [`is_held_by`](Lease::is_held_by) `node_id`.
    async fn ensure_owner(
        &self,
        room_id: &str,
        node_id: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> Result<Lease, LeaseError>;

    /// Whether `node_id` still holds `room_id` under `lease_token` at `now` (D5).
    async fn verify_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
        now: SystemTime,
    ) -> Result<bool, LeaseError>;

    /// Deletes the lease if `node_id` holds it under `lease_token` (expired or not), so a
    /// successor need not wait for the ttl (D6). Returns whether a lease was deleted. A
    /// newer holding of the same node (another token) is never touched: a release that
    /// comes late, after the room was lost and granted again, cannot free the new one.
    async fn release_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError>;
}

/// The node registry: `node_id → private gRPC address`, each entry with its own ttl.
///
/// Registrations are judged against the backend's [`Clock`](crate::Clock) (the
/// system clock unless a test injects a [`ManualClock`](crate::ManualClock)).
///
/// # Contract
///
/// - **N1 register.** [`register_node`](NodeRegistry::register_node) MUST write or
///   replace the node's registration with `updated_at = now` and
///   `expires_at = now + ttl` (a zero ttl means 30 s) and return it.
/// - **N2 expiry.** [`lookup_node`](NodeRegistry::lookup_node) MUST return the
///   registration only while it is [`valid_at(now)`](NodeRegistration::valid_at);
///   an expired registration reads as `None` (backends also delete it eventually).
/// - **N3 unregister.** [`unregister_node`](NodeRegistry::unregister_node) MUST
///   remove the registration; removing an unknown node is `Ok`.
/// - **N4 input.** Empty, over-long or control-character node ids, an empty address
///   or one with whitespace, or a ttl above [`MAX_TTL`](crate::MAX_TTL) MUST be
///   [`LeaseError::InvalidParams`] before storage is touched.
#[async_trait]
pub trait NodeRegistry: Send + Sync + 'static {
    /// Writes or renews the node's address for `ttl` (N1).
    async fn register_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl: Duration,
    ) -> Result<NodeRegistration, LeaseError>;

    /// The node's registration while it is valid (N2).
    async fn lookup_node(&self, node_id: &str) -> Result<Option<NodeRegistration>, LeaseError>;

    /// Removes the node's registration (N3).
    async fn unregister_node(&self, node_id: &str) -> Result<(), LeaseError>;
}

macro_rules! forward {
    ($ty:ty) => {
        #[async_trait]
        impl<T: Directory + ?Sized> Directory for $ty {
            async fn lookup(&self, room_id: &str) -> Result<Option<Lease>, LeaseError> {
                (**self).lookup(room_id).await
            }
            async fn ensure_owner(
                &self,
                room_id: &str,
                node_id: &str,
                now: SystemTime,
                ttl: Duration,
            ) -> Result<Lease, LeaseError> {
                (**self).ensure_owner(room_id, node_id, now, ttl).await
            }
            async fn verify_owner(
                &self,
                room_id: &str,
                node_id: &str,
                lease_token: &str,
                now: SystemTime,
            ) -> Result<bool, LeaseError> {
                (**self)
                    .verify_owner(room_id, node_id, lease_token, now)
                    .await
            }
            async fn release_owner(
                &self,
                room_id: &str,
                node_id: &str,
                lease_token: &str,
            ) -> Result<bool, LeaseError> {
                (**self).release_owner(room_id, node_id, lease_token).await
            }
        }

        #[async_trait]
        impl<T: NodeRegistry + ?Sized> NodeRegistry for $ty {
            async fn register_node(
                &self,
                node_id: &str,
                grpc_addr: &str,
                ttl: Duration,
            ) -> Result<NodeRegistration, LeaseError> {
                (**self).register_node(node_id, grpc_addr, ttl).await
            }
            async fn lookup_node(
                &self,
                node_id: &str,
            ) -> Result<Option<NodeRegistration>, LeaseError> {
                (**self).lookup_node(node_id).await
            }
            async fn unregister_node(&self, node_id: &str) -> Result<(), LeaseError> {
                (**self).unregister_node(node_id).await
            }
        }
    };
}

forward!(Arc<T>);
forward!(Box<T>);

/// A fresh lease token: a random UUID v4 (122 random bits).
pub(crate) fn new_token() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn _object_safe(_: Box<dyn Directory>, _: Box<dyn NodeRegistry>) {}

    #[test]
    fn tokens_are_random_uuids() {
        let a = new_token();
        let b = new_token();
        assert_ne!(a, b);
        assert_eq!(uuid::Uuid::parse_str(&a).unwrap().get_version_num(), 4);
    }
}
