//! One key's stored record and how it reads back (C6, C7).
//!
//! A record is kept small, since a store holds one per session: its gen, one
//! pointer for the `owner` and `cid` attributes together, and its `won` list,
//! encoded (see `won.rs`). A claim's owner is shared by every record of the same
//! node (see `owners.rs`), and its cid is the claim_id of the list's last win, so
//! neither is copied into the record.

use std::sync::Arc;

#[cfg(any(test, feature = "test-util"))]
use unique_core::RecentClaims;
use unique_core::{Owner, OwnerState, Pins};

use crate::won::Won;

/// The `owner` attribute of a raw record, kept decoded so reads do not parse JSON.
/// Only raw writes (the `test-util` hook, tests and loom models) build one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(any(test, feature = "test-util")), allow(dead_code))]
pub(crate) enum OwnerAttr {
    /// Empty string or absent attribute: a tombstone or a pre-first-login record.
    Empty,
    /// A parseable owner.
    Valid(Owner),
    /// Non-empty but not an `Owner` JSON object (C7). Only a raw write (the
    /// `test-util` hook) can store one: this store writes valid owners only.
    Corrupt,
}

impl OwnerAttr {
    /// Decodes a raw stored string (`None` = attribute absent).
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn from_raw(raw: Option<&str>) -> Self {
        // Any gen above 0 will do: a gen-0 record reads as absent, owner and all.
        let state = OwnerState::from_record(1, raw.into(), None, None);
        match (state.owner, state.owner_corrupt) {
            (Some(owner), _) => Self::Valid(owner),
            (None, true) => Self::Corrupt,
            (None, false) => Self::Empty,
        }
    }
}

/// The `owner` and `cid` attributes of a record that is not a tombstone.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// What a claim writes: a valid owner, and as `cid` the claim_id of the
    /// record's last win (a claim appends its own win to the list it writes).
    /// One `Held` is shared by the records of every session of that owner.
    Session(Owner),
    /// Any other pair, which only a raw write (the `test-util` hook) stores:
    /// the attributes as they are. A raw record with neither is a tombstone.
    #[cfg_attr(not(any(test, feature = "test-util")), allow(dead_code))]
    Raw {
        /// `owner`.
        owner: OwnerAttr,
        /// `cid`; `None` = attribute absent, `Some("")` = empty string (C6).
        claim_id: Option<Box<str>>,
    },
}

/// The attributes of a key's record: `gen`, `owner`, `cid` and `won`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// `gen`.
    pub(crate) generation: i64,
    /// `owner` and `cid`; `None` is a tombstone (owner empty, cid absent).
    pub(crate) held: Option<Arc<Held>>,
    /// `won` (C9).
    pub(crate) won: Won,
}

impl Record {
    /// A record holding exactly these attributes, as a raw write stores them.
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn raw(
        generation: i64,
        owner: OwnerAttr,
        claim_id: Option<&str>,
        recent: &RecentClaims,
    ) -> Self {
        let held = match (owner, claim_id) {
            (OwnerAttr::Empty, None) => None,
            (owner, claim_id) => Some(Arc::new(Held::Raw {
                owner,
                claim_id: claim_id.map(Box::from),
            })),
        };
        Self {
            generation,
            held,
            won: Won::from_recent(recent),
        }
    }

    /// The record a claim writes: `session` (a [`Held::Session`]) won
    /// `generation`, and `won` ends with its win (C4, C9).
    pub(crate) fn claimed(generation: i64, session: Arc<Held>, won: Won) -> Self {
        Self {
            generation,
            held: Some(session),
            won,
        }
    }

    /// The owner, whether it is corrupt, and the cid, as stored.
    fn attributes(&self) -> (Option<&Owner>, bool, Option<&str>) {
        match self.held.as_deref() {
            None => (None, false, None),
            Some(Held::Session(owner)) => (Some(owner), false, self.last_claim_id()),
            Some(Held::Raw { owner, claim_id }) => {
                let (owner, corrupt) = match owner {
                    OwnerAttr::Empty => (None, false),
                    OwnerAttr::Valid(owner) => (Some(owner), false),
                    OwnerAttr::Corrupt => (None, true),
                };
                (owner, corrupt, claim_id.as_deref())
            }
        }
    }

    /// Whether the record counts as a session (C13): a gen above 0 and an owner attribute
    /// that is not empty (a corrupt one counts, as in every store).
    pub(crate) fn holds_session(&self) -> bool {
        self.generation > 0
            && match self.held.as_deref() {
                None => false,
                Some(Held::Session(_)) => true,
                Some(Held::Raw { owner, .. }) => *owner != OwnerAttr::Empty,
            }
    }

