//! The JSON bodies of the wire contract (SPEC §6), exactly as the server expects them.
//!
//! Requests are written from borrowed views so nothing is cloned per call. Every request
//! field is always sent (the server rejects unknown fields, not present-but-empty ones).
//! Responses are read leniently (unknown fields ignored) so a newer server can add fields.

use serde::{Deserialize, Serialize};
use unique_core::{ClaimInput, Key, Owner};

#[derive(Serialize)]
pub(crate) struct ClaimBody<'a> {
    project: &'a str,
    env: &'a str,
    uid: i64,
    owner: OwnerBody<'a>,
    claim_id: &'a str,
}

#[derive(Serialize)]
struct OwnerBody<'a> {
    region: &'a str,
    cluster: &'a str,
    endpoint: &'a str,
}

#[derive(Serialize)]
pub(crate) struct KeyBody<'a> {
    project: &'a str,
    env: &'a str,
    uid: i64,
}

#[derive(Serialize)]
pub(crate) struct ReleaseBody<'a> {
    project: &'a str,
    env: &'a str,
    uid: i64,
    #[serde(rename = "gen")]
    generation: i64,
}

impl<'a> ClaimBody<'a> {
    pub(crate) fn new(input: &'a ClaimInput) -> Self {
        let Owner {
            region,
            cluster,
            endpoint,
        } = &input.owner;
        Self {
            project: &input.key.project,
            env: &input.key.env,
            uid: input.key.uid,
            owner: OwnerBody {
                region,
                cluster,
                endpoint,
            },
            claim_id: &input.claim_id,
        }
    }
}

impl<'a> KeyBody<'a> {
    pub(crate) fn new(key: &'a Key) -> Self {
        Self {
            project: &key.project,
            env: &key.env,
            uid: key.uid,
        }
    }
}

impl<'a> ReleaseBody<'a> {
    pub(crate) fn new(key: &'a Key, generation: i64) -> Self {
        Self {
            project: &key.project,
            env: &key.env,
            uid: key.uid,
            generation,
        }
    }
}

/// `{"released": bool}`.
#[derive(Deserialize)]
pub(crate) struct ReleaseReply {
    pub(crate) released: bool,
}

/// `{"error": code, "message": text}`; both optional so a bare or odd error body still maps
/// by its status.
#[derive(Deserialize)]
pub(crate) struct ErrorReply {
    #[serde(default)]
    pub(crate) message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::new("game", "prod", 42)
    }

    #[test]
    fn claim_body_is_exact() {
        let input = ClaimInput {
            key: key(),
            owner: Owner::new("", "c1", "http://h:1/k?x=1"),
            claim_id: "cid".into(),
        };
        assert_eq!(
            serde_json::to_string(&ClaimBody::new(&input)).unwrap(),
            r#"{"project":"game","env":"prod","uid":42,"owner":{"region":"","cluster":"c1","endpoint":"http://h:1/k?x=1"},"claim_id":"cid"}"#
        );
    }

    #[test]
    fn key_and_release_bodies_are_exact() {
        let k = key();
        assert_eq!(
            serde_json::to_string(&KeyBody::new(&k)).unwrap(),
            r#"{"project":"game","env":"prod","uid":42}"#
        );
        assert_eq!(
            serde_json::to_string(&ReleaseBody::new(&k, 7)).unwrap(),
            r#"{"project":"game","env":"prod","uid":42,"gen":7}"#
        );
    }
}
