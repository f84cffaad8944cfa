//! The error body every failed request gets, and its codes.

use http::StatusCode;
use serde::{Deserialize, Serialize};
use unique_core::{Error, PooledSession};

/// The `error` of an [`ErrorBody`]; each code goes with one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// 400: malformed JSON, a missing, unknown or mistyped field, or an invalid value.
    InvalidParams,
    /// 429: the store throttled the request; retry later.
    Throttled,
    /// 503: the store or a peer could not answer; retry later.
    Unavailable,
    /// 404: no route at this path.
    NotFound,
    /// 405: the route does not answer this method.
    MethodNotAllowed,
    /// 413: the body is over the limit.
    TooLarge,
    /// 401: no valid credentials (a missing or unknown bearer token, a bad signature).
    Unauthenticated,
    /// 403: the credentials do not cover what the request acts on.
    Forbidden,
    /// 409: a claim whose claim_id won an earlier gen and no longer holds the key (another
    /// login replaced it, or it logged out, while the claim was in flight; C9). Nothing was
    /// kicked or written; the body adds `gen` and `current_gen`. Not worth retrying.
    Superseded,
    /// 500: a lease route found a stored record the lease directory did not write; no lease
    /// was granted over it.
    Corrupt,
    /// 500: the lease store refused the request for a reason retrying will not fix
    /// (permissions, an exhausted epoch counter).
    Internal,
    /// 501: the lease routes on a server whose store has no lease directory, or the session
    /// routes on a lease-only server (`unique-server --no-sessions`).
    NotImplemented,
    /// 409: a claim for a slot the user has no online session in, while the user already
    /// holds the most online sessions the server allows (`--max-slots-per-user`). Nothing
    /// was kicked or written. Not worth retrying until one of the user's sessions ends.
    TooManySlots,
    /// 409: a pooled claim with the `deny-new` policy found all `limit` places of the user
    /// online. Nothing was kicked or written; the body adds `limit` and `sessions` (each
    /// `{"slot","gen","since"}`, never an owner). Not worth retrying until a session ends;
    /// never a superseded login.
    LimitReached,
}

impl ErrorCode {
    /// The code as it appears on the wire (`invalid_params`, `too_large`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidParams => "invalid_params",
            Self::Throttled => "throttled",
            Self::Unavailable => "unavailable",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::TooLarge => "too_large",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
            Self::Superseded => "superseded",
            Self::Corrupt => "corrupt",
            Self::Internal => "internal",
            Self::NotImplemented => "not_implemented",
            Self::TooManySlots => "too_many_slots",
            Self::LimitReached => "limit_reached",
        }
    }

    /// The HTTP status that carries this code.
    pub const fn status(self) -> StatusCode {
        match self {
            Self::InvalidParams => StatusCode::BAD_REQUEST,
            Self::Throttled => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::Superseded | Self::TooManySlots | Self::LimitReached => StatusCode::CONFLICT,
            Self::Corrupt | Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::NotImplemented => StatusCode::NOT_IMPLEMENTED,
        }
    }
}

/// The `message` of a `superseded` answer.
pub const SUPERSEDED_MESSAGE: &str =
    "this claim_id won an earlier gen and no longer holds the key (replaced or logged out)";

/// The `message` of a `too_many_slots` answer.
pub const TOO_MANY_SLOTS_MESSAGE: &str =
    "the user already holds the most online sessions allowed; end one before a login in a new slot";

/// The `message` of a `limit_reached` answer.
pub const LIMIT_REACHED_MESSAGE: &str =
    "the user already holds the most sessions the pool allows; end one before a new login";

/// One online session of a full pool in a `limit_reached` answer: `{"slot","gen","since"}`
/// (`since` is `null` when the record does not say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PooledSessionEntry {
    /// The place (`#0`, `#1`, …).
    pub slot: String,
    /// The session's gen.
    #[serde(rename = "gen")]
    pub generation: i64,
    /// Its login time, milliseconds since the Unix epoch.
    pub since: Option<u64>,
}