    /// The claim_id of the last win in `won`: a session's cid.
    fn last_claim_id(&self) -> Option<&str> {
        self.won.last_claim_id()
    }

    /// The snapshot `read_owner` reports for this record (C6, C7 soft path).
    /// A record at gen 0 (only a raw write stores one) reads as absent, as
    /// [`OwnerState::from_record`] reads it in every store.
    pub(crate) fn state(&self) -> OwnerState {
        if self.generation == 0 {
            return OwnerState::absent();
        }
        let (owner, owner_corrupt, claim_id) = self.attributes();
        OwnerState {
            exists: true,
            generation: self.generation,
            owner: owner.cloned(),
            owner_corrupt,
            claim_id: claim_id.map(str::to_owned),
            recent_claims: self.won.to_recent(),
        }
    }

    /// The attributes a claim's fence compares.
    pub(crate) fn pins(&self) -> Pins<'_> {
        Pins {
            generation: self.generation,
            claim_id: self.attributes().2,
        }
    }
}

/// The snapshot of an optional record (`absent` when there is none).
pub(crate) fn state_of(record: Option<&Record>) -> OwnerState {
    record.map_or_else(OwnerState::absent, Record::state)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn raw_owner_decoding() {
        assert_eq!(OwnerAttr::from_raw(None), OwnerAttr::Empty);
        assert_eq!(OwnerAttr::from_raw(Some("")), OwnerAttr::Empty);
        assert_eq!(OwnerAttr::from_raw(Some("{")), OwnerAttr::Corrupt);
        assert_eq!(
            OwnerAttr::from_raw(Some(r#"{"endpoint":"http://h","x":1}"#)),
            OwnerAttr::Valid(Owner::new("", "", "http://h"))
        );
    }

    #[test]
    fn a_claimed_record_reads_its_last_win_as_its_cid() {
        let owner = Owner::new("r", "c", "http://h");
        let recent = RecentClaims::from_wins([("old", 3)]).after_win("", 4);
        let won = Won::after_win(&RecentClaims::from_wins([("old", 3)]), "", 4);
        let record = Record::claimed(4, Arc::new(Held::Session(owner.clone())), won);
        let state = record.state();
        assert_eq!(
            state,
            OwnerState {
                exists: true,
                generation: 4,
                owner: Some(owner),
                owner_corrupt: false,
                claim_id: Some(String::new()),
                recent_claims: recent,
            }
        );
        assert_eq!(
            record.pins(),
            Pins {
                generation: 4,
                claim_id: Some("")
            }
        );
    }

    #[test]
    fn raw_records_read_their_attributes() {
        let owner = Owner::new("r", "", "http://h");
        let recent = RecentClaims::from_wins([("a", 6)]);
        // A tombstone keeps its list; a raw pair is read as written, whatever the list says.
        for (attr, claim_id, owner, corrupt) in [
            (OwnerAttr::Empty, None, None, false),
            (OwnerAttr::Empty, Some("b"), None, false),
            (
                OwnerAttr::Valid(owner.clone()),
                None,
                Some(owner.clone()),
                false,
            ),
            (
                OwnerAttr::Valid(owner.clone()),
                Some("b"),
                Some(owner),
                false,
            ),
            (OwnerAttr::Corrupt, Some(""), None, true),
        ] {
            let record = Record::raw(7, attr, claim_id, &recent);
            let state = record.state();
            assert!(state.exists);
            assert_eq!(
                (state.generation, state.owner, state.owner_corrupt),
                (7, owner, corrupt)
            );
            assert_eq!(state.claim_id.as_deref(), claim_id);
            assert_eq!(record.pins().claim_id, claim_id);
            assert_eq!(state.recent_claims, recent);
        }
        assert!(
            Record::raw(7, OwnerAttr::Empty, None, &recent)
                .held
                .is_none()
        );
    }

    #[test]
    fn corrupt_reads_soft_and_current_is_hard() {
        let record = Record::raw(3, OwnerAttr::Corrupt, Some(""), &RecentClaims::new());
        let state = record.state();
        assert!(state.exists && state.owner_corrupt && state.owner.is_none());
        assert_eq!(state.claim_id.as_deref(), Some(""));
        assert!(
            state
                .clone()
                .into_current_view()
                .unwrap_err()
                .is_unavailable()
        );
        assert_eq!(state_of(None), OwnerState::absent());
    }

    #[test]
    fn a_gen_0_record_reads_absent_and_first_login_takes_it() {
        let record = Record::raw(
            0,
            OwnerAttr::Valid(Owner::new("", "", "http://h")),
            Some("c"),
            &RecentClaims::from_wins([("c", 1)]),
        );
        assert_eq!(record.state(), OwnerState::absent());
        assert!(unique_core::Fence::FirstLogin.holds(Some(record.pins())));
    }
}
