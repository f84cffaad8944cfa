//! The lease routes: room leases and node registrations of one project, over HTTP.
//!
//! The server keeps every project's rooms and nodes apart by storing each id as
//! `<project>#<id>` ([`scoped_id`]); a project never contains `#`, so two projects can
//! never name the same stored id, and answers carry the ids as the caller sent them.
//! Every id a caller sends is 1..=[`MAX_LEASE_ID_CHARS`] characters, so that the stored id
//! stays within the lease directory's 256-character limit for every project. Ttls are whole
//! milliseconds in `1..=`[`MAX_LEASE_TTL_MS`]; a remaining ttl in an answer is never more
//! than the store said, and a caller counts it from before it sent the request.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use unique_core::{Error, UserKey, ValidationLimits};

/// `POST`: grant, renew or report a room's lease.
pub const LEASE_ENSURE_PATH: &str = "/v1/lease/ensure";
/// `POST`: whether a node still holds a room under a token.
pub const LEASE_VERIFY_PATH: &str = "/v1/lease/verify";
/// `POST`: give a room's lease back, by token.
pub const LEASE_RELEASE_PATH: &str = "/v1/lease/release";
/// `POST`: a room's stored lease, expired or not, or none.
pub const LEASE_LOOKUP_PATH: &str = "/v1/lease/lookup";
/// `POST`: write or renew a node's address.
pub const NODE_REGISTER_PATH: &str = "/v1/nodes/register";
/// `POST`: a node's registration while it is valid.
pub const NODE_LOOKUP_PATH: &str = "/v1/nodes/lookup";
/// `POST`: remove a node's registration.
pub const NODE_DEREGISTER_PATH: &str = "/v1/nodes/deregister";

/// The longest ttl a lease or a registration may ask for over HTTP: one hour, in
/// milliseconds. A network lease is renewed every ttl/3; one that outlives its holder by
/// more than an hour holds its room hostage, so longer ones are refused (400).
pub const MAX_LEASE_TTL_MS: u64 = 60 * 60 * 1000;

/// The longest room or node id over HTTP, in characters (Unicode scalar values, as JSON
/// Schema's `maxLength` counts): the lease directory's 256-character id limit, less the
/// longest project (64 characters by default) and the `#` between them, so the same ids
/// are accepted in every project.
pub const MAX_LEASE_ID_CHARS: usize = 256 - 1 - 64;

/// One lease route of the wire contract; every one answers `POST` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseRoute {
    /// [`LEASE_ENSURE_PATH`].
    Ensure,
    /// [`LEASE_VERIFY_PATH`].
    Verify,
    /// [`LEASE_RELEASE_PATH`].
    Release,
    /// [`LEASE_LOOKUP_PATH`].
    Lookup,
    /// [`NODE_REGISTER_PATH`].
    RegisterNode,
    /// [`NODE_LOOKUP_PATH`].
    LookupNode,
    /// [`NODE_DEREGISTER_PATH`].
    DeregisterNode,
}

impl LeaseRoute {
    /// Every lease route, in the order of the enum.
    pub const ALL: [LeaseRoute; 7] = [
        Self::Ensure,
        Self::Verify,
        Self::Release,
        Self::Lookup,
        Self::RegisterNode,
        Self::LookupNode,
        Self::DeregisterNode,
    ];

    /// The lease route at `path` (exact match), if any.
    pub fn from_path(path: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|route| route.path() == path)
    }

    /// The route's path.
    pub const fn path(self) -> &'static str {
        match self {
            Self::Ensure => LEASE_ENSURE_PATH,
            Self::Verify => LEASE_VERIFY_PATH,
            Self::Release => LEASE_RELEASE_PATH,
            Self::Lookup => LEASE_LOOKUP_PATH,
            Self::RegisterNode => NODE_REGISTER_PATH,
            Self::LookupNode => NODE_LOOKUP_PATH,
            Self::DeregisterNode => NODE_DEREGISTER_PATH,
        }
    }

    /// A short name for logs and error messages (`lease_ensure`, `node_lookup`, …).
    pub const fn operation(self) -> &'static str {
        match self {
            Self::Ensure => "lease_ensure",
            Self::Verify => "lease_verify",
            Self::Release => "lease_release",
            Self::Lookup => "lease_lookup",
            Self::RegisterNode => "node_register",
            Self::LookupNode => "node_lookup",
            Self::DeregisterNode => "node_deregister",
        }
    }
}

