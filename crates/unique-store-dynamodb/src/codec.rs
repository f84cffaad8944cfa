//! The record layout and its translation to and from DynamoDB items.
//!
//! One item per key, keyed by the user and the slot: partition key `pk` (S) =
//! `UserKey::to_string()` (`project#env#uid`), sort key `sk` (S) = `#` followed by
//! the slot (`#` alone for the default slot: a key attribute cannot be empty, and
//! `#` is forbidden inside a slot, so no slot's sort key is another's). Every record
//! of a user is then one partition, which one `Query` lists (C10). The attributes:
//! `gen` (N), `owner` (S, the owner's JSON, empty for a tombstone), `cid` (S,
//! absent on a tombstone) and `won` (S, the recent claims' JSON
//! `[["claim_id",gen],…]`, C9; absent on items written before it).
//!
//! An item without `gen`, or with `gen` 0, was never claimed: it reads as no
//! record and the first-login form claims it (`docs/design.md#records`).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use unique_core::{
    CasOutcome, CurrentView, Error, Fence, Key, OwnerState, StoredOwner, UserKey, UserSession,
    listed_session,
};

/// Partition key attribute: the user.
pub(crate) const PK: &str = "pk";
/// Sort key attribute: [`SLOT_PREFIX`] and the slot.
pub(crate) const SK: &str = "sk";
/// What every sort key starts with, so the default slot's (`""`) is not empty.
const SLOT_PREFIX: char = '#';
/// Generation attribute (`gen` on the wire and in storage).
pub(crate) const GEN: &str = "gen";
/// Owner JSON attribute.
pub(crate) const OWNER: &str = "owner";
/// Claim id attribute.
pub(crate) const CID: &str = "cid";
/// Recent claims attribute (C9).
pub(crate) const WON: &str = "won";

/// An item as the SDK returns it.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// The partition key value of `user`: every slot of the user shares it.
pub(crate) fn partition_key(user: &UserKey) -> AttributeValue {
    AttributeValue::S(user.to_string())
}

/// The primary key of `key`'s item as `(pk, sk)`: the user, and `#` followed by
/// the slot (`#` alone for the default slot).
pub(crate) fn primary_key(key: &Key) -> (String, String) {
    (key.user().to_string(), format!("{SLOT_PREFIX}{}", key.slot))
}

/// The key map of `(pk, sk)`: what a `GetItem`, `UpdateItem` or `BatchGetItem` names.
pub(crate) fn key_item(pk: &str, sk: &str) -> Item {
    Item::from([
        (PK.to_owned(), AttributeValue::S(pk.to_owned())),
        (SK.to_owned(), AttributeValue::S(sk.to_owned())),
    ])
}

/// The key map of `key`'s item.
pub(crate) fn item_key(key: &Key) -> Item {
    let (pk, sk) = primary_key(key);
    key_item(&pk, &sk)
}

/// The `(pk, sk)` of an item the table returned; `None` without both as strings.
pub(crate) fn stored_key(item: &Item) -> Option<(&str, &str)> {
    match (item.get(PK), item.get(SK)) {
        (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) => Some((pk, sk)),
        _ => None,
    }
}

/// The slot of an item a listing returned, from its sort key.
///
/// # Errors
///
/// `Unavailable` when the item has no string sort key starting with `#`: no key
/// this store writes looks like that, so the table holds something else.
pub(crate) fn slot(item: &Item) -> Result<&str, Error> {
    match item.get(SK) {
        Some(AttributeValue::S(sk)) => sk
            .strip_prefix(SLOT_PREFIX)
            .ok_or_else(|| Error::unavailable(format!("stored sort key {sk:?} is not a slot"))),
        _ => Err(Error::unavailable("stored item has no string sort key")),
    }
}

