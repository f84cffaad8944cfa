//! The two capabilities, [`Directory`] and [`NodeRegistry`], and the one front that
//! gives them to every [`LeaseBackend`].

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;

use crate::error::LeaseError;
use crate::time::{to_millis, ttl_millis};
use crate::types::{Lease, NodeRegistration};
use crate::validate;

/// The room directory: `room_id → node_id` under a lease with ordered fencing.
///
/// **The store's clock is the judge.** Whether a lease is still in force is decided
/// by the backend's own clock (Redis `TIME`, the PostgreSQL server's clock, the
/// process's clock for the memory backend; DynamoDB, which has no clock, by
/// watching a record version stay unchanged for a full ttl). The `now` arguments
/// never decide expiry: a node whose clock runs ahead cannot take a room that is
/// still held, and one whose clock jumps cannot pin a room to itself. `now` is
/// range-checked (D9) and places the answer on the caller's wall clock:
/// [`Lease::expires_at`] is `now + ttl_left` (less a millisecond, see
/// [`STORE_CLOCK_RESOLUTION`]). Read it just before the call.
///
/// The holder acts on [`Lease::deadline`]: the instant on its own monotonic clock,
/// taken before the request was sent, plus the time the store said was left, less
/// the store clock's resolution. The store decided at or after that send, so the
/// deadline never falls after the store's expiry (given clocks that tick at the same
/// rate).
///
/// # Contract
///
/// Every clause has a case in the `unique-lease-contract` crate whose doc names it.
/// "Valid" and "expired" are judged on the store's clock at the moment the store
/// executes the operation; "the store's now" below means that moment.
///
/// - **D1 grant.** When the room has no lease, or its lease has expired (the
///   expiry instant itself is expired),
///   [`ensure_owner`](Directory::ensure_owner) MUST store and return a new lease for
///   the caller: a fresh random token never issued before, an epoch per D4, and
///   `ttl_left = ttl`. This holds for the previous holder too: once its lease
///   expired, its old token is dead even if nobody else took the room.
/// - **D2 renewal.** When the caller's own lease is valid, `ensure_owner` MUST keep
///   `lease_token` and `epoch` (commands fenced by the token survive background
///   renewals) and extend the expiry to `max(expiry, store's now + ttl)`: a renewal
///   never shortens a lease, so a renewal with a shorter ttl cannot cut short a
///   lease another task of the node relies on.
/// - **D3 held elsewhere.** When another node's lease is valid, `ensure_owner` MUST
///   return that lease unchanged and write nothing.
/// - **D4 ordered fencing.** Every new lease of a room MUST carry an epoch strictly
///   greater than every epoch issued before for that room. Epochs are never reused
///   and never reset: not by [`release_owner`](Directory::release_owner), not by
///   expiry, not by a backend dropping expired leases.
/// - **D5 verify.** [`verify_owner`](Directory::verify_owner) MUST return `true` iff
///   the stored lease has this `node_id` and `lease_token` and is valid. It never
///   renews, never takes over, never writes.
/// - **D6 release.** `release_owner` MUST delete the stored lease only when its
///   `node_id` and `lease_token` are the caller's (expired or not) and return whether it
///   deleted one. Another node's lease, another holding of the same node (another
///   token), or no lease, is `Ok(false)` with nothing written.
/// - **D7 lookup.** [`lookup`](Directory::lookup) MUST return the stored lease, an
///   expired one included (its `ttl_left` is zero), or `None`; it never writes. A
///   backend MAY forget a lease some time after it expired (Redis drops it after a
///   grace period); D4 still holds afterwards.
/// - **D8 atomicity.** Each operation MUST be atomic and linearizable per room:
///   among concurrent `ensure_owner` calls on a free room exactly one is granted, and
///   every caller receives that same lease. Rooms never interfere with each other.
/// - **D9 input.** Empty, over-long or control-character ids, an empty token, a
///   `now` before the Unix epoch or at/after [`MAX_TIME_MILLIS`](crate::MAX_TIME_MILLIS),
///   or a ttl above [`MAX_TTL`](crate::MAX_TTL) MUST be
///   [`LeaseError::InvalidParams`] before storage is touched. A zero ttl MUST mean
///   [`DEFAULT_TTL`](crate::DEFAULT_TTL) (30 s). Ttls are whole milliseconds,
///   rounded up.
/// - **D10 the store's clock.** Expiry MUST NOT depend on the callers' `now`:
///   directories on one store whose callers' clocks disagree by any amount never
///   see two valid holdings of one room. A store without a clock (DynamoDB) judges
///   a lease another node wrote as valid until the observing directory has seen
///   that same record version unchanged for a full ttl on its own monotonic clock.
///
/// Every backend gets D9 and the time conversions from one place: implement
/// [`LeaseBackend`], and the `Directory` and `NodeRegistry` implementations come
/// with it.
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

    /// Grants, renews, or reports the current holder (D1–D4, D8, D10). The caller
    /// got the room iff the returned lease [`is_held_by`](Lease::is_held_by)
    /// `node_id`. `now` only places the answer on the caller's clock (see the
    /// trait's documentation).
    async fn ensure_owner(
        &self,
        room_id: &str,
        node_id: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> Result<Lease, LeaseError>;

    /// Whether `node_id` still holds `room_id` under `lease_token`, judged on the
    /// store's clock (D5). `now` is only range-checked.
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
/// Registrations are judged on the store's clock, like leases.
///
/// # Contract
///
/// - **N1 register.** [`register_node`](NodeRegistry::register_node) MUST write or
///   replace the node's registration, valid for `ttl` from the store's now (a zero
///   ttl means 30 s), and return it.
/// - **N2 expiry.** [`lookup_node`](NodeRegistry::lookup_node) MUST return the
///   registration only while it is valid on the store's clock; an expired
///   registration reads as `None` (backends also delete it eventually).
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

/// A holding as a backend reports it, judged on the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLease {
    /// The node that holds (or last held) the room.
    pub node_id: String,
    /// The holding's token.
    pub lease_token: String,
    /// The holding's epoch (D4).
    pub epoch: u64,
    /// Whole milliseconds the holding had left when the store executed the
    /// operation; zero once it expired.
    pub ttl_left_ms: u64,
}

