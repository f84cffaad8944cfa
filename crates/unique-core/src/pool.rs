//! Pooled sessions (`docs/design.md#pooled-sessions`): a user may hold up to `k` sessions on
//! places `#0`, `#1`, … `#<k-1>`, slots no claim can name, and a pooled claim takes a free
//! place or, at the limit, evicts the oldest login or is refused.

use std::fmt;

use crate::error::Error;
use crate::types::ClaimOutcome;

/// The session limit of a project whose limit the [`ArbiterBuilder`](crate::ArbiterBuilder)
/// was not told: the most pooled sessions one user may hold.
pub const DEFAULT_SESSION_LIMIT: usize = 5;

/// One more than the highest place index: places run from `#0` to `#999`, so a session limit
/// is at most this.
pub const MAX_POOL_PLACES: usize = 1000;

/// What a pooled claim does when all `k` places of the user are online.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PoolPolicy {
    /// `evict-oldest` (the default): kick the session with the oldest login and take its
    /// place, exactly a takeover of that place.
    #[default]
    EvictOldest,
    /// `deny-new`: refuse the claim with [`Error::LimitReached`], nothing kicked or written.
    DenyNew,
}

impl PoolPolicy {
    /// Both policies.
    pub const ALL: [Self; 2] = [Self::EvictOldest, Self::DenyNew];

    /// The stable wire name: `evict-oldest`, `deny-new`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::EvictOldest => "evict-oldest",
            Self::DenyNew => "deny-new",
        }
    }

    /// The policy a wire name stands for; `None` for any other text.
    pub fn from_wire(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for PoolPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pool a claim asks for ([`Arbiter::claim_pooled`](crate::Arbiter::claim_pooled)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PoolRequest {
    /// What to do at the limit.
    pub policy: PoolPolicy,
    /// The most sessions the user may hold, `k`: from 1 to the project's session limit `N`;
    /// `None` is `N`.
    pub limit: Option<usize>,
}

/// The result of a successful pooled claim (`unique_wire::PooledClaimAnswer` on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PooledOutcome {
    /// The place taken (`#0`, `#1`, …): the slot of the session's key for every later call
    /// (heartbeat, release, logout).
    pub slot: String,
    /// The claim took the place of the oldest online session (`evict-oldest` at the limit);
    /// `claim` then describes the evicted session as a takeover does (`has_prev`,
    /// `prev_gen`, `prev_owner`, `kicked`, `kick_detail`).
    pub evicted: bool,
    /// The claim on the place's key, as [`Arbiter::claim`](crate::Arbiter::claim) answers.
    pub claim: ClaimOutcome,
}

/// One online session of a full pool, as [`Error::LimitReached`] lists it: the place, its gen
/// and its login time, never its owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PooledSession {
    /// The place (`#0`, `#1`, …).
    pub slot: String,
    /// The session's gen.
    pub generation: i64,
    /// Its login time in milliseconds since the Unix epoch; `None` when the record does not
    /// say (a corrupt owner).
    pub since: Option<u64>,
}

/// The slot of place `index`: `#` and the index in decimal.
pub fn place_slot(index: usize) -> String {
    format!("#{index}")
}

/// The index of a place's slot: `Some(i)` for `#` followed by `i` in decimal without a
/// leading zero, below [`MAX_POOL_PLACES`]; `None` for any other slot.
pub fn place_index(slot: &str) -> Option<usize> {
    let digits = slot.strip_prefix('#')?;
    let well_formed = !digits.is_empty()
        && digits.len() <= 3
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !well_formed {
        return None;
    }
    digits.parse().ok()
}

/// The session limit a request asks for, checked against the project's limit `n`.
///
/// # Errors
///
/// `InvalidParams` naming `n` for a limit below 1 or above `n`.
pub(crate) fn pool_limit(request: &PoolRequest, n: usize) -> Result<usize, Error> {
    match request.limit {
        None => Ok(n),
        Some(k) if (1..=n).contains(&k) => Ok(k),
        Some(k) => Err(Error::invalid(format!(
            "pool.limit must be from 1 to {n}, the project's session limit; got {k}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_hash_and_a_plain_index() {
        for (slot, index) in [("#0", 0), ("#1", 1), ("#10", 10), ("#999", 999)] {
            assert_eq!(place_index(slot), Some(index), "{slot}");
            assert_eq!(place_slot(index), slot);
        }
        for slot in [
            "", "#", "0", "#00", "#01", "#1000", "#-1", "#+1", "#1a", "##1", "# 1", "#١",
        ] {
            assert_eq!(place_index(slot), None, "{slot}");
        }
    }

    #[test]
    fn policies_round_trip_by_name() {
        for policy in PoolPolicy::ALL {
            assert_eq!(PoolPolicy::from_wire(policy.as_str()), Some(policy));
        }
        assert_eq!(PoolPolicy::from_wire("evict_oldest"), None);
        assert_eq!(PoolPolicy::default(), PoolPolicy::EvictOldest);
    }

    #[test]
    fn a_limit_is_from_1_to_the_projects() {
        let ask = |limit| PoolRequest {
            policy: PoolPolicy::DenyNew,
            limit,
        };
        assert_eq!(pool_limit(&ask(None), 5).unwrap(), 5);
        assert_eq!(pool_limit(&ask(Some(1)), 5).unwrap(), 1);
        assert_eq!(pool_limit(&ask(Some(5)), 5).unwrap(), 5);
        for bad in [0, 6] {
            let e = pool_limit(&ask(Some(bad)), 5).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "invalid params: pool.limit must be from 1 to 5, the project's session limit; got {bad}"
                )
            );
        }
    }
}
