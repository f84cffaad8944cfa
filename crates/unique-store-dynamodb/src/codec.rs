//! The record layout and its translation to and from DynamoDB items.
//!
//! One item per key: `pk` (S) = `Key::to_string()`, `gen` (N), `owner` (S, the
//! owner's JSON, empty for a tombstone), `cid` (S, absent on a tombstone).
//!
//! An item without `gen`, or with `gen` 0, was never claimed: it reads as no
//! record and the first-login form claims it (`docs/design.md#records`).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use unique_core::{CasOutcome, CurrentView, Error, Fence, Key, OwnerState, StoredOwner};

/// Partition key attribute.
pub(crate) const PK: &str = "pk";
/// Generation attribute (`gen` on the wire and in storage).
pub(crate) const GEN: &str = "gen";
/// Owner JSON attribute.
pub(crate) const OWNER: &str = "owner";
/// Claim id attribute.
pub(crate) const CID: &str = "cid";

/// An item as the SDK returns it.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// The partition key value of `key`.
pub(crate) fn pk(key: &Key) -> AttributeValue {
    AttributeValue::S(key.to_string())
}

/// A number attribute holding `value`.
pub(crate) fn number(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A claim's [`Fence`] as DynamoDB checks it: the condition expression and
/// the values it pins.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClaimForm {
    /// The `ConditionExpression`.
    pub(crate) condition: &'static str,
    /// The gen this claim writes.
    pub(crate) next_generation: i64,
    /// Extra expression values the condition needs (`:zero`, `:prev`, `:prev_cid`).
    pub(crate) pins: Vec<(&'static str, AttributeValue)>,
}

/// Every claim form writes the three attributes in one `SET`.
pub(crate) const CLAIM_UPDATE: &str = "SET #gen = :next, #owner = :owner, #cid = :cid";

/// Expression attribute names shared by every claim form and release (each
/// uses all three; DynamoDB rejects unused names). `owner` is a DynamoDB
/// reserved word, so every attribute goes through a placeholder.
pub(crate) fn expression_names() -> HashMap<String, String> {
    [("#gen", GEN), ("#owner", OWNER), ("#cid", CID)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

impl From<Fence<'_>> for ClaimForm {
    fn from(fence: Fence<'_>) -> Self {
        let next_generation = fence.next_generation();
        let (condition, pins) = match fence {
            // No `gen` (no item, or an item never claimed) or gen 0: both read as absent.
            Fence::FirstLogin => (
                "attribute_not_exists(#gen) OR #gen = :zero",
                vec![(":zero", number(0))],
            ),
            Fence::DoublePin {
                generation,
                claim_id,
            } => (
                "#gen = :prev AND #cid = :prev_cid",
                vec![
                    (":prev", number(generation)),
                    (":prev_cid", AttributeValue::S(claim_id.to_owned())),
                ],
            ),
            Fence::Tombstone { generation } => (
                "#gen = :prev AND attribute_not_exists(#cid)",
                vec![(":prev", number(generation))],
            ),
        };
        Self {
            condition,
            next_generation,
            pins,
        }
    }
}

/// Reads the `gen` attribute of an item a claim wrote: present and an integer,
/// or the answer is unusable.
pub(crate) fn generation(item: &Item) -> Result<i64, Error> {
    match item.get(GEN) {
        Some(AttributeValue::N(n)) => n
            .parse::<i64>()
            .map_err(|_| Error::unavailable("stored gen is not an integer")),
        Some(_) => Err(Error::unavailable("stored gen is not a number")),
        None => Err(Error::unavailable("stored record has no gen")),
    }
}

/// The snapshot `read_owner` returns (C6, C7 soft path). `None` = no record.
///
/// An item without `gen` reads as no record, as one at gen 0 does
/// ([`OwnerState::from_record`]). An absent `owner` reads as a tombstone; an
/// `owner` of another type than S is as corrupt as unparseable JSON.
///
/// # Errors
///
/// `Unavailable` when `gen` is not an integer, or `cid` is not a string.
pub(crate) fn owner_state(item: Option<&Item>) -> Result<OwnerState, Error> {
    let Some(item) = item.filter(|item| item.contains_key(GEN)) else {
        return Ok(OwnerState::absent());
    };
    let generation = generation(item)?;
    let owner = match item.get(OWNER) {
        None => StoredOwner::Absent,
        Some(AttributeValue::S(raw)) => StoredOwner::Text(raw),
        Some(_) => StoredOwner::NotText,
    };
    let claim_id = match item.get(CID) {
        None => None,
        Some(AttributeValue::S(cid)) => Some(cid.clone()),
        Some(_) => return Err(Error::unavailable("stored cid is not a string")),
    };
    Ok(OwnerState::from_record(generation, owner, claim_id, None))
}

/// The view `current` returns: the same decoding, but a corrupt owner is a hard
/// error (C7) so a heartbeat keeps its session instead of evicting wrongly.
///
/// # Errors
///
/// Those of [`owner_state`] and of [`OwnerState::into_current_view`].
pub(crate) fn current_view(item: Option<&Item>) -> Result<CurrentView, Error> {
    owner_state(item)?.into_current_view()
}

/// A claim whose condition failed: the record it lost to when the server
/// returned it (`ALL_OLD`) and it decodes, so the Arbiter's next attempt skips
/// its read; otherwise the Arbiter reads.
pub(crate) fn lost_race(item: Option<&Item>) -> CasOutcome {
    CasOutcome::LostRace {
        current: item.and_then(|item| owner_state(Some(item)).ok()),
    }
}

#[cfg(test)]
mod tests {
    use unique_core::Owner;

    use super::*;

    fn item(pairs: &[(&str, AttributeValue)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn form(snap: &OwnerState) -> ClaimForm {
        Fence::for_snapshot(snap)
            .expect("a claimable snapshot")
            .into()
    }

    #[test]
    fn each_fence_maps_to_its_condition_and_pins() {
        let first = form(&OwnerState::absent());
        assert_eq!(
            first.condition,
            "attribute_not_exists(#gen) OR #gen = :zero"
        );
        assert_eq!(first.next_generation, 1);
        assert_eq!(first.pins, vec![(":zero", number(0))]);

        // Corrupt owner (owner None) with a cid: still the double-pin form.
        let corrupt = OwnerState {
            exists: true,
            generation: 4,
            owner: None,
            owner_corrupt: true,
            claim_id: Some(String::new()),
            ..OwnerState::default()
        };
        let pin = form(&corrupt);
        assert_eq!(pin.condition, "#gen = :prev AND #cid = :prev_cid");
        assert_eq!(pin.next_generation, 5);
        assert_eq!(pin.pins, vec![(":prev", number(4)), (":prev_cid", s(""))]);

        let tomb = OwnerState {
            exists: true,
            generation: 9,
            ..OwnerState::default()
        };
        let tomb = form(&tomb);
        assert_eq!(
            tomb.condition,
            "#gen = :prev AND attribute_not_exists(#cid)"
        );
        assert_eq!(tomb.next_generation, 10);
        assert_eq!(tomb.pins, vec![(":prev", number(9))]);
    }

    #[test]
    fn the_written_gen_is_the_fences_up_to_the_last_one() {
        let last = OwnerState {
            exists: true,
            generation: i64::MAX - 2,
            ..OwnerState::default()
        };
        assert_eq!(form(&last).next_generation, i64::MAX - 1);
    }

    #[test]
    fn a_lost_race_carries_the_all_old_item_when_it_decodes() {
        assert_eq!(lost_race(None), CasOutcome::LostRace { current: None });
        let tomb = item(&[(GEN, number(7)), (OWNER, s(""))]);
        let CasOutcome::LostRace {
            current: Some(state),
        } = lost_race(Some(&tomb))
        else {
            panic!("expected a lost race with the record");
        };
        assert!(state.exists);
        assert_eq!(state.generation, 7);
        assert_eq!(state.claim_id, None);
        // An item that does not decode leaves the next attempt to read.
        let bad = item(&[(GEN, s("x"))]);
        assert_eq!(
            lost_race(Some(&bad)),
            CasOutcome::LostRace { current: None }
        );
    }

    #[test]
    fn decodes_cid_presence_and_tombstones() {
        let owner = r#"{"endpoint":"http://h/k"}"#;
        let live = item(&[(GEN, number(3)), (OWNER, s(owner)), (CID, s(""))]);
        let state = owner_state(Some(&live)).unwrap();
        assert_eq!(state.claim_id.as_deref(), Some(""));
        assert_eq!(state.owner, Some(Owner::new("", "", "http://h/k")));

        for tomb in [
            item(&[(GEN, number(3)), (OWNER, s(""))]),
            item(&[(GEN, number(3))]),
        ] {
            let state = owner_state(Some(&tomb)).unwrap();
            assert!(state.exists && state.owner.is_none() && !state.owner_corrupt);
            assert_eq!(state.claim_id, None);
            let view = current_view(Some(&tomb)).unwrap();
            assert!(view.exists && view.owner.is_none());
        }
        assert_eq!(owner_state(None).unwrap(), OwnerState::absent());
        assert!(!current_view(None).unwrap().exists);
    }

    #[test]
    fn corrupt_owner_is_soft_on_read_and_hard_on_current() {
        for bad in [s("{"), s("[]"), AttributeValue::N("1".into())] {
            let it = item(&[(GEN, number(2)), (OWNER, bad), (CID, s("c"))]);
            let state = owner_state(Some(&it)).unwrap();
            assert!(state.owner_corrupt && state.owner.is_none());
            assert!(current_view(Some(&it)).unwrap_err().is_unavailable());
        }
    }

    #[test]
    fn an_item_without_gen_or_at_gen_0_reads_absent() {
        let owner = r#"{"endpoint":"http://h/k"}"#;
        for never_claimed in [
            item(&[]),
            item(&[(OWNER, s(""))]),
            item(&[(OWNER, s(owner)), (CID, s("c"))]),
            item(&[(OWNER, s("{")), (CID, AttributeValue::N("1".into()))]),
            item(&[(GEN, number(0)), (OWNER, s(owner)), (CID, s("c"))]),
        ] {
            let state = owner_state(Some(&never_claimed)).unwrap();
            assert_eq!(state, OwnerState::absent(), "{never_claimed:?}");
            let view = current_view(Some(&never_claimed)).unwrap();
            assert!(!view.exists && view.generation == 0, "{never_claimed:?}");
        }
    }

    #[test]
    fn bad_gen_or_cid_is_unavailable() {
        for bad in [
            item(&[(GEN, s("1"))]),
            item(&[(GEN, AttributeValue::N("1.5".into()))]),
            item(&[(GEN, number(1)), (CID, AttributeValue::N("1".into()))]),
        ] {
            assert!(
                owner_state(Some(&bad)).unwrap_err().is_unavailable(),
                "{bad:?}"
            );
            assert!(
                current_view(Some(&bad)).unwrap_err().is_unavailable(),
                "{bad:?}"
            );
        }
    }
}