/// A node registration as a backend reports it, judged on the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredNode {
    /// The node's address.
    pub grpc_addr: String,
    /// Whole milliseconds since the registration was written.
    pub age_ms: u64,
    /// Whole milliseconds the registration has left (positive: a backend reports
    /// only valid registrations).
    pub ttl_left_ms: u64,
}

/// What a store implements to be a lease directory and node registry.
///
/// Every argument arrives checked (D9, N4): ids are 1..=[`MAX_ID_LEN`](crate::MAX_ID_LEN)
/// characters without control characters, tokens 1..=[`MAX_TOKEN_LEN`](crate::MAX_TOKEN_LEN)
/// characters, addresses without whitespace, ttls whole milliseconds in
/// `1..=MAX_TTL` (a zero ttl already became [`DEFAULT_TTL`](crate::DEFAULT_TTL)). The
/// backend judges time on the store's own clock and reports what is left; the
/// front ([`Directory`] and [`NodeRegistry`], implemented for every `LeaseBackend`)
/// turns that into a [`Lease`] on the caller's clocks.
#[async_trait]
pub trait LeaseBackend: Send + Sync + 'static {
    /// The stored holding of `room_id`, expired or not (D7).
    async fn read_lease(&self, room_id: &str) -> Result<Option<StoredLease>, LeaseError>;

    /// Grants, renews or reports the holder (D1–D4, D8, D10); a grant draws its token
    /// from [`new_lease_token`].
    async fn ensure_lease(
        &self,
        room_id: &str,
        node_id: &str,
        ttl_ms: u64,
    ) -> Result<StoredLease, LeaseError>;

    /// Deletes the holding if it is `node_id`'s under `lease_token` (D6).
    async fn release_lease(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError>;

    /// Writes or replaces the node's registration for `ttl_ms` (N1).
    async fn write_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl_ms: u64,
    ) -> Result<StoredNode, LeaseError>;

    /// The node's registration while it is valid (N2).
    async fn read_node(&self, node_id: &str) -> Result<Option<StoredNode>, LeaseError>;

    /// Removes the node's registration; an unknown node is `Ok` (N3).
    async fn delete_node(&self, node_id: &str) -> Result<(), LeaseError>;

    /// The longest room or node id this backend takes, at most (and by default)
    /// [`MAX_ID_LEN`](crate::MAX_ID_LEN): a backend that stores ids with a prefix of its own
    /// (the HTTP routes store `<project>#<room>`) says less, and the front refuses longer
    /// ids as `InvalidParams` before the backend is called (D9, N4).
    fn max_id_len(&self) -> usize {
        crate::MAX_ID_LEN
    }
}

