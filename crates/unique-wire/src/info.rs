//! `GET /v1/info`: what a server is and what it agrees to, for a client to check at start.
//!
//! The answer carries no secret: the kick signing keys appear by their ids only (a key id is
//! an HMAC of a fixed label under the key, see `unique-kick-signature`), and callers' tokens
//! not at all. A newer server may add fields; clients ignore fields they do not know (the
//! shapes here do not refuse unknown fields).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `GET` or `HEAD`: the server's version, kick signing, caller authentication, limits and
/// features ([`InfoAnswer`]). Open like `/healthz`: no token needed.
pub const INFO_PATH: &str = "/v1/info";

/// The answer of [`INFO_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfoAnswer {
    /// The server's version (its crate's, e.g. `0.1.0`).
    pub version: String,
    /// Whether callers must present a bearer token.
    pub auth: InfoAuth,
    /// How the server's kicks are signed.
    pub kicks: InfoKicks,
    /// What the server serves.
    pub features: InfoFeatures,
    /// The limits a client must stay within.
    pub limits: InfoLimits,
}

/// Caller authentication, in an [`InfoAnswer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfoAuth {
    /// `true`: every `/v1/*` call but this one needs `Authorization: Bearer <token>`
    /// (`unique-server --auth-tokens`); `false`: every caller is trusted.
    pub required: bool,
}

/// Kick signing, in an [`InfoAnswer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct InfoKicks {
    /// `true`: every kick carries a `Unique-Signature` header made with the key
    /// `signing_key_id` names (`unique-server --kick-signing-keys`); a receiver must verify
    /// with a key file holding that key. `false`: kicks are unsigned.
    pub signed: bool,
    /// The id of the key kicks are signed with now; `None` when unsigned.
    pub signing_key_id: Option<String>,
    /// The ids of every key of the server's key file, signing key first; empty when
    /// unsigned. Ids only, never keys.
    pub key_ids: Vec<String>,
}

/// What a server serves, in an [`InfoAnswer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfoFeatures {
    /// The session routes (`/v1/claim`, `/v1/current`, …): `false` on a lease-only server
    /// (`unique-server --no-sessions`), where they answer 501 `not_implemented`.
    pub sessions: bool,
    /// The lease routes (`/v1/lease/*`, `/v1/nodes/*`): `false` with `--no-leases` or a store
    /// without a lease directory, where they answer 501 `not_implemented`.
    pub leases: bool,
    /// The kind of store holding the records (`fjall`, `sqlite`, `memory`, `postgres`,
    /// `dynamodb`), when the server says; `None` for a service that was not told.
    pub store: Option<String>,
    /// Push kicks: the kick stream (`GET /v1/nodes/{node}/kicks`) and its ack route, so an
    /// owner may name a `node` instead of an endpoint. `false` (or absent: an older server)
    /// when the server does not serve them.
    #[serde(default)]
    pub push_kicks: bool,
}

/// Limits a client must stay within, in an [`InfoAnswer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfoLimits {
    /// Largest request body, in bytes (413 above).
    pub max_request_body_bytes: u64,
    /// Most keys of one `/v1/current/batch`.
    pub max_batch_keys: u64,
    /// Largest page of `/v1/sessions`.
    pub max_sessions_page: u64,
    /// Most online sessions (device slots) one user may hold; `None`: no limit.
    pub max_slots_per_user: Option<u64>,
    /// The session limit `N` of every project not in
    /// [`project_session_limits`](Self::project_session_limits): the most pooled sessions one
    /// user may hold, and the default of a pooled claim's `limit`
    /// (`docs/design.md#pooled-sessions`). `None` from a server older than pooled sessions.
    #[serde(default)]
    pub session_limit: Option<u64>,
    /// The projects whose session limit differs from [`session_limit`](Self::session_limit),
    /// each with its own (`unique-server --session-limit PROJECT=N`); empty when none.
    #[serde(default)]
    pub project_session_limits: BTreeMap<String, u64>,
    /// Max characters of `project`, `env`, `slot`, `owner.region` and `owner.cluster`.
    pub max_name_chars: u64,
    /// Max characters of `claim_id`.
    pub max_claim_id_chars: u64,
    /// Max characters of `owner.endpoint`.
    pub max_endpoint_chars: u64,
    /// Longest ttl of a lease or a registration, in milliseconds.
    pub max_lease_ttl_ms: u64,
    /// Max characters of a room or node id.
    pub max_lease_id_chars: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_back_and_ignores_fields_it_does_not_know() {
        let answer = InfoAnswer {
            version: "0.1.0".into(),
            auth: InfoAuth { required: true },
            kicks: InfoKicks {
                signed: true,
                signing_key_id: Some("0123456789abcdef".into()),
                key_ids: vec!["0123456789abcdef".into()],
            },
            features: InfoFeatures {
                sessions: true,
                leases: false,
                store: Some("fjall".into()),
                push_kicks: true,
            },
            limits: InfoLimits {
                max_request_body_bytes: 65_536,
                max_batch_keys: 256,
                max_sessions_page: 1000,
                max_slots_per_user: None,
                session_limit: Some(5),
                project_session_limits: BTreeMap::from([("chat".to_owned(), 2)]),
                max_name_chars: 64,
                max_claim_id_chars: 128,
                max_endpoint_chars: 2048,
                max_lease_ttl_ms: 3_600_000,
                max_lease_id_chars: 191,
            },
        };
        let mut json = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            json["limits"]["max_slots_per_user"],
            serde_json::Value::Null
        );
        assert_eq!(
            json["limits"]["project_session_limits"],
            serde_json::json!({"chat": 2})
        );
        json["later"] = serde_json::json!({"field": 1});
        json["kicks"]["algorithm"] = serde_json::json!("hmac-sha256");
        let back: InfoAnswer = serde_json::from_value(json).unwrap();
        assert_eq!(back, answer);
        // A server older than pooled sessions says nothing of session limits.
        let limits = json_without_session_limits(&answer);
        let older: InfoAnswer = serde_json::from_value(limits).unwrap();
        assert_eq!(older.limits.session_limit, None);
        assert!(older.limits.project_session_limits.is_empty());
    }

    fn json_without_session_limits(answer: &InfoAnswer) -> serde_json::Value {
        let mut json = serde_json::to_value(answer).unwrap();
        let limits = json["limits"].as_object_mut().unwrap();
        limits.remove("session_limit");
        limits.remove("project_session_limits");
        json
    }
}