/// `POST /v1/lease/ensure` body: `{"project","room","node","ttl_ms"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseEnsureBody<'a> {
    /// The project the room belongs to.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The room.
    #[serde(borrow)]
    pub room: Cow<'a, str>,
    /// The node asking for the room.
    #[serde(borrow)]
    pub node: Cow<'a, str>,
    /// How long the lease lasts from the store's now, `1..=`[`MAX_LEASE_TTL_MS`] (a JSON
    /// integer; zero, negative, fractional or larger is 400).
    #[serde(deserialize_with = "crate::integer::u64")]
    pub ttl_ms: u64,
}

/// `POST /v1/lease/verify` and `/v1/lease/release` body: `{"project","room","node","token"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseTokenBody<'a> {
    /// The project the room belongs to.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The room.
    #[serde(borrow)]
    pub room: Cow<'a, str>,
    /// The node that holds (or held) it.
    #[serde(borrow)]
    pub node: Cow<'a, str>,
    /// The holding's token.
    #[serde(borrow)]
    pub token: Cow<'a, str>,
}

/// `POST /v1/lease/lookup` body: `{"project","room"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRoomBody<'a> {
    /// The project the room belongs to.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The room.
    #[serde(borrow)]
    pub room: Cow<'a, str>,
}

/// `POST /v1/nodes/register` body: `{"project","node","addr","ttl_ms"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRegisterBody<'a> {
    /// The project the node serves.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The node.
    #[serde(borrow)]
    pub node: Cow<'a, str>,
    /// The node's private address (no whitespace).
    #[serde(borrow)]
    pub addr: Cow<'a, str>,
    /// How long the registration lasts from the store's now, `1..=`[`MAX_LEASE_TTL_MS`].
    #[serde(deserialize_with = "crate::integer::u64")]
    pub ttl_ms: u64,
}

/// `POST /v1/nodes/lookup` and `/v1/nodes/deregister` body: `{"project","node"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeKeyBody<'a> {
    /// The project the node serves.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The node.
    #[serde(borrow)]
    pub node: Cow<'a, str>,
}

/// A room's lease as the server reports it: the answer of `/v1/lease/ensure`, and the
/// `lease` of `/v1/lease/lookup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseAnswer {
    /// The room, as the caller named it.
    pub room: String,
    /// The node that holds (or last held) the room: the caller when it was granted or
    /// renewed the lease.
    pub node: String,
    /// The holding's token, kept across renewals.
    pub token: String,
    /// The holding's epoch (`>= 1`), kept across renewals and greater for every new
    /// holding of the room.
    pub epoch: u64,
    /// Whole milliseconds the store said the holding had left when it executed the call;
    /// zero once expired. A holder counts them from the instant before it sent the
    /// request, so the delays of the network and the server come off its time.
    pub ttl_left_ms: u64,
}

/// `POST /v1/lease/lookup` answer: `{"lease": {…} | null}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseLookupAnswer {
    /// The stored lease, expired or not; `null` when the room has none.
    pub lease: Option<LeaseAnswer>,
}

/// `POST /v1/lease/verify` answer: `{"valid": bool}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseVerifyAnswer {
    /// The node holds the room under that token, and the lease is valid on the store's clock.
    pub valid: bool,
}

/// A node's registration as the server reports it: the answer of `/v1/nodes/register`,
/// and the `node` of `/v1/nodes/lookup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAnswer {
    /// The node, as the caller named it.
    pub node: String,
    /// The node's address.
    pub addr: String,
    /// Whole milliseconds since the registration was written, when the server answered;
    /// `age_ms + ttl_left_ms` is the ttl it was written with.
    pub age_ms: u64,
    /// Whole milliseconds the registration had left when the server answered, rounded
    /// down (never more than the store said).
    pub ttl_left_ms: u64,
}

/// `POST /v1/nodes/lookup` answer: `{"node": {…} | null}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLookupAnswer {
    /// The node's registration while it is valid; `null` when it has none or it expired.
    pub node: Option<NodeAnswer>,
}

/// `POST /v1/nodes/deregister` answer: `{"removed": bool}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDeregisterAnswer {
    /// Always `true` in a 200: the node has no registration any more, whether or not it had
    /// one (the registry does not tell them apart, and deregistering is idempotent).
    pub removed: bool,
}

