//! The C3 condition a claim is fenced by, chosen from the snapshot.

use unique_core::{Error, OwnerState};

use crate::record::Record;

/// The condition a claim requires of the stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fence<'a> {
    /// First login: the record must still not exist.
    Absent,
    /// Replaces an online session or a corrupt record: `gen` and `cid` both match.
    DoublePin {
        /// The snapshot's gen.
        generation: i64,
        /// The snapshot's cid (possibly empty: `Some("")` is a cid, C6).
        claim_id: &'a str,
    },
    /// Replaces a tombstone: `gen` matches and `cid` is absent.
    Tombstone {
        /// The snapshot's gen.
        generation: i64,
    },
}

impl<'a> Fence<'a> {
    /// Picks the form from `snap.exists` and `snap.claim_id`, never from
    /// `snap.owner`: a corrupt record has no owner but a cid, and must stay
    /// replaceable through the double pin (C3).
    pub(crate) fn from_snapshot(snap: &'a OwnerState) -> Self {
        match (snap.exists, snap.claim_id.as_deref()) {
            (false, _) => Self::Absent,
            (true, Some(claim_id)) => Self::DoublePin {
                generation: snap.generation,
                claim_id,
            },
            (true, None) => Self::Tombstone {
                generation: snap.generation,
            },
        }
    }

    /// Whether `current` (the record as stored now) satisfies the condition.
    pub(crate) fn holds(self, current: Option<&Record>) -> bool {
        match (self, current) {
            (Self::Absent, None) => true,
            (
                Self::DoublePin {
                    generation,
                    claim_id,
                },
                Some(record),
            ) => record.generation == generation && record.claim_id.as_deref() == Some(claim_id),
            (Self::Tombstone { generation }, Some(record)) => {
                record.generation == generation && record.claim_id.is_none()
            }
            _ => false,
        }
    }

    /// The gen a successful claim writes: 1 on first login, else the snapshot's
    /// gen + 1, refused when it would reach `i64::MAX` (C4).
    pub(crate) fn next_generation(self) -> Result<i64, Error> {
        let previous = match self {
            Self::Absent => return Ok(1),
            Self::DoublePin { generation, .. } | Self::Tombstone { generation } => generation,
        };
        previous
            .checked_add(1)
            .filter(|next| *next < i64::MAX)
            .ok_or_else(|| Error::unavailable("gen exhausted for this key"))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use unique_core::Owner;

    use super::*;
    use crate::record::OwnerAttr;

    fn record(generation: i64, claim_id: Option<&str>) -> Record {
        Record {
            generation,
            owner: OwnerAttr::Empty,
            claim_id: claim_id.map(str::to_owned),
        }
    }

    fn snap(exists: bool, generation: i64, claim_id: Option<&str>) -> OwnerState {
        OwnerState {
            exists,
            generation,
            claim_id: claim_id.map(str::to_owned),
            ..OwnerState::default()
        }
    }

    #[test]
    fn form_follows_claim_id_not_owner() {
        let corrupt = OwnerState {
            owner_corrupt: true,
            ..snap(true, 4, Some("c"))
        };
        assert!(matches!(
            Fence::from_snapshot(&corrupt),
            Fence::DoublePin {
                generation: 4,
                claim_id: "c"
            }
        ));
        let legacy = OwnerState {
            owner: Some(Owner::new("", "", "http://h")),
            ..snap(true, 4, None)
        };
        assert_eq!(
            Fence::from_snapshot(&legacy),
            Fence::Tombstone { generation: 4 }
        );
        assert_eq!(
            Fence::from_snapshot(&snap(false, 9, Some("x"))),
            Fence::Absent
        );
    }

    #[test]
    fn conditions() {
        let pin = Fence::DoublePin {
            generation: 2,
            claim_id: "",
        };
        assert!(pin.holds(Some(&record(2, Some("")))));
        assert!(!pin.holds(Some(&record(2, None))));
        assert!(!pin.holds(Some(&record(3, Some("")))));
        assert!(!pin.holds(None));
        let tomb = Fence::Tombstone { generation: 2 };
        assert!(tomb.holds(Some(&record(2, None))));
        assert!(!tomb.holds(Some(&record(2, Some("")))));
        assert!(!tomb.holds(None));
        assert!(Fence::Absent.holds(None));
        assert!(!Fence::Absent.holds(Some(&record(0, None))));
    }

    #[test]
    fn next_generation_bounds() {
        assert_eq!(Fence::Absent.next_generation().unwrap(), 1);
        let at = |generation| Fence::Tombstone { generation }.next_generation();
        assert_eq!(at(i64::MAX - 2).unwrap(), i64::MAX - 1);
        assert!(at(i64::MAX - 1).unwrap_err().is_unavailable());
        assert!(at(i64::MAX).unwrap_err().is_unavailable());
    }
}