mirror!(PooledSessionEntry <=> PooledSession { slot, generation, since });

/// Every error answer: `{"error": code, "message": text}`; a `superseded` one adds
/// `"gen"` and `"current_gen"`, a `too_many_slots` one `"limit"`, a `limit_reached` one
/// `"limit"` and `"sessions"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ErrorBody<'a> {
    /// What kind of failure; also decides the status.
    pub error: ErrorCode,
    /// A lower-case fragment for people; never a secret or a URL's query string.
    pub message: &'a str,
    /// `superseded` only: the gen the claim_id won (`gen` on the wire); omitted otherwise.
    #[serde(rename = "gen", skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// `superseded` only: the key's gen now (`current_gen` on the wire); omitted otherwise.
    #[serde(rename = "current_gen", skip_serializing_if = "Option::is_none")]
    pub current_generation: Option<i64>,
    /// `too_many_slots` and `limit_reached` only: the most online sessions one user may
    /// hold (in the pool); omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// `limit_reached` only: the pool's online sessions; omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<PooledSessions<'a>>,
}

/// The `sessions` of a `limit_reached` body, written as [`PooledSessionEntry`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PooledSessions<'a>(pub &'a [PooledSession]);

impl Serialize for PooledSessions<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(
            self.0
                .iter()
                .map(|session| PooledSessionEntry::from(session.clone())),
        )
    }
}

impl<'a> ErrorBody<'a> {
    /// The body with `code` and `message` (and no gens).
    pub const fn new(error: ErrorCode, message: &'a str) -> Self {
        Self {
            error,
            message,
            generation: None,
            current_generation: None,
            limit: None,
            sessions: None,
        }
    }

    /// The 409 `superseded` body: the claim_id won `generation`, the key is at `current`.
    pub const fn superseded(generation: i64, current: i64) -> Self {
        Self {
            error: ErrorCode::Superseded,
            message: SUPERSEDED_MESSAGE,
            generation: Some(generation),
            current_generation: Some(current),
            limit: None,
            sessions: None,
        }
    }

    /// The 409 `too_many_slots` body: the user already holds `limit` online sessions.
    pub const fn too_many_slots(limit: usize) -> Self {
        Self {
            error: ErrorCode::TooManySlots,
            message: TOO_MANY_SLOTS_MESSAGE,
            generation: None,
            current_generation: None,
            limit: Some(limit),
            sessions: None,
        }
    }

    /// The 409 `limit_reached` body: the pool of `limit` places is full with `sessions`.
    pub const fn limit_reached(limit: usize, sessions: &'a [PooledSession]) -> Self {
        Self {
            error: ErrorCode::LimitReached,
            message: LIMIT_REACHED_MESSAGE,
            generation: None,
            current_generation: None,
            limit: Some(limit),
            sessions: Some(PooledSessions(sessions)),
        }
    }

    /// The answer to a request the arbiter failed with `error`: `InvalidParams` → 400 with its
    /// reason, `Throttled` → 429, `Superseded` → 409 with both gens, `TooManySlots` → 409
    /// `too_many_slots`, `Unauthenticated` → 401 and `Forbidden` → 403 with their reasons,
    /// anything else → 503 (with its reason when it has one).
    pub fn from_error(error: &'a Error) -> Self {
        match error {
            Error::InvalidParams(reason) => Self::new(ErrorCode::InvalidParams, reason),
            Error::Throttled => Self::new(ErrorCode::Throttled, "throttled by the store"),
            Error::Unavailable { reason, .. } => Self::new(ErrorCode::Unavailable, reason),
            Error::Superseded {
                generation,
                current,
            } => Self::superseded(*generation, *current),
            Error::TooManySlots { limit } => Self::too_many_slots(*limit),
            Error::LimitReached { limit, sessions } => Self::limit_reached(*limit, sessions),
            Error::Unauthenticated(reason) => Self::new(ErrorCode::Unauthenticated, reason),
            Error::Forbidden(reason) => Self::new(ErrorCode::Forbidden, reason),
            _ => Self::new(ErrorCode::Unavailable, "unavailable"),
        }
    }

