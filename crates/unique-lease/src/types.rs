//! The lease and the node registration.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The right to execute one room, held by one node until the store's clock says
/// it expired.
///
/// Two fencing values travel with it:
///
/// - `lease_token` identifies this *holding*: it survives renewals by the holder and
///   changes on every new grant, so a command fenced by a token is rejected once
///   another holding began ([`Directory::verify_owner`](crate::Directory::verify_owner)).
/// - `epoch` orders holdings: it is strictly greater for every new holding of the
///   room than for any earlier one (never reused, never reset by release or expiry),
///   so a downstream service can reject a stale holder by comparing numbers
///   (`epoch < highest epoch seen`) without asking the directory.
///
/// Three fields say how long it lasts, each on another clock: `ttl_left` is the
/// store's judgement when it answered, `deadline` places it on the caller's
/// monotonic clock (what a holder should act on), `expires_at` on the caller's wall
/// clock. Two answers about one holding differ in them; compare holdings with
/// [`same_holding`](Self::same_holding).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The room this lease is for.
    pub room_id: String,
    /// The node that holds the room.
    pub node_id: String,
    /// Random identifier of this holding (a UUID v4), kept across renewals.
    pub lease_token: String,
    /// Ordered fencing number of this holding, `>= 1`, kept across renewals.
    pub epoch: u64,
    /// The expiry on the caller's wall clock: the `now` the caller passed (or the
    /// system time before a lookup) plus `ttl_left`, less
    /// [`STORE_CLOCK_RESOLUTION`](crate::STORE_CLOCK_RESOLUTION). An estimate for display and
    /// for [`valid_at`](Self::valid_at); the store's clock decides.
    pub expires_at: SystemTime,
    /// Whole milliseconds the store said the holding had left when it answered;
    /// zero once expired.
    pub ttl_left: Duration,
    /// The safe local deadline: the caller's monotonic clock before the request was
    /// sent, plus `ttl_left`, less [`STORE_CLOCK_RESOLUTION`](crate::STORE_CLOCK_RESOLUTION). The store answered after that send, so a holder that
    /// stops acting on the room by this instant never overlaps a successor (clocks
    /// ticking at the same rate).
    pub deadline: Instant,
}

impl Lease {
    /// Whether the lease is still in force at `now`: `now < expires_at`. A zero
    /// expiry (`UNIX_EPOCH`) is never valid.
    pub fn valid_at(&self, now: SystemTime) -> bool {
        self.expires_at > UNIX_EPOCH && now < self.expires_at
    }

    /// Whether the holder may still act on it now, judged by [`deadline`](Self::deadline)
    /// on the monotonic clock.
    pub fn is_live(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// The time left before [`deadline`](Self::deadline), zero once it passed.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether `other` is the same holding: same room, node, token and epoch
    /// (whatever either answer said about the time left).
    pub fn same_holding(&self, other: &Self) -> bool {
        self.room_id == other.room_id
            && self.node_id == other.node_id
            && self.lease_token == other.lease_token
            && self.epoch == other.epoch
    }

    /// Whether `node_id` holds this lease (regardless of expiry). After
    /// [`ensure_owner`](crate::Directory::ensure_owner), this tells the caller
    /// whether it got the room or was told who has it.
    pub fn is_held_by(&self, node_id: &str) -> bool {
        self.node_id == node_id
    }

    /// What [`verify_owner`](crate::Directory::verify_owner) checks: `node_id`
    /// holds this lease under exactly `lease_token`, and it is valid at `now`.
    pub fn fences(&self, node_id: &str, lease_token: &str, now: SystemTime) -> bool {
        self.node_id == node_id && self.lease_token == lease_token && self.valid_at(now)
    }
}

/// Where a node can be reached directly: its private gRPC address, with a TTL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeRegistration {
    /// The node, exactly as it appears in [`Lease::node_id`].
    pub node_id: String,
    /// The node's private address; must point at that single instance, never at
    /// a load balancer.
    pub grpc_addr: String,
    /// When the registration was last written (whole milliseconds).
    pub updated_at: SystemTime,
    /// The registration may be used strictly before this instant.
    pub expires_at: SystemTime,
}

impl NodeRegistration {
    /// Whether the registration may be used as a forwarding target at `now`: it
    /// needs a node id, an address and a non-zero expiry after `now`.
    pub fn valid_at(&self, now: SystemTime) -> bool {
        !self.node_id.is_empty()
            && !self.grpc_addr.is_empty()
            && self.expires_at > UNIX_EPOCH
            && now < self.expires_at
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn lease(expires_at: SystemTime) -> Lease {
        Lease {
            room_id: "r".into(),
            node_id: "n".into(),
            lease_token: "t".into(),
            epoch: 1,
            expires_at,
            ttl_left: Duration::ZERO,
            deadline: Instant::now(),
        }
    }

    #[test]
    fn lease_is_valid_strictly_before_expiry() {
        let l = lease(at(1_000));
        assert!(l.valid_at(at(0)));
        assert!(l.valid_at(at(999)));
        assert!(l.valid_at(at(1_000) - Duration::from_nanos(1)));
        assert!(!l.valid_at(at(1_000)), "expiry instant is already expired");
        assert!(!l.valid_at(at(5_000)));
    }

    #[test]
    fn zero_expiry_is_never_valid() {
        let l = lease(UNIX_EPOCH);
        assert!(!l.valid_at(UNIX_EPOCH));
        assert!(!l.valid_at(UNIX_EPOCH - Duration::from_secs(1)));
    }

    #[test]
    fn held_by_compares_node() {
        assert!(lease(at(1)).is_held_by("n"));
        assert!(!lease(at(1)).is_held_by("m"));
    }

    #[test]
    fn registration_needs_node_address_and_future_expiry() {
        let good = NodeRegistration {
            node_id: "n".into(),
            grpc_addr: "10.0.0.1:7000".into(),
            updated_at: at(0),
            expires_at: at(1_000),
        };
        assert!(good.valid_at(at(999)));
        assert!(!good.valid_at(at(1_000)));
        assert!(
            !NodeRegistration {
                node_id: String::new(),
                ..good.clone()
            }
            .valid_at(at(1))
        );
        assert!(
            !NodeRegistration {
                grpc_addr: String::new(),
                ..good.clone()
            }
            .valid_at(at(1))
        );
        let zero = NodeRegistration {
            expires_at: UNIX_EPOCH,
            ..good
        };
        assert!(!zero.valid_at(UNIX_EPOCH - Duration::from_secs(1)));
    }
}
