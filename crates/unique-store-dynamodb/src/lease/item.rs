//! The table's items: their keys and attribute names, and a lease item decoded into
//! what a conditional write expects to find.

use std::time::Duration;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use unique_lease::{LeaseError, StoredLease};

use super::expiry::floor_ms;
use crate::codec::{Item, PK};

/// The epoch counter's partition key.
pub(super) const EPOCH_KEY: &str = "epoch";
/// A lease item's partition key prefix (`lease#<room_id>`).
const LEASE_PREFIX: &str = "lease#";
/// A node item's partition key prefix (`node#<node_id>`).
const NODE_PREFIX: &str = "node#";

// Attribute names. Every expression names them through `#name` placeholders, so
// DynamoDB's reserved words (`TOKEN`, `TTL`, …) never matter.
pub(super) const NODE: &str = "node";
pub(super) const TOKEN: &str = "token";
/// On a lease item the holding's epoch; on the counter item the last epoch issued.
pub(super) const EPOCH: &str = "epoch";
pub(super) const TTL_MS: &str = "ttl_ms";
pub(super) const RVN: &str = "rvn";
pub(super) const ADDR: &str = "addr";
pub(super) const UPDATED_MS: &str = "updated_ms";
pub(super) const EXPIRES_MS: &str = "expires_ms";
/// What a conditional lease write expects to find.
#[derive(Debug, Clone, Copy)]
pub(super) enum Expect<'a> {
    /// No item: the room was never held.
    Absent,
    /// The item at this version.
    Version(&'a str),
}

impl Expect<'_> {
    pub(super) fn condition(self, request: UpdateItemFluentBuilder) -> UpdateItemFluentBuilder {
        match self {
            Self::Absent => request
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", PK),
            Self::Version(rvn) => request
                .condition_expression("#rvn = :seen")
                .expression_attribute_names("#rvn", RVN)
                .expression_attribute_values(":seen", AttributeValue::S(rvn.to_owned())),
        }
    }
}

/// A lease item as read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Record {
    /// No item.
    Absent,
    /// A released room's tombstone at version `rvn`.
    Free { rvn: String },
    /// A holding, valid or not.
    Held(Holding),
}

#[derive(Debug, PartialEq, Eq)]
pub(super) struct Holding {
    pub(super) node_id: String,
    pub(super) lease_token: String,
    pub(super) epoch: u64,
    pub(super) ttl_ms: u64,
    pub(super) rvn: String,
}

impl Holding {
    /// What is left after this instance has seen the version for `seen_for`.
    pub(super) fn left(&self, seen_for: Duration) -> Duration {
        Duration::from_millis(self.ttl_ms).saturating_sub(seen_for)
    }

    pub(super) fn report(self, left: Duration) -> StoredLease {
        StoredLease {
            node_id: self.node_id,
            lease_token: self.lease_token,
            epoch: self.epoch,
            ttl_left_ms: floor_ms(left),
        }
    }
}

/// Decodes a lease item. A record this crate did not write is `Corrupt`: no lease is
/// granted over it.
pub(super) fn decode(item: Option<&Item>) -> Result<Record, LeaseError> {
    let Some(item) = item else {
        return Ok(Record::Absent);
    };
    let what = "lease";
    let rvn = string(item, RVN, what)?
        .ok_or_else(|| corrupt(what, "the record version rvn is missing"))?
        .to_owned();
    let node = string(item, NODE, what)?;
    let token = string(item, TOKEN, what)?;
    let ttl_ms = number(item, TTL_MS, what)?;
    match (node, token, ttl_ms) {
        (None, None, None) => Ok(Record::Free { rvn }),
        (Some(node), Some(token), Some(ttl_ms)) if !node.is_empty() && !token.is_empty() => {
            let epoch =
                number(item, EPOCH, what)?.ok_or_else(|| corrupt(what, "the epoch is missing"))?;
            Ok(Record::Held(Holding {
                node_id: node.to_owned(),
                lease_token: token.to_owned(),
                epoch,
                ttl_ms,
                rvn,
            }))
        }
        _ => Err(corrupt(
            what,
            "node, token and ttl_ms must be all present (and non-empty) or all absent",
        )),
    }
}

/// A string attribute; `None` when absent, `Corrupt` when of another type.
pub(super) fn string<'a>(
    item: &'a Item,
    name: &str,
    what: &str,
) -> Result<Option<&'a str>, LeaseError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(s)) => Ok(Some(s)),
        Some(_) => Err(corrupt(what, &format!("{name} is not a string"))),
    }
}

/// A whole-number attribute; `None` when absent, `Corrupt` when of another type or not a
/// whole number that fits 64 bits.
pub(super) fn number(item: &Item, name: &str, what: &str) -> Result<Option<u64>, LeaseError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(n)) => n
            .parse::<u64>()
            .map(Some)
            .map_err(|_| corrupt(what, &format!("{name} is not a whole number"))),
        Some(_) => Err(corrupt(what, &format!("{name} is not a number"))),
    }
}

pub(super) fn corrupt(what: &str, why: &str) -> LeaseError {
    LeaseError::Corrupt(format!("dynamodb {what} record: {why}"))
}

pub(super) fn lease_key(room_id: &str) -> String {
    format!("{LEASE_PREFIX}{room_id}")
}

pub(super) fn node_key(node_id: &str) -> String {
    format!("{NODE_PREFIX}{node_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(attributes: &[(&str, AttributeValue)]) -> Item {
        attributes
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .chain([(PK.to_owned(), AttributeValue::S("lease#r".into()))])
            .collect()
    }

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.to_owned())
    }

    fn held() -> Vec<(&'static str, AttributeValue)> {
        vec![
            (NODE, s("a")),
            (TOKEN, s("t")),
            (EPOCH, n("7")),
            (TTL_MS, n("30000")),
            (RVN, s("v1")),
        ]
    }

    #[test]
    fn decodes_absent_tombstone_and_holding() {
        assert_eq!(decode(None).unwrap(), Record::Absent);
        let tombstone = item(&[(EPOCH, n("7")), (RVN, s("v2"))]);
        assert_eq!(
            decode(Some(&tombstone)).unwrap(),
            Record::Free { rvn: "v2".into() }
        );
        assert_eq!(
            decode(Some(&item(&held()))).unwrap(),
            Record::Held(Holding {
                node_id: "a".into(),
                lease_token: "t".into(),
                epoch: 7,
                ttl_ms: 30_000,
                rvn: "v1".into(),
            })
        );
    }

    #[test]
    fn records_this_crate_did_not_write_are_corrupt() {
        let without = |name: &str| {
            let mut attributes = held();
            attributes.retain(|(k, _)| *k != name);
            item(&attributes)
        };
        let replaced = |name: &str, value: AttributeValue| {
            let mut attributes = held();
            for (k, v) in &mut attributes {
                if *k == name {
                    *v = value.clone();
                }
            }
            item(&attributes)
        };
        let cases = [
            without(RVN),
            without(NODE),
            without(TOKEN),
            without(TTL_MS),
            without(EPOCH),
            replaced(NODE, s("")),
            replaced(TOKEN, n("1")),
            replaced(EPOCH, n("-1")),
            replaced(EPOCH, n("1.5")),
            replaced(TTL_MS, s("30000")),
            replaced(RVN, n("1")),
            item(&[]),
        ];
        for case in cases {
            let err = decode(Some(&case)).unwrap_err();
            assert!(err.is_corrupt(), "{case:?}: {err}");
            assert!(
                err.to_string()
                    .starts_with("corrupt record: dynamodb lease record: ")
            );
        }
    }
}
