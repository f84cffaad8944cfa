//! What an audit record says happened: [`AuditEvent`], and [`RefusalReason`] for a refused
//! caller.

use std::net::IpAddr;
use std::time::SystemTime;

use unique_core::{ClaimOutcome, KickDetail, LogoutOutcome, PooledOutcome, ReleaseReason};

/// What happened. Gens follow the wire's naming: `gen` is the session's, `prev_gen` the one it
/// replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditEvent {
    /// A claim that found no online session: no record, or a tombstone.
    FirstLogin {
        /// The gen written.
        generation: i64,
        /// The tombstone's gen when the key had been logged out; `None` without a record.
        prev_generation: Option<i64>,
    },
    /// A claim that replaced an online session (or a corrupt record).
    Takeover {
        /// The gen written.
        generation: i64,
        /// The replaced session's gen.
        prev_generation: i64,
        /// The old session's node confirmed the kick (or no kicker is configured).
        kicked: bool,
        /// Why the old session is only presumed offline; `None` when kicked.
        kick_detail: Option<KickDetail>,
    },
    /// A pooled claim that took the place of the user's oldest login (`evict-oldest` at the
    /// pool's limit): a takeover of that place, recorded under the place's slot.
    Eviction {
        /// The gen written on the place.
        generation: i64,
        /// The evicted session's gen.
        prev_generation: i64,
        /// The evicted session's node confirmed the kick (or no kicker is configured).
        kicked: bool,
        /// Why the evicted session is only presumed offline; `None` when kicked.
        kick_detail: Option<KickDetail>,
        /// The pool's limit `k`.
        limit: usize,
    },
    /// A pooled claim refused because the user's pool was full (`deny-new`), answered 409
    /// `limit_reached`: nothing kicked or written. Recorded under the user's key (slot `""`).
    LimitReached {
        /// The pool's limit `k`.
        limit: usize,
    },
    /// A retried claim whose claim_id still holds the key (I4): nothing kicked or written.
    Replay {
        /// The gen the claim_id holds.
        generation: i64,
    },
    /// A retried claim whose claim_id no longer holds the key (C9), answered 409.
    Superseded {
        /// The gen the claim_id won.
        generation: i64,
        /// The key's gen now.
        current_generation: i64,
    },
    /// A release (`POST /v1/release`).
    Release {
        /// The gen asked to release.
        generation: i64,
        /// Whether that gen held the key and is now a tombstone (false: a newer gen holds it).
        released: bool,
        /// Why the node released it, when it said so with a reason this server knows
        /// (`node-draining`); `None` for a plain logout.
        reason: Option<ReleaseReason>,
    },
    /// An administrator's logout of the key (`POST /v1/logout`), as
    /// [`LogoutOutcome`] reports it.
    AdminLogout {
        /// The gen of the record the logout read: the logged-out session's when `released`;
        /// `None` without a record.
        generation: Option<i64>,
        /// A session was online and is now a tombstone (false: nothing was written).
        released: bool,
        /// The session's node confirmed the kick (or no kicker is configured).
        kicked: bool,
        /// Why a released session is only presumed offline; `None` when kicked or nothing
        /// was released.
        kick_detail: Option<KickDetail>,
    },
    /// Callers refused with 401 or 403, tallied: nothing was read or written. One record
    /// stands for every refusal with the same source, reason, path and token in one interval
    /// ([`REFUSAL_INTERVAL`](crate::REFUSAL_INTERVAL)), so a flood of refusals costs a
    /// bounded number of lines.
    Refused {
        /// Why.
        reason: RefusalReason,
        /// The path asked for (`/v1/claim`, …).
        path: &'static str,
        /// The address the requests came from; `None` when the server does not know it, or
        /// for the sources past [`MAX_REFUSAL_GROUPS`](crate::MAX_REFUSAL_GROUPS) in the
        /// interval.
        source: Option<IpAddr>,
        /// How many requests were refused.
        count: u64,
        /// When the first of them was refused.
        first: SystemTime,
        /// When the last of them was refused.
        last: SystemTime,
    },
}

/// Why a caller was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalReason {
    /// No `Authorization` header (401).
    Missing,
    /// An `Authorization` header that is not a bearer token (401).
    Malformed,
    /// A bearer token that is not configured (401).
    Unknown,
    /// The token's scope does not cover the key (403).
    Forbidden,
    /// The token lacks the role the route needs (403).
    MissingRole,
}

impl RefusalReason {
    /// The stable name in a record's `reason`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::Unknown => "unknown",
            Self::Forbidden => "forbidden",
            Self::MissingRole => "missing-role",
        }
    }

    /// The status the caller was answered with.
    pub const fn status(self) -> u16 {
        match self {
            Self::Missing | Self::Malformed | Self::Unknown => 401,
            Self::Forbidden | Self::MissingRole => 403,
        }
    }
}

impl From<crate::Unauthenticated> for RefusalReason {
    fn from(why: crate::Unauthenticated) -> Self {
        match why {
            crate::Unauthenticated::Missing => Self::Missing,
            crate::Unauthenticated::Malformed => Self::Malformed,
            crate::Unauthenticated::Unknown => Self::Unknown,
        }
    }
}

impl AuditEvent {
    /// The event a successful claim's outcome records: a replay, a takeover (the snapshot
    /// held a session) or a first login.
    pub fn of_claim(outcome: &ClaimOutcome) -> Self {
        if outcome.replayed {
            Self::Replay {
                generation: outcome.generation,
            }
        } else if outcome.has_prev {
            Self::Takeover {
                generation: outcome.generation,
                prev_generation: outcome.prev_generation,
                kicked: outcome.kicked,
                kick_detail: outcome.kick_detail,
            }
        } else {
            Self::FirstLogin {
                generation: outcome.generation,
                // A tombstone has a gen; no record reads as gen 0 (see Records).
                prev_generation: (outcome.prev_generation > 0).then_some(outcome.prev_generation),
            }
        }
    }

