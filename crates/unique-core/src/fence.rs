//! The fenced claim, decided once: which condition a claim's write requires,
//! which gen it writes, and how a fenced write reports a lost race.
//!
//! Every store maps a [`Fence`] to its own conditional write and nothing else,
//! so the rule of the claim fence has one home.

use crate::error::Error;
use crate::types::OwnerState;

/// The condition a claim's write requires of the stored record (C3), with the
/// gen the write stores (C4). Built from the snapshot the claim was decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence<'a> {
    /// First login: the record must still not exist, or be stored at gen 0
    /// (which reads as absent). Writes gen 1.
    FirstLogin,
    /// Replaces an online session or a corrupt record: the stored `gen` and `cid`
    /// both equal the snapshot's. An empty cid is a cid (C6).
    DoublePin {
        /// The snapshot's gen.
        generation: i64,
        /// The snapshot's cid.
        claim_id: &'a str,
    },
    /// Replaces a tombstone: the stored `gen` equals the snapshot's and `cid` is absent.
    Tombstone {
        /// The snapshot's gen.
        generation: i64,
    },
}

/// The two attributes a [`Fence`] compares, as a store holds them now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pins<'a> {
    /// The stored `gen`.
    pub generation: i64,
    /// The stored `cid`; `None` = attribute absent.
    pub claim_id: Option<&'a str>,
}

impl<'a> Fence<'a> {
    /// The fence of a claim from `snap`.
    ///
    /// The form follows `snap.exists` and `snap.claim_id`, never `snap.owner`: a
    /// corrupt record has no owner but a cid, and must stay replaceable through
    /// the double pin (C3).
    ///
    /// # Errors
    ///
    /// `Unavailable` when the next gen would reach `i64::MAX` (C4): the key's
    /// gen is exhausted, and nothing may be written (or kicked) for it.
    pub fn for_snapshot(snap: &'a OwnerState) -> Result<Self, Error> {
        if !snap.exists {
            return Ok(Self::FirstLogin);
        }
        if snap.generation >= i64::MAX - 1 {
            return Err(Error::unavailable("gen exhausted for this key"));
        }
        Ok(match snap.claim_id.as_deref() {
            Some(claim_id) => Self::DoublePin {
                generation: snap.generation,
                claim_id,
            },
            None => Self::Tombstone {
                generation: snap.generation,
            },
        })
    }

    /// The gen a successful claim writes: 1 on first login, else the pinned gen + 1.
    pub fn next_generation(self) -> i64 {
        match self {
            Self::FirstLogin => 1,
            // `for_snapshot` refused any gen whose successor would reach i64::MAX.
            Self::DoublePin { generation, .. } | Self::Tombstone { generation } => generation + 1,
        }
    }

    /// Whether a record whose attributes are `stored` (`None`: no record)
    /// satisfies the condition. For stores that check the fence in process.
    ///
    /// A record stored at gen 0 is no record to the first login, as it reads
    /// as absent ([`OwnerState::from_record`]).
    pub fn holds(self, stored: Option<Pins<'_>>) -> bool {
        match (self, stored) {
            (Self::FirstLogin, None) => true,
            (Self::FirstLogin, Some(stored)) => stored.generation == 0,
            (
                Self::DoublePin {
                    generation,
                    claim_id,
                },
                Some(stored),
            ) => stored.generation == generation && stored.claim_id == Some(claim_id),
            (Self::Tombstone { generation }, Some(stored)) => {
                stored.generation == generation && stored.claim_id.is_none()
            }
            _ => false,
        }
    }
}

/// What a fenced claim write did (see [`Store::claim_cas`](crate::Store::claim_cas)).
///
/// Losing the race is a normal outcome of concurrent logins, not an error: the
/// Arbiter answers it with another attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum CasOutcome {
    /// The condition held: the record now holds the claim at this gen.
    Written {
        /// The gen the store wrote (never a re-read).
        generation: i64,
    },
    /// The condition failed: another write came first. Nothing was written.
    LostRace {
        /// The record as it stood when the condition failed, when the store has
        /// it at no extra cost (a failed SQL statement's transaction, DynamoDB's
        /// `ALL_OLD`). The Arbiter's next attempt starts from it instead of a read.
        current: Option<OwnerState>,
    },
}

impl CasOutcome {
    /// A lost race without the record: the next attempt reads.
    pub fn lost() -> Self {
        Self::LostRace { current: None }
    }
}

/// Which vacant records a store's [`claim_vacant`](crate::Store::claim_vacant) writes in
/// its one conditional write (C11). The Arbiter tries the write-first claim only when it is
/// not [`Unsupported`](Self::Unsupported); the contract suite asks it to know what to expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VacantClaims {
    /// Not implemented: `claim_vacant` answers [`VacantClaim::Unread`] without a request.
    #[default]
    Unsupported,
    /// Writes over an absent record (or one at gen 0) only; a tombstone fails the
    /// condition like an online session does (a store whose conditional write cannot
    /// compute the next `won` list, DynamoDB).
    AbsentOnly,
    /// Writes over an absent record and over a tombstone whose claim_id is not superseded.
    AbsentAndTombstones,
}

/// What a write-first claim did (see [`Store::claim_vacant`](crate::Store::claim_vacant)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum VacantClaim {
    /// The record was vacant and now holds the claim at this gen: 1 over an absent
    /// record, else the tombstone's gen + 1. So the previous gen is `generation - 1`,
    /// and no session was replaced.
    Written {
        /// The gen the store wrote (never a re-read).
        generation: i64,
    },
    /// Not vacant (or not a vacancy this store writes): nothing was written, and this is
    /// the record as it stood at one point during the call, read in the same round trip.
    /// The Arbiter goes on from it as from a strong read.
    Occupied(OwnerState),
    /// Nothing was written, and the store has no record to hand (not supported, or the
    /// server does not return the record with a failed condition): the Arbiter reads.
    Unread,
}

