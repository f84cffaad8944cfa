//! The JSON bodies of the wire contract (SPEC §6).
//!
//! Requests reject unknown fields at every level (a typo must not silently drop
//! data); stored owner JSON, by contrast, ignores them (see `unique_core::Owner`).

use serde::{Deserialize, Serialize};
use unique_core::{ClaimInput, Error, Key, Owner};

/// `POST /v1/claim` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimBody {
    project: String,
    env: String,
    uid: i64,
    owner: WireOwner,
    claim_id: String,
}

/// `owner` inside a claim: region and cluster may be omitted, endpoint is required.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireOwner {
    #[serde(default)]
    region: String,
    #[serde(default)]
    cluster: String,
    endpoint: String,
}

impl From<ClaimBody> for ClaimInput {
    fn from(b: ClaimBody) -> Self {
        ClaimInput {
            key: Key {
                project: b.project,
                env: b.env,
                uid: b.uid,
            },
            owner: Owner {
                region: b.owner.region,
                cluster: b.owner.cluster,
                endpoint: b.owner.endpoint,
            },
            claim_id: b.claim_id,
        }
    }
}

/// `POST /v1/current` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyBody {
    project: String,
    env: String,
    uid: i64,
}

impl From<KeyBody> for Key {
    fn from(b: KeyBody) -> Self {
        Key {
            project: b.project,
            env: b.env,
            uid: b.uid,
        }
    }
}

/// `POST /v1/release` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReleaseBody {
    project: String,
    env: String,
    uid: i64,
    #[serde(rename = "gen")]
    pub(crate) generation: i64,
}

impl ReleaseBody {
    pub(crate) fn key(self) -> (Key, i64) {
        (
            Key {
                project: self.project,
                env: self.env,
                uid: self.uid,
            },
            self.generation,
        )
    }
}

/// `POST /v1/release` answer.
#[derive(Debug, Serialize)]
pub(crate) struct ReleaseAnswer {
    pub(crate) released: bool,
}

/// Every error answer: `{"error": code, "message": text}`.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorAnswer<'a> {
    pub(crate) error: &'a str,
    pub(crate) message: &'a str,
}

/// Parses a request body, naming the offending field in the error
/// (`owner.endpoint: invalid type: …`).
///
/// Valid bodies take the plain serde_json path. Tracking the field path costs an
/// allocation per key and about a quarter of a claim's CPU on the server, so it
/// runs only to explain a body that already failed (same input, same deserializer,
/// so it fails the same way).
pub(crate) fn parse<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Result<T, Error> {
    // One UTF-8 check of the whole body, then `from_str`, which trusts it: cheaper
    // than `from_slice` checking each of a claim's fourteen strings on its own.
    let parsed = match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text).ok(),
        Err(_) => None,
    };
    match parsed {
        Some(value) => Ok(value),
        None => parse_tracking_path(body),
    }
}

fn parse_tracking_path<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Result<T, Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            Error::invalid(format!("malformed json: {inner}"))
        } else if path == "." {
            // Root-level problems (a missing field) already name the field.
            Error::invalid(inner.to_string())
        } else {
            Error::invalid(format!("{path}: {inner}"))
        }
    })?;
    de.end()
        .map_err(|e| Error::invalid(format!("malformed json: {e}")))?;
    Ok(value)
}