    /// The event a pooled claim's outcome records: an eviction when it took the oldest
    /// login's place, else as [`of_claim`](Self::of_claim) (a first login or a replay on its
    /// place). `limit` is the pool's `k`.
    pub fn of_pooled_claim(outcome: &PooledOutcome, limit: usize) -> Self {
        if outcome.evicted && !outcome.claim.replayed {
            let claim = &outcome.claim;
            Self::Eviction {
                generation: claim.generation,
                prev_generation: claim.prev_generation,
                kicked: claim.kicked,
                kick_detail: claim.kick_detail,
                limit,
            }
        } else {
            Self::of_claim(&outcome.claim)
        }
    }

    /// The event an admin logout's outcome records.
    pub fn of_logout(outcome: &LogoutOutcome) -> Self {
        Self::AdminLogout {
            // No record reads as gen 0, outside the gen domain.
            generation: (outcome.generation > 0).then_some(outcome.generation),
            released: outcome.released,
            kicked: outcome.kicked,
            kick_detail: outcome.kick_detail,
        }
    }

    /// The stable name in a record's `event`.
    pub const fn name(&self) -> &'static str {
        match self {
            Self::FirstLogin { .. } => "first-login",
            Self::Takeover { .. } => "takeover",
            Self::Eviction { .. } => "eviction",
            Self::LimitReached { .. } => "limit-reached",
            Self::Replay { .. } => "replay",
            Self::Superseded { .. } => "superseded",
            Self::Release { .. } => "release",
            Self::AdminLogout { .. } => "admin-logout",
            Self::Refused { .. } => "refused",
        }
    }

    /// `(gen, prev_gen)` of the record.
    pub(super) fn generations(&self) -> (Option<i64>, Option<i64>) {
        match *self {
            Self::FirstLogin {
                generation,
                prev_generation,
            } => (Some(generation), prev_generation),
            Self::Takeover {
                generation,
                prev_generation,
                ..
            }
            | Self::Eviction {
                generation,
                prev_generation,
                ..
            } => (Some(generation), Some(prev_generation)),
            Self::Replay { generation }
            | Self::Superseded { generation, .. }
            | Self::Release { generation, .. } => (Some(generation), None),
            Self::AdminLogout { generation, .. } => (generation, None),
            Self::Refused { .. } | Self::LimitReached { .. } => (None, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(replayed: bool, has_prev: bool, prev_generation: i64) -> ClaimOutcome {
        ClaimOutcome {
            generation: 9,
            prev_generation,
            has_prev,
            prev_owner: None,
            kicked: false,
            kick_detail: has_prev.then_some(KickDetail::Non2xx),
            replayed,
        }
    }

    #[test]
    fn a_claim_outcome_names_its_event() {
        assert_eq!(
            AuditEvent::of_claim(&outcome(false, false, 0)),
            AuditEvent::FirstLogin {
                generation: 9,
                prev_generation: None
            }
        );
        assert_eq!(
            AuditEvent::of_claim(&outcome(false, false, 8)),
            AuditEvent::FirstLogin {
                generation: 9,
                prev_generation: Some(8)
            }
        );
        assert_eq!(
            AuditEvent::of_claim(&outcome(false, true, 8)),
            AuditEvent::Takeover {
                generation: 9,
                prev_generation: 8,
                kicked: false,
                kick_detail: Some(KickDetail::Non2xx)
            }
        );
        assert_eq!(
            AuditEvent::of_claim(&outcome(true, false, 0)),
            AuditEvent::Replay { generation: 9 }
        );
    }

    #[test]
    fn a_pooled_claim_is_an_eviction_only_when_it_evicted() {
        let pooled = |evicted, replayed| PooledOutcome {
            slot: "#1".into(),
            evicted,
            claim: outcome(replayed, evicted, 8),
        };
        assert_eq!(
            AuditEvent::of_pooled_claim(&pooled(true, false), 3),
            AuditEvent::Eviction {
                generation: 9,
                prev_generation: 8,
                kicked: false,
                kick_detail: Some(KickDetail::Non2xx),
                limit: 3,
            }
        );
        assert_eq!(
            AuditEvent::of_pooled_claim(&pooled(false, false), 3),
            AuditEvent::FirstLogin {
                generation: 9,
                prev_generation: Some(8)
            }
        );
        assert_eq!(
            AuditEvent::of_pooled_claim(&pooled(false, true), 3),
            AuditEvent::Replay { generation: 9 }
        );
    }

    #[test]
    fn a_logout_outcome_names_its_event() {
        let outcome = |released, generation, kicked, kick_detail| LogoutOutcome {
            released,
            generation,
            kicked,
            kick_detail,
        };
        assert_eq!(
            AuditEvent::of_logout(&outcome(true, 4, false, Some(KickDetail::ConnectError))),
            AuditEvent::AdminLogout {
                generation: Some(4),
                released: true,
                kicked: false,
                kick_detail: Some(KickDetail::ConnectError)
            }
        );
        assert_eq!(
            AuditEvent::of_logout(&outcome(false, 0, false, None)),
            AuditEvent::AdminLogout {
                generation: None,
                released: false,
                kicked: false,
                kick_detail: None
            }
        );
    }
}