impl VacantClaim {
    /// Whether a claim by `claim_id` from `snap` is one [`Store::claim_vacant`] may write
    /// (C11): the record reads absent, or it is a tombstone (no owner, not corrupt, no
    /// cid, gen ≥ 1) whose next gen stays below `i64::MAX` and whose recent claims do
    /// not hold `claim_id` (which would be superseded, C9). A vacant write is then
    /// exactly the claim `claim_cas` makes from `snap`.
    ///
    /// [`Store::claim_vacant`]: crate::Store::claim_vacant
    pub fn is_vacant(snap: &OwnerState, claim_id: &str) -> bool {
        if !snap.exists {
            return true;
        }
        snap.generation >= 1
            && snap.generation < i64::MAX - 1
            && snap.owner.is_none()
            && !snap.owner_corrupt
            && snap.claim_id.is_none()
            && snap.recent_claims.won(claim_id).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Owner;

    fn snap(exists: bool, generation: i64, claim_id: Option<&str>) -> OwnerState {
        OwnerState {
            exists,
            generation,
            claim_id: claim_id.map(str::to_owned),
            ..OwnerState::default()
        }
    }

    fn pins(generation: i64, claim_id: Option<&str>) -> Pins<'_> {
        Pins {
            generation,
            claim_id,
        }
    }

    #[test]
    fn form_follows_claim_id_not_owner() {
        let corrupt = OwnerState {
            owner_corrupt: true,
            ..snap(true, 4, Some("c"))
        };
        assert_eq!(
            Fence::for_snapshot(&corrupt).unwrap(),
            Fence::DoublePin {
                generation: 4,
                claim_id: "c"
            }
        );
        let empty_cid = snap(true, 4, Some(""));
        assert_eq!(
            Fence::for_snapshot(&empty_cid).unwrap(),
            Fence::DoublePin {
                generation: 4,
                claim_id: ""
            }
        );
        let legacy = OwnerState {
            owner: Some(Owner::new("", "", "http://h")),
            ..snap(true, 4, None)
        };
        assert_eq!(
            Fence::for_snapshot(&legacy).unwrap(),
            Fence::Tombstone { generation: 4 }
        );
        assert_eq!(
            Fence::for_snapshot(&snap(false, 9, Some("x"))).unwrap(),
            Fence::FirstLogin
        );
    }

    #[test]
    fn conditions() {
        let pin = Fence::DoublePin {
            generation: 2,
            claim_id: "",
        };
        assert!(pin.holds(Some(pins(2, Some("")))));
        assert!(!pin.holds(Some(pins(2, None))));
        assert!(!pin.holds(Some(pins(2, Some("x")))));
        assert!(!pin.holds(Some(pins(3, Some("")))));
        assert!(!pin.holds(None));
        let tomb = Fence::Tombstone { generation: 2 };
        assert!(tomb.holds(Some(pins(2, None))));
        assert!(!tomb.holds(Some(pins(2, Some("")))));
        assert!(!tomb.holds(Some(pins(1, None))));
        assert!(!tomb.holds(None));
        assert!(Fence::FirstLogin.holds(None));
        // A gen-0 record reads as absent, so the first login takes it.
        assert!(Fence::FirstLogin.holds(Some(pins(0, None))));
        assert!(Fence::FirstLogin.holds(Some(pins(0, Some("c")))));
        assert!(!Fence::FirstLogin.holds(Some(pins(1, None))));
        assert!(!Fence::FirstLogin.holds(Some(pins(-1, None))));
    }

    #[test]
    fn vacancy_is_absence_or_a_tombstone_that_would_not_be_superseded() {
        use crate::RecentClaims;
        assert!(VacantClaim::is_vacant(&OwnerState::absent(), "c"));
        let tomb = OwnerState {
            recent_claims: RecentClaims::from_wins([("old", 3)]),
            ..snap(true, 3, None)
        };
        assert!(VacantClaim::is_vacant(&tomb, "c"));
        assert!(!VacantClaim::is_vacant(&tomb, "old"), "superseded");
        assert!(!VacantClaim::is_vacant(&snap(true, 3, Some("")), "c"));
        let online = OwnerState {
            owner: Some(Owner::new("", "", "http://h")),
            ..snap(true, 3, None)
        };
        assert!(
            !VacantClaim::is_vacant(&online, "c"),
            "legacy owner without cid"
        );
        let corrupt = OwnerState {
            owner_corrupt: true,
            ..snap(true, 3, None)
        };
        assert!(!VacantClaim::is_vacant(&corrupt, "c"));
        assert!(VacantClaim::is_vacant(&snap(true, i64::MAX - 2, None), "c"));
        assert!(!VacantClaim::is_vacant(
            &snap(true, i64::MAX - 1, None),
            "c"
        ));
        assert!(!VacantClaim::is_vacant(&snap(true, -1, None), "c"));
    }

    #[test]
    fn gen_domain_ends_below_max() {
        assert_eq!(Fence::FirstLogin.next_generation(), 1);
        let at = |generation| {
            Fence::for_snapshot(&snap(true, generation, None)).map(Fence::next_generation)
        };
        assert_eq!(at(1).unwrap(), 2);
        assert_eq!(at(i64::MAX - 2).unwrap(), i64::MAX - 1);
        assert!(at(i64::MAX - 1).unwrap_err().is_unavailable());
        assert!(at(i64::MAX).unwrap_err().is_unavailable());
        let pinned = snap(true, i64::MAX - 1, Some("c"));
        assert!(Fence::for_snapshot(&pinned).unwrap_err().is_unavailable());
    }
}
