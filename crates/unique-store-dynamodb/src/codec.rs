//! The record layout (SPEC §8) and its translation to and from DynamoDB items.
//!
//! One item per key: `pk` (S) = `Key::to_string()`, `gen` (N), `owner` (S, the
//! owner's JSON, empty for a tombstone), `cid` (S, absent on a tombstone).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use unique_core::{CurrentView, Error, Key, OwnerState, decode_owner};

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

/// The condition and values of one C3 claim form, chosen from `snap.claim_id`
/// (never from `snap.owner`, so a corrupt record stays replaceable).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClaimForm {
    /// The `ConditionExpression`.
    pub(crate) condition: &'static str,
    /// The gen this claim writes.
    pub(crate) next_generation: i64,
    /// Extra expression values the condition needs (`:prev`, `:prev_cid`).
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

impl ClaimForm {
    /// Picks the form for `snap` (C3) and checks the gen domain (C4).
    ///
    /// # Errors
    ///
    /// `Unavailable` when `snap.generation + 1` would reach `i64::MAX`.
    pub(crate) fn for_snapshot(snap: &OwnerState) -> Result<Self, Error> {
        if !snap.exists {
            return Ok(Self {
                condition: "attribute_not_exists(pk)",
                next_generation: 1,
                pins: Vec::new(),
            });
        }
        let next_generation = match snap.generation.checked_add(1) {
            Some(next) if next < i64::MAX => next,
            _ => return Err(Error::unavailable("gen exhausted for this key")),
        };
        let prev = (":prev", number(snap.generation));
        Ok(match &snap.claim_id {
            Some(cid) => Self {
                condition: "#gen = :prev AND #cid = :prev_cid",
                next_generation,
                pins: vec![prev, (":prev_cid", AttributeValue::S(cid.clone()))],
            },
            None => Self {
                condition: "#gen = :prev AND attribute_not_exists(#cid)",
                next_generation,
                pins: vec![prev],
            },
        })
    }
}

/// Reads the `gen` attribute: present and an integer, or the record is unusable.
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
/// An absent `owner` reads as a tombstone; an `owner` of another type than S is
/// as corrupt as unparseable JSON.
///
/// # Errors
///
/// `Unavailable` when `gen` is missing or not an integer, or `cid` is not a string.
pub(crate) fn owner_state(item: Option<&Item>) -> Result<OwnerState, Error> {
    let Some(item) = item else {
        return Ok(OwnerState::absent());
    };
    let generation = generation(item)?;
    let (owner, owner_corrupt) = match item.get(OWNER) {
        None => (None, false),
        Some(AttributeValue::S(raw)) => match decode_owner(raw) {
            Ok(owner) => (owner, false),
            Err(()) => (None, true),
        },
        Some(_) => (None, true),
    };
    let claim_id = match item.get(CID) {
        None => None,
        Some(AttributeValue::S(cid)) => Some(cid.clone()),
        Some(_) => return Err(Error::unavailable("stored cid is not a string")),
    };
    Ok(OwnerState {
        exists: true,
        generation,
        owner,
        owner_corrupt,
        claim_id,
    })
}

/// The view `current` returns: the same decoding, but a corrupt owner is a hard
/// error (C7) so a heartbeat keeps its session instead of evicting wrongly.
///
/// # Errors
///
/// Those of [`owner_state`], and `Unavailable` for a corrupt owner.
pub(crate) fn current_view(item: Option<&Item>) -> Result<CurrentView, Error> {
    let state = owner_state(item)?;
    if state.owner_corrupt {
        return Err(Error::unavailable("stored owner is corrupt"));
    }
    Ok(CurrentView {
        generation: state.generation,
        owner: state.owner,
        exists: state.exists,
    })
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

    #[test]
    fn forms_follow_claim_id_not_owner() {
        let first = ClaimForm::for_snapshot(&OwnerState::absent()).unwrap();
        assert_eq!(first.condition, "attribute_not_exists(pk)");
        assert_eq!(first.next_generation, 1);

        // Corrupt owner (owner None) with a cid: still the double-pin form.
        let corrupt = OwnerState {
            exists: true,
            generation: 4,
            owner: None,
            owner_corrupt: true,
            claim_id: Some(String::new()),
        };
        let pin = ClaimForm::for_snapshot(&corrupt).unwrap();
        assert_eq!(pin.condition, "#gen = :prev AND #cid = :prev_cid");
        assert_eq!(pin.next_generation, 5);
        assert_eq!(pin.pins[1], (":prev_cid", s("")));

        let tomb = OwnerState {
            exists: true,
            generation: 9,
            ..OwnerState::default()
        };
        let tomb = ClaimForm::for_snapshot(&tomb).unwrap();
        assert_eq!(
            tomb.condition,
            "#gen = :prev AND attribute_not_exists(#cid)"
        );
        assert_eq!(tomb.pins, vec![(":prev", number(9))]);
    }

    #[test]
    fn gen_domain_ends_below_max() {
        let at = |generation| OwnerState {
            exists: true,
            generation,
            ..OwnerState::default()
        };
        assert_eq!(
            ClaimForm::for_snapshot(&at(i64::MAX - 2))
                .unwrap()
                .next_generation,
            i64::MAX - 1
        );
        for g in [i64::MAX - 1, i64::MAX] {
            assert!(
                ClaimForm::for_snapshot(&at(g))
                    .unwrap_err()
                    .is_unavailable()
            );
        }
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
    fn bad_gen_or_cid_is_unavailable() {
        for bad in [
            item(&[(OWNER, s(""))]),
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