/// Checks the `project` of a lease request as the session routes check a key's project
/// (1..=`limits.tenant` characters, no `#`, no control characters): `InvalidParams` naming
/// `project` otherwise.
pub fn check_project(limits: &ValidationLimits, project: &str) -> Result<(), Error> {
    // The one project rule is the user key's; the env and uid here always pass, so an
    // error can only be the project's.
    limits.check_user(&UserKey::new(project, "lease", 1))
}

/// Checks a room or node id (`field` names it): 1..=[`MAX_LEASE_ID_CHARS`] characters.
/// Control characters are refused by the lease directory itself, with the same 400.
pub fn check_id(field: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{field} must not be empty")));
    }
    // At most as many characters as bytes: only a long id needs counting.
    if value.len() > MAX_LEASE_ID_CHARS && value.chars().count() > MAX_LEASE_ID_CHARS {
        return Err(Error::invalid(format!(
            "{field} must be at most {MAX_LEASE_ID_CHARS} characters"
        )));
    }
    Ok(())
}

/// Checks a `ttl_ms`: `1..=`[`MAX_LEASE_TTL_MS`]. Zero is refused rather than read as a
/// default, so a caller always says how long it asks for.
pub fn check_ttl_ms(ttl_ms: u64) -> Result<(), Error> {
    if ttl_ms == 0 {
        return Err(Error::invalid("ttl_ms must be at least 1"));
    }
    if ttl_ms > MAX_LEASE_TTL_MS {
        return Err(Error::invalid(format!(
            "ttl_ms must be at most {MAX_LEASE_TTL_MS} (one hour)"
        )));
    }
    Ok(())
}

