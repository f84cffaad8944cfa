//! One key's stored record and how it reads back (C6, C7).

use unique_core::{Owner, OwnerState, Pins, RecentClaims};

/// The `owner` attribute, kept decoded so reads do not parse JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnerAttr {
    /// Empty string or absent attribute: a tombstone or a pre-first-login record.
    Empty,
    /// A parseable owner.
    Valid(Owner),
    /// Non-empty but not an `Owner` JSON object (C7). Only a raw write (the
    /// `test-util` hook) can store one: this store writes valid owners only.
    #[cfg_attr(not(any(test, feature = "test-util")), allow(dead_code))]
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

/// The four attributes of a key's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// `gen`.
    pub(crate) generation: i64,
    /// `owner`.
    pub(crate) owner: OwnerAttr,
    /// `cid`; `None` = attribute absent, `Some("")` = empty string (C6).
    pub(crate) claim_id: Option<String>,
    /// `won`, kept decoded (C9).
    pub(crate) recent: RecentClaims,
}

impl Record {
    /// Writes a claim over this record: `gen`, `owner`, `cid` and `won` together (C4, C9).
    ///
    /// Copies into the strings the record already holds, so replacing a session
    /// (the common write) allocates nothing once the strings are long enough.
    pub(crate) fn overwrite(
        &mut self,
        generation: i64,
        owner: &Owner,
        claim_id: &str,
        recent: RecentClaims,
    ) {
        self.generation = generation;
        self.recent = recent;
        match &mut self.owner {
            OwnerAttr::Valid(stored) => {
                stored.region.clone_from(&owner.region);
                stored.cluster.clone_from(&owner.cluster);
                stored.endpoint.clone_from(&owner.endpoint);
            }
            other => *other = OwnerAttr::Valid(owner.clone()),
        }
        match &mut self.claim_id {
            Some(stored) => claim_id.clone_into(stored),
            None => self.claim_id = Some(claim_id.to_owned()),
        }
    }

    /// The snapshot `read_owner` reports for this record (C6, C7 soft path).
    /// A record at gen 0 (only a raw write stores one) reads as absent, as
    /// [`OwnerState::from_record`] reads it in every store.
    pub(crate) fn state(&self) -> OwnerState {
        if self.generation == 0 {
            return OwnerState::absent();
        }
        let (owner, owner_corrupt) = match &self.owner {
            OwnerAttr::Empty => (None, false),
            OwnerAttr::Valid(owner) => (Some(owner.clone()), false),
            OwnerAttr::Corrupt => (None, true),
        };
        OwnerState {
            exists: true,
            generation: self.generation,
            owner,
            owner_corrupt,
            claim_id: self.claim_id.clone(),
            recent_claims: self.recent.clone(),
        }
    }

    /// The attributes a claim's fence compares.
    pub(crate) fn pins(&self) -> Pins<'_> {
        Pins {
            generation: self.generation,
            claim_id: self.claim_id.as_deref(),
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
    fn overwrite_replaces_every_attribute() {
        let mut record = Record {
            generation: 3,
            owner: OwnerAttr::Valid(Owner::new("a-long-region", "c", "http://old/kick")),
            claim_id: Some("an-older-and-longer-claim-id".to_owned()),
            recent: RecentClaims::from_wins([("an-older-and-longer-claim-id", 3)]),
        };
        let recent = record.recent.after_win("n", 4);
        record.overwrite(4, &Owner::new("", "c2", "http://new"), "n", recent.clone());
        assert_eq!(
            record,
            Record {
                generation: 4,
                owner: OwnerAttr::Valid(Owner::new("", "c2", "http://new")),
                claim_id: Some("n".to_owned()),
                recent,
            }
        );
        for owner in [OwnerAttr::Empty, OwnerAttr::Corrupt] {
            let mut record = Record {
                generation: 7,
                owner,
                claim_id: None,
                recent: RecentClaims::new(),
            };
            record.overwrite(8, &Owner::new("r", "", "http://h"), "", RecentClaims::new());
            assert_eq!(
                record.owner,
                OwnerAttr::Valid(Owner::new("r", "", "http://h"))
            );
            assert_eq!(record.claim_id.as_deref(), Some(""));
            assert_eq!(record.generation, 8);
        }
    }

    #[test]
    fn corrupt_reads_soft_and_current_is_hard() {
        let record = Record {
            generation: 3,
            owner: OwnerAttr::Corrupt,
            claim_id: Some(String::new()),
            recent: RecentClaims::new(),
        };
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
        let record = Record {
            generation: 0,
            owner: OwnerAttr::Valid(Owner::new("", "", "http://h")),
            claim_id: Some("c".to_owned()),
            recent: RecentClaims::from_wins([("c", 1)]),
        };
        assert_eq!(record.state(), OwnerState::absent());
        assert!(unique_core::Fence::FirstLogin.holds(Some(record.pins())));
    }
}