    /// The status this body is sent with.
    pub const fn status(&self) -> StatusCode {
        self.error.status()
    }
}

/// The `message` of an error answer, when `body` is a JSON object with a non-empty string
/// `message`. Read leniently: any other field, and a missing or unknown `error`, is ignored, so
/// a bare or odd error body still maps by its status.
pub fn error_message(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Lenient {
        #[serde(default)]
        message: Option<String>,
    }
    serde_json::from_slice::<Lenient>(body)
        .ok()?
        .message
        .filter(|m| !m.is_empty())
}

/// The `error` of an error answer, when `body` is a JSON object whose `error` is a known code.
/// Read leniently, as [`error_message`]: any other field is ignored.
pub fn error_code(body: &[u8]) -> Option<ErrorCode> {
    #[derive(Deserialize)]
    struct Lenient {
        #[serde(default)]
        error: Option<serde_json::Value>,
    }
    let code = serde_json::from_slice::<Lenient>(body).ok()?.error?;
    serde_json::from_value(code).ok()
}

/// The two gens of a 409 `superseded` answer, `(gen, current_gen)`: the gen the claim_id
/// won and the key's gen now. `None` unless `body` is a JSON object whose `error` is
/// `superseded` and whose `gen` and `current_gen` are integers with
/// `1 <= gen <= current_gen` (a logout keeps the gen, so the two may be equal). Read
/// leniently otherwise: any other field is ignored.
pub fn superseded_generations(body: &[u8]) -> Option<(i64, i64)> {
    #[derive(Deserialize)]
    struct Lenient {
        #[serde(default)]
        error: Option<String>,
        #[serde(default, rename = "gen")]
        generation: Option<i64>,
        #[serde(default)]
        current_gen: Option<i64>,
    }
    let read = serde_json::from_slice::<Lenient>(body).ok()?;
    if read.error.as_deref() != Some(ErrorCode::Superseded.as_str()) {
        return None;
    }
    match (read.generation, read.current_gen) {
        (Some(won), Some(current)) if (1..=current).contains(&won) => Some((won, current)),
        _ => None,
    }
}

/// The `limit` of a 409 `too_many_slots` answer: `None` unless `body` is a JSON object whose
/// `error` is `too_many_slots` and whose `limit` is a non-negative integer. Read leniently
/// otherwise: any other field is ignored.
pub fn too_many_slots_limit(body: &[u8]) -> Option<usize> {
    #[derive(Deserialize)]
    struct Lenient {
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        limit: Option<usize>,
    }
    let read = serde_json::from_slice::<Lenient>(body).ok()?;
    if read.error.as_deref() != Some(ErrorCode::TooManySlots.as_str()) {
        return None;
    }
    read.limit
}