/// The id the server stores for `id` of `project`: `<project>#<id>`.
pub fn scoped_id(project: &str, id: &str) -> String {
    let mut scoped = String::with_capacity(project.len() + 1 + id.len());
    scoped.push_str(project);
    scoped.push('#');
    scoped.push_str(id);
    scoped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    #[test]
    fn every_route_reads_back_from_its_path() {
        for route in LeaseRoute::ALL {
            assert_eq!(LeaseRoute::from_path(route.path()), Some(route));
            assert!(route.path().starts_with("/v1/"));
        }
        for (i, route) in LeaseRoute::ALL.into_iter().enumerate() {
            assert_eq!(route as usize, i, "ALL is in the order of the enum");
        }
        for other in ["/v1/lease", "/v1/lease/ensure/", "/v1/nodes", "/v1/claim"] {
            assert_eq!(LeaseRoute::from_path(other), None, "{other}");
        }
    }

    #[test]
    fn bodies_are_exact_and_round_trip() {
        let ensure = LeaseEnsureBody {
            project: "game".into(),
            room: "r1".into(),
            node: "n1".into(),
            ttl_ms: 15_000,
        };
        let json = serde_json::to_string(&ensure).unwrap();
        assert_eq!(
            json,
            r#"{"project":"game","room":"r1","node":"n1","ttl_ms":15000}"#
        );
        assert_eq!(parse::<LeaseEnsureBody>(json.as_bytes()).unwrap(), ensure);
        // An integral float is the integer (JSON Schema's reading of `integer`).
        let float = br#"{"project":"game","room":"r1","node":"n1","ttl_ms":1.5e4}"#;
        assert_eq!(parse::<LeaseEnsureBody>(float).unwrap(), ensure);
        let register = NodeRegisterBody {
            project: "game".into(),
            node: "n1".into(),
            addr: "10.0.0.7:7000".into(),
            ttl_ms: 1,
        };
        let json = serde_json::to_string(&register).unwrap();
        assert_eq!(
            json,
            r#"{"project":"game","node":"n1","addr":"10.0.0.7:7000","ttl_ms":1}"#
        );
        assert_eq!(
            parse::<NodeRegisterBody>(json.as_bytes()).unwrap(),
            register
        );
        let lookup = LeaseLookupAnswer { lease: None };
        assert_eq!(serde_json::to_string(&lookup).unwrap(), r#"{"lease":null}"#);
        let node = NodeLookupAnswer { node: None };
        assert_eq!(serde_json::to_string(&node).unwrap(), r#"{"node":null}"#);
        let answer = LeaseAnswer {
            room: "r".into(),
            node: "n".into(),
            token: "t".into(),
            epoch: 3,
            ttl_left_ms: 10,
        };
        assert_eq!(
            serde_json::to_string(&answer).unwrap(),
            r#"{"room":"r","node":"n","token":"t","epoch":3,"ttl_left_ms":10}"#
        );
    }

    #[test]
    fn requests_refuse_what_the_session_routes_refuse() {
        for (body, needle) in [
            (
                &br#"{"project":"p","room":"r","node":"n","ttl_ms":1,"x":1}"#[..],
                "unknown field `x`",
            ),
            (
                br#"{"project":"p","room":"r","node":"n","ttl_ms":-1}"#,
                "ttl_ms: invalid value",
            ),
            (
                br#"{"project":"p","room":"r","node":"n","ttl_ms":1.5}"#,
                "ttl_ms: invalid type",
            ),
            (
                br#"{"project":"p","room":"r","node":"n","ttl_ms":-2.0}"#,
                "ttl_ms: invalid value",
            ),
            (
                br#"{"project":"p","room":"r","node":"n","ttl_ms":"1"}"#,
                "ttl_ms: invalid type",
            ),
            (
                br#"{"project":"p","room":"r","node":"n"}"#,
                "missing field `ttl_ms`",
            ),
            (
                br#"{"project":"p","room":5,"node":"n","ttl_ms":1}"#,
                "room: invalid type",
            ),
        ] {
            let e = parse::<LeaseEnsureBody>(body).unwrap_err();
            assert!(
                e.is_invalid_params() && e.to_string().contains(needle),
                "{}: {e}",
                String::from_utf8_lossy(body)
            );
        }
        let e = parse::<NodeKeyBody>(br#"{"project":"p","node":"n","room":"r"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `room`"), "{e}");
    }

    #[test]
    fn node_answers_are_exact() {
        let answer = NodeLookupAnswer {
            node: Some(NodeAnswer {
                node: "n1".into(),
                addr: "10.0.0.7:7000".into(),
                age_ms: 4_000,
                ttl_left_ms: 11_000,
            }),
        };
        let json = serde_json::to_string(&answer).unwrap();
        assert_eq!(
            json,
            r#"{"node":{"node":"n1","addr":"10.0.0.7:7000","age_ms":4000,"ttl_left_ms":11000}}"#
        );
        assert_eq!(
            serde_json::from_str::<NodeLookupAnswer>(&json).unwrap(),
            answer
        );
        assert_eq!(
            serde_json::to_string(&NodeDeregisterAnswer { removed: true }).unwrap(),
            r#"{"removed":true}"#
        );
    }

    #[test]
    fn answers_are_read_leniently() {
        let answer: LeaseVerifyAnswer =
            serde_json::from_str(r#"{"valid":true,"later":1}"#).unwrap();
        assert!(answer.valid);
    }

    #[test]
    fn checks() {
        let limits = ValidationLimits::default();
        assert!(check_project(&limits, "game").is_ok());
        for bad in ["", "a#b", "tab\t", &"p".repeat(65)] {
            let e = check_project(&limits, bad).unwrap_err();
            assert!(e.to_string().contains("project"), "{bad:?}: {e}");
        }
        assert!(check_id("room", &"r".repeat(MAX_LEASE_ID_CHARS)).is_ok());
        assert_eq!(
            check_id("room", &"r".repeat(MAX_LEASE_ID_CHARS + 1))
                .unwrap_err()
                .to_string(),
            "invalid params: room must be at most 191 characters"
        );
        // Characters, not bytes: 191 four-byte characters pass, 192 do not.
        assert!(check_id("room", &"\u{1F600}".repeat(MAX_LEASE_ID_CHARS)).is_ok());
        assert!(
            check_id("room", &"é".repeat(MAX_LEASE_ID_CHARS + 1))
                .unwrap_err()
                .is_invalid_params()
        );
        assert!(check_id("node", "").unwrap_err().is_invalid_params());
        assert!(check_ttl_ms(1).is_ok());
        assert!(check_ttl_ms(MAX_LEASE_TTL_MS).is_ok());
        assert!(check_ttl_ms(0).unwrap_err().is_invalid_params());
        assert!(
            check_ttl_ms(MAX_LEASE_TTL_MS + 1)
                .unwrap_err()
                .is_invalid_params()
        );
        // The longest project and the longest id still fit the directory's 256 characters.
        let longest = scoped_id(&"p".repeat(64), &"\u{1F600}".repeat(MAX_LEASE_ID_CHARS));
        assert_eq!(longest.chars().count(), 256);
        assert_eq!(scoped_id("game", "a#b"), "game#a#b");
    }
}
