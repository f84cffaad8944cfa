//! A reference model of one key's record: what a correct store must answer.
//!
//! It decides claims on its own, without `unique_core::Fence`, on purpose: an
//! oracle that shared the code it checks could not catch a bug in that code.
//!
//! The random-sequence case (`invariants::random_operations_match_model`) checks
//! a backend against it operation by operation; it is public so a backend's own
//! tests can use it too.

use unique_core::{CurrentView, Owner, OwnerState, RECENT_CLAIMS, RecentClaims};

/// What a claim must do to the record, per C3 and C4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimVerdict {
    /// The condition held: the record now has this gen.
    Won(i64),
    /// The condition failed: a lost race, nothing written.
    ConditionFailed,
    /// `snap.gen + 1` would reach `i64::MAX`: `Unavailable`, nothing written.
    GenExhausted,
}

/// One key's record as a correct store holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordModel {
    state: OwnerState,
}

impl RecordModel {
    /// A key with no record.
    pub fn new() -> Self {
        Self::default()
    }

    /// A model starting from the record `read_owner` reports as `state`.
    pub fn from_state(state: OwnerState) -> Self {
        Self { state }
    }

    /// What `read_owner` must return.
    pub fn state(&self) -> &OwnerState {
        &self.state
    }

    /// What `current` must return; `None` when it must be `Unavailable` (corrupt owner).
    pub fn current(&self) -> Option<CurrentView> {
        if self.state.owner_corrupt {
            return None;
        }
        Some(CurrentView {
            generation: self.state.generation,
            owner: self.state.owner.clone(),
            exists: self.state.exists,
        })
    }

    /// Applies `claim_cas(owner, claim_id, snap)` (C3, C4, C9).
    pub fn claim(&mut self, owner: &Owner, claim_id: &str, snap: &OwnerState) -> ClaimVerdict {
        let next = if snap.exists {
            match snap.generation.checked_add(1).filter(|g| *g < i64::MAX) {
                Some(next) => next,
                None => return ClaimVerdict::GenExhausted,
            }
        } else {
            1
        };
        let stored = &self.state;
        let holds = match (snap.exists, &snap.claim_id) {
            (false, _) => !stored.exists,
            (true, Some(pin)) => {
                stored.exists
                    && stored.generation == snap.generation
                    && stored.claim_id.as_ref() == Some(pin)
            }
            (true, None) => {
                stored.exists && stored.generation == snap.generation && stored.claim_id.is_none()
            }
        };
        if !holds {
            return ClaimVerdict::ConditionFailed;
        }
        // C9: the stored wins, then this one, the oldest dropped beyond the limit.
        let mut wins: Vec<(String, i64)> = if stored.exists {
            stored
                .recent_claims
                .iter()
                .map(|(c, g)| (c.to_owned(), g))
                .collect()
        } else {
            Vec::new()
        };
        wins.push((claim_id.to_owned(), next));
        if wins.len() > RECENT_CLAIMS {
            wins.remove(0);
        }
        self.state = OwnerState {
            exists: true,
            generation: next,
            owner: Some(owner.clone()),
            owner_corrupt: false,
            claim_id: Some(claim_id.to_owned()),
            recent_claims: RecentClaims::from_wins(wins),
        };
        ClaimVerdict::Won(next)
    }

    /// Whether a write-first claim by `claim_id` may take this record (C11): no record, or
    /// a tombstone (gen ≥ 1, no owner, no cid) whose next gen stays below `i64::MAX` and
    /// whose recent claims do not hold `claim_id`. Decided here on its own, as
    /// [`claim`](Self::claim) is.
    pub fn is_vacant_for(&self, claim_id: &str) -> bool {
        let s = &self.state;
        if !s.exists {
            return true;
        }
        let superseded = s.recent_claims.iter().any(|(c, _)| c == claim_id);
        s.generation >= 1
            && s.generation.checked_add(2).is_some()
            && s.owner.is_none()
            && !s.owner_corrupt
            && s.claim_id.is_none()
            && !superseded
    }

    /// Applies `claim_vacant(owner, claim_id)` for a store that writes over absent records
    /// and tombstones (C11): the gen written, or `None` (nothing written).
    pub fn claim_vacant(&mut self, owner: &Owner, claim_id: &str) -> Option<i64> {
        if !self.is_vacant_for(claim_id) {
            return None;
        }
        let snap = self.state.clone();
        match self.claim(owner, claim_id, &snap) {
            ClaimVerdict::Won(generation) => Some(generation),
            ClaimVerdict::ConditionFailed | ClaimVerdict::GenExhausted => None,
        }
    }

    /// Applies `release(generation)` (C5) and returns what it must return. The
    /// recent claims stay (C9): a released claim_id is superseded.
    pub fn release(&mut self, generation: i64) -> bool {
        if generation <= 0 || !self.state.exists || self.state.generation != generation {
            return false;
        }
        self.state.owner = None;
        self.state.owner_corrupt = false;
        self.state.claim_id = None;
        true
    }
}