/// The `limit` and `sessions` of a 409 `limit_reached` answer: `None` unless `body` is a JSON
/// object whose `error` is `limit_reached` and whose `limit` is a non-negative integer;
/// `sessions` missing or unreadable reads as none. Read leniently otherwise.
pub fn limit_reached(body: &[u8]) -> Option<(usize, Vec<PooledSession>)> {
    #[derive(Deserialize)]
    struct Lenient {
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        limit: Option<usize>,
        #[serde(default)]
        sessions: Option<serde_json::Value>,
    }
    let read = serde_json::from_slice::<Lenient>(body).ok()?;
    if read.error.as_deref() != Some(ErrorCode::LimitReached.as_str()) {
        return None;
    }
    let sessions = read
        .sessions
        .and_then(|v| serde_json::from_value::<Vec<PooledSessionEntry>>(v).ok())
        .unwrap_or_default();
    Some((read.limit?, sessions.into_iter().map(Into::into).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODES: [ErrorCode; 14] = [
        ErrorCode::InvalidParams,
        ErrorCode::Throttled,
        ErrorCode::Unavailable,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::TooLarge,
        ErrorCode::Unauthenticated,
        ErrorCode::Forbidden,
        ErrorCode::Superseded,
        ErrorCode::Corrupt,
        ErrorCode::Internal,
        ErrorCode::NotImplemented,
        ErrorCode::TooManySlots,
        ErrorCode::LimitReached,
    ];

    #[test]
    fn codes_serialize_as_their_wire_names() {
        for code in CODES {
            assert_eq!(
                serde_json::to_string(&code).unwrap(),
                format!("\"{}\"", code.as_str())
            );
        }
        assert_eq!(
            serde_json::to_string(&ErrorBody::new(ErrorCode::TooLarge, "big")).unwrap(),
            r#"{"error":"too_large","message":"big"}"#
        );
    }

    #[test]
    fn statuses() {
        let statuses: Vec<u16> = CODES.iter().map(|c| c.status().as_u16()).collect();
        assert_eq!(
            statuses,
            [
                400, 429, 503, 404, 405, 413, 401, 403, 409, 500, 500, 501, 409, 409
            ]
        );
    }

    #[test]
    fn core_errors_map_to_code_and_message() {
        let invalid = Error::invalid("uid must be >= 1");
        assert_eq!(
            ErrorBody::from_error(&invalid),
            ErrorBody::new(ErrorCode::InvalidParams, "uid must be >= 1")
        );
        assert_eq!(
            ErrorBody::from_error(&Error::Throttled),
            ErrorBody::new(ErrorCode::Throttled, "throttled by the store")
        );
        let down = Error::unavailable("store read failed");
        assert_eq!(
            ErrorBody::from_error(&down),
            ErrorBody::new(ErrorCode::Unavailable, "store read failed")
        );
        let superseded = Error::Superseded {
            generation: 1,
            current: 2,
        };
        assert_eq!(
            ErrorBody::from_error(&superseded),
            ErrorBody::superseded(1, 2)
        );
        let full = Error::TooManySlots { limit: 16 };
        assert_eq!(ErrorBody::from_error(&full), ErrorBody::too_many_slots(16));
        assert_eq!(
            serde_json::to_string(&ErrorBody::too_many_slots(16)).unwrap(),
            format!(
                r#"{{"error":"too_many_slots","message":"{TOO_MANY_SLOTS_MESSAGE}","limit":16}}"#
            )
        );
        assert_eq!(
            too_many_slots_limit(br#"{"error":"too_many_slots","limit":16}"#),
            Some(16)
        );
        for none in [
            &b"{}"[..],
            br#"{"error":"superseded","limit":16}"#,
            br#"{"error":"too_many_slots"}"#,
        ] {
            assert_eq!(too_many_slots_limit(none), None);
        }
        let refused = Error::Forbidden("key out of scope".into());
        assert_eq!(ErrorBody::from_error(&refused).status().as_u16(), 403);
        let pool = Error::LimitReached {
            limit: 2,
            sessions: vec![
                PooledSession {
                    slot: "#0".into(),
                    generation: 5,
                    since: Some(1_700_000_000_000),
                },
                PooledSession {
                    slot: "#1".into(),
                    generation: 1,
                    since: None,
                },
            ],
        };
        let body = serde_json::to_string(&ErrorBody::from_error(&pool)).unwrap();
        assert_eq!(
            body,
            format!(
                r##"{{"error":"limit_reached","message":"{LIMIT_REACHED_MESSAGE}","limit":2,"sessions":[{{"slot":"#0","gen":5,"since":1700000000000}},{{"slot":"#1","gen":1,"since":null}}]}}"##
            )
        );
        assert_eq!(ErrorBody::from_error(&pool).status().as_u16(), 409);
        let Error::LimitReached { sessions, .. } = &pool else {
            unreachable!()
        };
        assert_eq!(limit_reached(body.as_bytes()), Some((2, sessions.clone())));
        assert_eq!(
            limit_reached(br#"{"error":"limit_reached","limit":3,"sessions":7}"#),
            Some((3, Vec::new()))
        );
        for none in [
            &br#"{"error":"too_many_slots","limit":3}"#[..],
            br#"{"error":"limit_reached"}"#,
        ] {
            assert_eq!(limit_reached(none), None);
        }
        for e in [
            &invalid,
            &Error::Throttled,
            &down,
            &superseded,
            &full,
            &pool,
            &refused,
        ] {
            assert_eq!(ErrorBody::from_error(e).error.as_str(), e.code());
        }
    }

    #[test]
    fn only_a_superseded_body_carries_the_gens() {
        assert_eq!(
            serde_json::to_string(&ErrorBody::superseded(1, 2)).unwrap(),
            format!(
                r#"{{"error":"superseded","message":"{SUPERSEDED_MESSAGE}","gen":1,"current_gen":2}}"#
            )
        );
        assert_eq!(ErrorBody::superseded(1, 2).status().as_u16(), 409);
        let throttled = Error::Throttled;
        assert_eq!(
            serde_json::to_string(&ErrorBody::from_error(&throttled)).unwrap(),
            r#"{"error":"throttled","message":"throttled by the store"}"#
        );
    }

    #[test]
    fn superseded_generations_read_back_and_refuse_garbage() {
        let body = serde_json::to_vec(&ErrorBody::superseded(3, 7)).unwrap();
        assert_eq!(superseded_generations(&body), Some((3, 7)));
        assert_eq!(
            superseded_generations(br#"{"current_gen":4,"gen":4,"error":"superseded","x":[]}"#),
            Some((4, 4)),
            "a logout keeps the gen"
        );
        for garbled in [
            &b""[..],
            b"<html>",
            b"{}",
            br#"{"error":"superseded","message":"m"}"#,
            br#"{"error":"superseded","gen":1}"#,
            br#"{"error":"superseded","current_gen":2}"#,
            br#"{"error":"superseded","gen":"1","current_gen":2}"#,
            br#"{"error":"superseded","gen":1.5,"current_gen":2}"#,
            br#"{"error":"superseded","gen":0,"current_gen":2}"#,
            br#"{"error":"superseded","gen":3,"current_gen":2}"#,
            br#"{"error":"conflict","gen":1,"current_gen":2}"#,
            br#"{"gen":1,"current_gen":2}"#,
        ] {
            assert_eq!(
                superseded_generations(garbled),
                None,
                "{}",
                String::from_utf8_lossy(garbled)
            );
        }
    }

    #[test]
    fn error_code_is_lenient() {
        assert_eq!(
            error_code(br#"{"error":"corrupt","message":"m","x":1}"#),
            Some(ErrorCode::Corrupt)
        );
        assert_eq!(
            error_code(br#"{"error":"not_implemented"}"#),
            Some(ErrorCode::NotImplemented)
        );
        for none in [&b""[..], b"{}", br#"{"error":"teapot"}"#, br#"{"error":5}"#] {
            assert_eq!(error_code(none), None);
        }
    }

    #[test]
    fn error_message_is_lenient() {
        assert_eq!(
            error_message(br#"{"error":"invalid_params","message":"uid must be >= 1"}"#).as_deref(),
            Some("uid must be >= 1")
        );
        assert_eq!(
            error_message(br#"{"message":"x","error":5}"#).as_deref(),
            Some("x")
        );
        for none in [
            &b""[..],
            b"<html>",
            b"{}",
            br#"{"message":""}"#,
            br#"{"message":7}"#,
        ] {
            assert_eq!(error_message(none), None);
        }
    }
}