/// A fresh lease token: a random UUID v4 (122 random bits). Backends issue these.
pub fn new_lease_token() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The lease a caller receives: the store's report placed on the caller's wall
/// clock (`now`) and monotonic clock (`sent`, read before the request went out).
///
/// Both placements keep one millisecond back: a store reads its clock in whole
/// milliseconds, so the time it says is left can exceed what really is by up to one
/// (the lease history checker caught holders overlapping successors by up to 650 µs
/// without it).
fn placed(room_id: &str, stored: StoredLease, now: SystemTime, sent: Instant) -> Lease {
    let ttl_left = Duration::from_millis(stored.ttl_left_ms);
    let surely_left = ttl_left.saturating_sub(STORE_CLOCK_RESOLUTION);
    Lease {
        room_id: room_id.to_owned(),
        node_id: stored.node_id,
        lease_token: stored.lease_token,
        epoch: stored.epoch,
        expires_at: now + surely_left,
        ttl_left,
        deadline: sent + surely_left,
    }
}

/// How far a store's `ttl_left` may overstate the time really left: the resolution of
/// the store's clock readings.
pub const STORE_CLOCK_RESOLUTION: Duration = Duration::from_millis(1);

#[async_trait]
impl<B: LeaseBackend + ?Sized> Directory for B {
    async fn lookup(&self, room_id: &str) -> Result<Option<Lease>, LeaseError> {
        validate::id(room_id, "room_id", self.max_id_len())?;
        let (now, sent) = (SystemTime::now(), Instant::now());
        let stored = self.read_lease(room_id).await?;
        Ok(stored.map(|stored| placed(room_id, stored, now, sent)))
    }

    async fn ensure_owner(
        &self,
        room_id: &str,
        node_id: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        validate::id(room_id, "room_id", self.max_id_len())?;
        validate::id(node_id, "node_id", self.max_id_len())?;
        to_millis(now, "now")?;
        let ttl_ms = ttl_millis(ttl)?;
        let sent = Instant::now();
        let stored = self.ensure_lease(room_id, node_id, ttl_ms).await?;
        Ok(placed(room_id, stored, now, sent))
    }

    async fn verify_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
        now: SystemTime,
    ) -> Result<bool, LeaseError> {
        validate::id(room_id, "room_id", self.max_id_len())?;
        validate::id(node_id, "node_id", self.max_id_len())?;
        validate::token(lease_token)?;
        to_millis(now, "now")?;
        Ok(self.read_lease(room_id).await?.is_some_and(|held| {
            held.node_id == node_id && held.lease_token == lease_token && held.ttl_left_ms > 0
        }))
    }

    async fn release_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        validate::id(room_id, "room_id", self.max_id_len())?;
        validate::id(node_id, "node_id", self.max_id_len())?;
        validate::token(lease_token)?;
        self.release_lease(room_id, node_id, lease_token).await
    }
}

/// The registration a caller receives, placed on its wall clock.
fn registration(node_id: &str, stored: StoredNode, now: SystemTime) -> NodeRegistration {
    NodeRegistration {
        node_id: node_id.to_owned(),
        grpc_addr: stored.grpc_addr,
        updated_at: now
            .checked_sub(Duration::from_millis(stored.age_ms))
            .unwrap_or(now),
        expires_at: now + Duration::from_millis(stored.ttl_left_ms),
    }
}

#[async_trait]
impl<B: LeaseBackend + ?Sized> NodeRegistry for B {
    async fn register_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl: Duration,
    ) -> Result<NodeRegistration, LeaseError> {
        validate::id(node_id, "node_id", self.max_id_len())?;
        validate::addr(grpc_addr)?;
        let ttl_ms = ttl_millis(ttl)?;
        let now = SystemTime::now();
        let stored = self.write_node(node_id, grpc_addr, ttl_ms).await?;
        Ok(registration(node_id, stored, now))
    }

    async fn lookup_node(&self, node_id: &str) -> Result<Option<NodeRegistration>, LeaseError> {
        validate::id(node_id, "node_id", self.max_id_len())?;
        let now = SystemTime::now();
        let stored = self.read_node(node_id).await?;
        Ok(stored.map(|stored| registration(node_id, stored, now)))
    }

    async fn unregister_node(&self, node_id: &str) -> Result<(), LeaseError> {
        validate::id(node_id, "node_id", self.max_id_len())?;
        self.delete_node(node_id).await
    }
}

// `Arc<T>` is a directory when `T` is, whichever way `T` became one. (`Box<T>` forwards
// `LeaseRows` in `rules`; it cannot also forward `LeaseBackend`, which every `LeaseRows`
// type gets from the blanket implementation there.)
macro_rules! forward_directory {
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

forward_directory!(Arc<T>);

#[cfg(test)]
mod tests {
    use super::*;

    fn _object_safe(_: Box<dyn Directory>, _: Box<dyn NodeRegistry>) {}

    #[test]
    fn tokens_are_random_uuids() {
        let a = new_lease_token();
        let b = new_lease_token();
        assert_ne!(a, b);
        assert_eq!(uuid::Uuid::parse_str(&a).unwrap().get_version_num(), 4);
    }
}