/// The listing entry of one item of a user's partition (C10): decoded as
/// `read_owner` decodes it, then judged by [`listed_session`] as every backend does.
///
/// # Errors
///
/// `Unavailable` for an item whose sort key is not a slot, and those of
/// [`owner_state`] and [`listed_session`] (a corrupt owner).
pub(crate) fn listed(item: &Item) -> Result<Option<UserSession>, Error> {
    listed_session(slot(item)?, owner_state(Some(item))?)
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

/// Every claim form writes the four attributes in one `SET` (C4, C9).
pub(crate) const CLAIM_UPDATE: &str = "SET #gen = :next, #owner = :owner, #cid = :cid, #won = :won";

/// Release keeps `gen` and `won` and turns the record into a tombstone (C5, C9).
pub(crate) const RELEASE_UPDATE: &str = "SET #owner = :empty REMOVE #cid";
/// Release only at the stored gen (C5).
pub(crate) const RELEASE_CONDITION: &str = "#gen = :gen";

/// A listing's key condition: the user's whole partition (C10).
pub(crate) const USER_CONDITION: &str = "#pk = :user";
/// The value [`USER_CONDITION`] pins: [`partition_key`] of the user.
pub(crate) const USER_VALUE: &str = ":user";

/// The expression attribute names of a listing.
pub(crate) fn user_names() -> HashMap<String, String> {
    names(&[("#pk", PK)])
}

/// The expression attribute names of every claim form: all four attributes.
/// `owner` is a DynamoDB reserved word, so every attribute goes through a
/// placeholder.
pub(crate) fn claim_names() -> HashMap<String, String> {
    names(&[
        ("#gen", GEN),
        ("#owner", OWNER),
        ("#cid", CID),
        ("#won", WON),
    ])
}

/// The expression attribute names of a release: `won` is not among them, since
/// a release leaves it alone and DynamoDB rejects a name no expression uses.
pub(crate) fn release_names() -> HashMap<String, String> {
    names(&[("#gen", GEN), ("#owner", OWNER), ("#cid", CID)])
}

fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
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

impl ClaimForm {
    /// The claim's expression attribute values: what [`CLAIM_UPDATE`] writes
    /// (`:next`, `:owner`, `:cid`, and `:won`, the snapshot's recent claims
    /// followed by this win, C9) and the pins of the condition. Exactly the
    /// values the two expressions use: DynamoDB rejects an unused one.
    pub(crate) fn values(
        self,
        owner_json: String,
        claim_id: &str,
        snap: &OwnerState,
    ) -> HashMap<String, AttributeValue> {
        let won = snap.won_after(claim_id, self.next_generation);
        [
            (":next", number(self.next_generation)),
            (":owner", AttributeValue::S(owner_json)),
            (":cid", AttributeValue::S(claim_id.to_owned())),
            (":won", AttributeValue::S(won)),
        ]
        .into_iter()
        .chain(self.pins)
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
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
/// `owner` of another type than S is as corrupt as unparseable JSON. A `won`
/// of another type than S reads as no recent claims, as unreadable JSON does
/// (C9): a damaged list never fails a read nor locks the key, and the next
/// claim writes it again as S.
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
    let won = match item.get(WON) {
        Some(AttributeValue::S(won)) => Some(won.as_str()),
        // Absent, or not a string: no recent claims either way.
        _ => None,
    };
    Ok(OwnerState::from_record(generation, owner, claim_id, won))
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
    use std::collections::BTreeSet;

    use unique_core::{Owner, RECENT_CLAIMS, RecentClaims};

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

    /// The placeholders (`#name` or `:value`, as `sigil` says) the expressions use.
    fn placeholders(sigil: char, expressions: &[&str]) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for expression in expressions {
            let mut rest = *expression;
            while let Some(at) = rest.find(sigil) {
                let tail = &rest[at + 1..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                found.insert(format!("{sigil}{}", &tail[..end]));
                rest = &tail[end..];
            }
        }
        found
    }

    fn keys<V>(map: &HashMap<String, V>) -> BTreeSet<String> {
        map.keys().cloned().collect()
    }

    /// A live record at `generation` held by `claim_id`, with `wins` as its recent claims.
    fn session(generation: i64, claim_id: &str, wins: &[(&str, i64)]) -> OwnerState {
        OwnerState {
            exists: true,
            generation,
            owner: Some(Owner::new("", "", "http://h/k")),
            owner_corrupt: false,
            claim_id: Some(claim_id.to_owned()),
            recent_claims: RecentClaims::from_wins(wins.iter().copied()),
        }
    }

    /// Every form a claim can take: first login, double pin (a session, a
    /// corrupt owner) and tombstone, each with recent claims where it can have them.
    fn every_form() -> Vec<OwnerState> {
        vec![
            OwnerState::absent(),
            session(2, "b", &[("a", 1), ("b", 2)]),
            OwnerState {
                owner: None,
                owner_corrupt: true,
                ..session(3, "", &[])
            },
            OwnerState {
                owner: None,
                claim_id: None,
                ..session(4, "x", &[("d", 4)])
            },
        ]
    }

    #[test]
    fn a_key_is_its_user_and_hash_slot() {
        let key = Key::new("p", "e", 4);
        assert_eq!(primary_key(&key), ("p#e#4".to_owned(), "#".to_owned()));
        let mobile = key.clone().with_slot("mobile");
        assert_eq!(
            primary_key(&mobile),
            ("p#e#4".to_owned(), "#mobile".to_owned())
        );
        assert_eq!(
            item_key(&mobile),
            item(&[(PK, s("p#e#4")), (SK, s("#mobile"))])
        );
        // The default slot's pk is exactly the key before slots existed.
        assert_eq!(primary_key(&key).0, key.to_string());
        for it in [item_key(&key), item_key(&mobile)] {
            let (pk, sk) = stored_key(&it).unwrap();
            assert_eq!(pk, "p#e#4");
            assert_eq!(slot(&it).unwrap(), &sk[1..]);
        }
        assert_eq!(stored_key(&item(&[(PK, s("p#e#4"))])), None);
    }

    #[test]
    fn a_listed_item_is_its_slots_session_unless_it_holds_no_owner() {
        let owner = r#"{"endpoint":"http://h/k"}"#;
        let at = |sk: &str, rest: &[(&str, AttributeValue)]| {
            let mut it = item(rest);
            it.insert(SK.to_owned(), s(sk));
            it
        };
        let live = at("#pc", &[(GEN, number(2)), (OWNER, s(owner)), (CID, s("c"))]);
        let session = listed(&live).unwrap().unwrap();
        assert_eq!((session.slot.as_str(), session.generation), ("pc", 2));
        assert_eq!(session.owner, Owner::new("", "", "http://h/k"));
        let default = at("#", &[(GEN, number(1)), (OWNER, s(owner)), (CID, s("c"))]);
        assert_eq!(listed(&default).unwrap().unwrap().slot, "");
        for none in [
            at("#pc", &[(GEN, number(3)), (OWNER, s(""))]),
            at("#pc", &[(GEN, number(0)), (OWNER, s(owner)), (CID, s("c"))]),
            at("#pc", &[(OWNER, s(owner))]),
        ] {
            assert_eq!(listed(&none).unwrap(), None, "{none:?}");
        }
        for bad in [
            at("#pc", &[(GEN, number(3)), (OWNER, s("{")), (CID, s("c"))]),
            at("pc", &[(GEN, number(3)), (OWNER, s(owner)), (CID, s("c"))]),
            item(&[(GEN, number(3)), (OWNER, s(owner))]),
            item(&[(SK, number(1)), (GEN, number(3)), (OWNER, s(owner))]),
        ] {
            assert!(listed(&bad).unwrap_err().is_unavailable(), "{bad:?}");
        }
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
    fn every_expression_uses_exactly_its_names_and_values() {
        // DynamoDB rejects a name or value that no expression uses, and one
        // that an expression uses but the request lacks.
        for snap in every_form() {
            let form = form(&snap);
            let condition = form.condition;
            let values = form.values("{}".to_owned(), "c", &snap);
            assert_eq!(
                keys(&claim_names()),
                placeholders('#', &[CLAIM_UPDATE, condition]),
                "{condition}"
            );
            assert_eq!(
                keys(&values),
                placeholders(':', &[CLAIM_UPDATE, condition]),
                "{condition}"
            );
        }
        assert_eq!(
            keys(&release_names()),
            placeholders('#', &[RELEASE_UPDATE, RELEASE_CONDITION])
        );
        assert_eq!(
            placeholders(':', &[RELEASE_UPDATE, RELEASE_CONDITION]),
            BTreeSet::from([":empty".to_owned(), ":gen".to_owned()])
        );
        let claim = claim_names();
        assert_eq!(
            [GEN, OWNER, CID, WON].map(|a| claim[&format!("#{a}")].as_str()),
            ["gen", "owner", "cid", "won"]
        );
        // A release leaves won alone (C9): it names it nowhere.
        assert!(!release_names().values().any(|a| a == WON));
        assert!(!RELEASE_UPDATE.contains("won") && !RELEASE_CONDITION.contains("won"));
    }

    #[test]
    fn a_claim_writes_gen_owner_cid_and_the_snapshots_wins_with_its_own() {
        let cases = [
            (OwnerState::absent(), 1, r#"[["new",1]]"#),
            (
                session(2, "b", &[("a", 1), ("b", 2)]),
                3,
                r#"[["a",1],["b",2],["new",3]]"#,
            ),
            // A corrupt record, a tombstone, a record from before C9: no wins yet.
            (every_form()[2].clone(), 4, r#"[["new",4]]"#),
            (every_form()[3].clone(), 5, r#"[["d",4],["new",5]]"#),
            (session(7, "old", &[]), 8, r#"[["new",8]]"#),
        ];
        for (snap, next, won) in cases {
            let values = form(&snap).values(r#"{"endpoint":"http://n"}"#.to_owned(), "new", &snap);
            assert_eq!(values[":next"], number(next), "{snap:?}");
            assert_eq!(
                values[":owner"],
                s(r#"{"endpoint":"http://n"}"#),
                "{snap:?}"
            );
            assert_eq!(values[":cid"], s("new"), "{snap:?}");
            assert_eq!(values[":won"], s(won), "{snap:?}");
        }
        // A full list drops its oldest win.
        let kept = i64::try_from(RECENT_CLAIMS).unwrap();
        let wins: Vec<(String, i64)> = (1..=kept).map(|g| (format!("c{g}"), g)).collect();
        let full = OwnerState {
            recent_claims: RecentClaims::from_wins(wins.iter().map(|(c, g)| (c.as_str(), *g))),
            ..session(kept, &format!("c{kept}"), &[])
        };
        let values = form(&full).values("{}".to_owned(), "new", &full);
        let AttributeValue::S(written) = &values[":won"] else {
            panic!("won is written as S");
        };
        let written: Vec<(String, i64)> = RecentClaims::decode(Some(written))
            .iter()
            .map(|(c, g)| (c.to_owned(), g))
            .collect();
        let mut want = wins[1..].to_vec();
        want.push(("new".to_owned(), kept + 1));
        assert_eq!(written, want);
    }

    #[test]
    fn decodes_won_and_reads_any_unreadable_one_as_no_recent_claims() {
        let owner = r#"{"endpoint":"http://h/k"}"#;
        let record = |won: Option<AttributeValue>| {
            let mut it = item(&[(GEN, number(3)), (OWNER, s(owner)), (CID, s("c"))]);
            if let Some(won) = won {
                it.insert(WON.to_owned(), won);
            }
            it
        };
        let stored = owner_state(Some(&record(Some(s(r#"[["b",2],["c",3]]"#))))).unwrap();
        assert_eq!(
            stored.recent_claims,
            RecentClaims::from_wins([("b", 2), ("c", 3)])
        );
        assert_eq!(stored.claim_id.as_deref(), Some("c"));

        let unreadable = [
            None,
            Some(s("")),
            Some(s("{")),
            Some(s("null")),
            Some(s("[1]")),
            Some(s(r#"[["a"]]"#)),
            // Not a string at all: as unreadable as bad JSON, never an error.
            Some(AttributeValue::N("1".into())),
            Some(AttributeValue::Null(true)),
            Some(AttributeValue::Bool(false)),
            Some(AttributeValue::Ss(vec!["a".into()])),
            Some(AttributeValue::L(vec![AttributeValue::L(vec![
                s("a"),
                number(1),
            ])])),
            Some(AttributeValue::M(HashMap::from([(
                "a".to_owned(),
                number(1),
            )]))),
            Some(AttributeValue::B(r#"[["a",1]]"#.as_bytes().to_vec().into())),
        ];
        for won in unreadable {
            let it = record(won.clone());
            let state = owner_state(Some(&it)).unwrap();
            assert!(state.recent_claims.is_empty(), "{won:?}");
            // The rest of the record reads as if won were absent.
            assert_eq!(state, owner_state(Some(&record(None))).unwrap(), "{won:?}");
            assert!(current_view(Some(&it)).is_ok(), "{won:?}");
            assert_eq!(
                lost_race(Some(&it)),
                CasOutcome::LostRace {
                    current: Some(state)
                },
                "{won:?}"
            );
        }
    }

    #[test]
    fn won_is_kept_on_a_tombstone_and_ignored_on_a_record_never_claimed() {
        let won = s(r#"[["a",1]]"#);
        let tomb = item(&[(GEN, number(1)), (OWNER, s("")), (WON, won.clone())]);
        let state = owner_state(Some(&tomb)).unwrap();
        assert!(state.exists && state.owner.is_none() && state.claim_id.is_none());
        assert_eq!(state.recent_claims, RecentClaims::from_wins([("a", 1)]));
        let CasOutcome::LostRace {
            current: Some(carried),
        } = lost_race(Some(&tomb))
        else {
            panic!("expected a lost race with the record");
        };
        assert_eq!(carried, state, "ALL_OLD carries the recent claims too");
        for never_claimed in [
            item(&[(WON, won.clone())]),
            item(&[(GEN, number(0)), (WON, won.clone())]),
        ] {
            assert_eq!(
                owner_state(Some(&never_claimed)).unwrap(),
                OwnerState::absent(),
                "{never_claimed:?}"
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
