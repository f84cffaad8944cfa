//! The one place a response becomes a result: status and `error` code →
//! [`unique_core::Error`] or [`LeaseError`].
//!
//! A status that carries one meaning maps by itself; one that carries several (409 holds
//! `superseded`, `too_many_slots` and `limit_reached`) maps by the body's `error` code, so a
//! code a later server adds to it is never read as one of the others.

use http::StatusCode;
use serde::de::DeserializeOwned;
use unique_core::Error;
use unique_lease::LeaseError;
use unique_wire::{
    ErrorCode, error_code, error_message, limit_reached, superseded_generations,
    too_many_slots_limit,
};

/// Maps one complete response of operation `op` (`claim`, `current`, `release`, …).
///
/// 200 → the parsed body (unparseable → `Unavailable`); 400 → `InvalidParams` with the
/// server's message; 401 → `Unauthenticated`, 403 → `Forbidden` (refused credentials: no
/// retry fixes them); 404, 405 and 413 (misconfiguration: a wrong base URL, or a body over
/// the server's limit) → `InvalidParams`, so the caller fails at once; 409 by its code:
/// `superseded` → `Superseded` (see [`superseded`]), `too_many_slots` → `TooManySlots`,
/// `limit_reached` → `LimitReached` (limit 0 and no sessions when unreadable), any other or
/// none → `Unavailable`; 501 (a lease-only server, `--no-sessions`) →
/// `InvalidParams` with the server's message; 429 → `Throttled`; 503, any other 5xx and any
/// other status → `Unavailable`.
pub(crate) fn classify<T: DeserializeOwned>(
    op: &str,
    status: StatusCode,
    body: &[u8],
) -> Result<T, Error> {
    let message = || error_message(body).unwrap_or_else(|| "no reason given".to_owned());
    match status {
        StatusCode::OK => serde_json::from_slice(body).map_err(|e| {
            Error::unavailable_with(format!("{op} response is not the expected json"), e)
        }),
        StatusCode::BAD_REQUEST => Err(Error::InvalidParams(
            error_message(body).unwrap_or_else(|| "the server rejected the request".to_owned()),
        )),
        StatusCode::UNAUTHORIZED => Err(Error::Unauthenticated(format!(
            "{op}: the server refused the credentials (401): {}",
            message()
        ))),
        StatusCode::FORBIDDEN => Err(Error::Forbidden(format!(
            "{op}: the server refused the credentials (403): {}",
            message()
        ))),
        // No retry reaches another route or shrinks the body: fail at once with a hint.
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => {
            Err(Error::InvalidParams(format!(
                "{op}: the server answered {} for /v1/{op}: check the base url (a unique server, \
                 with its path prefix if any)",
                status.as_u16()
            )))
        }
        StatusCode::PAYLOAD_TOO_LARGE => Err(Error::InvalidParams(format!(
            "{op}: the server answered 413: the request body is over its size limit \
             (shorten the owner or the key's names, or raise the server's body limit)"
        ))),
        StatusCode::CONFLICT => Err(match error_code(body) {
            Some(ErrorCode::Superseded) => superseded(body),
            Some(ErrorCode::TooManySlots) => Error::TooManySlots {
                limit: too_many_slots_limit(body).unwrap_or(0),
            },
            // A full deny-new pool: never superseded, never retried (the user must end one
            // of the sessions first).
            Some(ErrorCode::LimitReached) => {
                let (limit, sessions) = limit_reached(body).unwrap_or_default();
                Error::LimitReached { limit, sessions }
            }
            _ => Error::unavailable(format!("{op}: unexpected 409: {}", message())),
        }),
        // A lease-only server (`--no-sessions`): no retry brings the session routes back.
        StatusCode::NOT_IMPLEMENTED => Err(Error::InvalidParams(format!(
            "{op}: the server does not serve sessions (501): {}",
            message()
        ))),
        StatusCode::TOO_MANY_REQUESTS => Err(Error::Throttled),
        StatusCode::SERVICE_UNAVAILABLE => Err(Error::unavailable(match error_message(body) {
            Some(message) => format!("{op}: server unavailable: {message}"),
            None => format!("{op}: server unavailable"),
        })),
        s if s.is_server_error() => Err(Error::unavailable(format!(
            "{op}: server error {}",
            s.as_u16()
        ))),
        s => Err(Error::unavailable(format!(
            "{op}: unexpected status {}",
            s.as_u16()
        ))),
    }
}

/// Maps one complete response of lease operation `op` (`lease_ensure`, `node_lookup`, …) onto
/// [`LeaseError`].
///
/// 200 → the parsed body (unparseable → `Unavailable`: the call may have taken effect); 400 →
/// `InvalidParams` with the server's message; 401 → `Unauthenticated`, 403 → `Forbidden`; 404
/// and 405 (a wrong base URL, or a server older than the lease routes), 413 and 501 (a server
/// whose store has no lease directory) → `Backend`, which no retry fixes; 500 → `Corrupt` when
/// the answer says `corrupt`, else `Backend`; 429 → `Throttled`; 503, any other 5xx (a proxy's
/// 502 or 504) and any other status → `Unavailable`, worth retrying.
pub(crate) fn classify_lease<T: DeserializeOwned>(
    op: &str,
    status: StatusCode,
    body: &[u8],
) -> Result<T, LeaseError> {
    let message = || error_message(body).unwrap_or_else(|| "no reason given".to_owned());
    match status {
        StatusCode::OK => serde_json::from_slice(body).map_err(|e| {
            LeaseError::unavailable_with(format!("{op} response is not the expected json"), e)
        }),
        StatusCode::BAD_REQUEST => Err(LeaseError::InvalidParams(
            error_message(body).unwrap_or_else(|| "the server rejected the request".to_owned()),
        )),
        StatusCode::UNAUTHORIZED => Err(LeaseError::Unauthenticated(format!(
            "{op}: the server refused the credentials (401): {}",
            message()
        ))),
        StatusCode::FORBIDDEN => Err(LeaseError::Forbidden(format!(
            "{op}: the server refused the credentials (403): {}",
            message()
        ))),
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => {
            Err(LeaseError::backend(format!(
                "{op}: the server answered {}: check the base url (a unique server that serves \
                 leases, with its path prefix if any)",
                status.as_u16()
            )))
        }
        StatusCode::PAYLOAD_TOO_LARGE => Err(LeaseError::backend(format!(
            "{op}: the server answered 413: the request body is over its size limit"
        ))),
        StatusCode::NOT_IMPLEMENTED => Err(LeaseError::backend(format!(
            "{op}: the server does not serve leases (501): {}",
            message()
        ))),
        StatusCode::INTERNAL_SERVER_ERROR if error_code(body) == Some(ErrorCode::Corrupt) => {
            Err(LeaseError::Corrupt(format!("{op}: {}", message())))
        }
        StatusCode::INTERNAL_SERVER_ERROR => Err(LeaseError::backend(format!(
            "{op}: lease store failed: {}",
            message()
        ))),
        StatusCode::TOO_MANY_REQUESTS => Err(LeaseError::Throttled(format!("{op}: {}", message()))),
        StatusCode::SERVICE_UNAVAILABLE => Err(unavailable(match error_message(body) {
            Some(message) => format!("{op}: server unavailable: {message}"),
            None => format!("{op}: server unavailable"),
        })),
        s if s.is_server_error() => Err(unavailable(format!("{op}: server error {}", s.as_u16()))),
        s => Err(unavailable(format!(
            "{op}: unexpected status {}",
            s.as_u16()
        ))),
    }
}

/// `Unavailable` without a source.
fn unavailable(reason: String) -> LeaseError {
    LeaseError::Unavailable {
        reason,
        source: None,
    }
}

/// A 409 `superseded`: `Superseded` with the body's `gen` and `current_gen`. When the body
/// does not carry them readably (absent, garbled, `gen > current_gen`), it is still
/// `Superseded`, with both gens 0 — outside the gen domain `[1, i64::MAX)`, so "the server
/// did not say" — because the code says the login is over, and it must not go online.
fn superseded(body: &[u8]) -> Error {
    let (generation, current) = superseded_generations(body).unwrap_or((0, 0));
    Error::Superseded {
        generation,
        current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unique_wire::ReleaseAnswer;

    fn map(status: u16, body: &str) -> Result<bool, Error> {
        classify::<ReleaseAnswer>(
            "release",
            StatusCode::from_u16(status).unwrap(),
            body.as_bytes(),
        )
        .map(|r| r.released)
    }

    #[test]
    fn ok_parses_or_is_unavailable() {
        assert!(map(200, r#"{"released":true}"#).unwrap());
        assert!(!map(200, r#"{"released":false,"later":1}"#).unwrap());
        for bad in ["", "nope", r#"{"released":"yes"}"#, "{}"] {
            let e = map(200, bad).unwrap_err();
            assert!(e.is_unavailable(), "{bad}: {e}");
            assert_eq!(
                e.to_string(),
                "unavailable: release response is not the expected json"
            );
        }
    }

    #[test]
    fn bad_request_is_invalid_params_with_the_server_message() {
        let e = map(
            400,
            r#"{"error":"invalid_params","message":"uid must be >= 1"}"#,
        )
        .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidParams(m) if m == "uid must be >= 1"),
            "{e}"
        );
        let e = map(400, "<html>").unwrap_err();
        assert!(
            matches!(&e, Error::InvalidParams(m) if m == "the server rejected the request"),
            "{e}"
        );
    }

    #[test]
    fn refused_credentials_fail_at_once() {
        let e = map(
            401,
            r#"{"error":"unauthenticated","message":"unknown bearer token"}"#,
        )
        .unwrap_err();
        assert!(
            matches!(e, Error::Unauthenticated(_)) && !e.is_retryable(),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "unauthenticated: release: the server refused the credentials (401): unknown bearer token"
        );
        let e = map(403, "").unwrap_err();
        assert!(matches!(e, Error::Forbidden(_)) && !e.is_retryable(), "{e}");
        assert!(e.to_string().contains("(403): no reason given"), "{e}");
    }

    #[test]
    fn throttled_and_unavailable() {
        assert!(
            map(429, r#"{"error":"throttled","message":"x"}"#)
                .unwrap_err()
                .is_throttled()
        );
        let e = map(
            503,
            r#"{"error":"unavailable","message":"store read failed"}"#,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "unavailable: release: server unavailable: store read failed"
        );
        let e = map(503, "").unwrap_err();
        assert_eq!(e.to_string(), "unavailable: release: server unavailable");
    }

    #[test]
    fn a_lease_only_server_fails_at_once_with_its_message() {
        let e = map(
            501,
            r#"{"error":"not_implemented","message":"this server serves leases only"}"#,
        )
        .unwrap_err();
        assert!(e.is_invalid_params() && !e.is_retryable(), "{e}");
        assert_eq!(
            e.to_string(),
            "invalid params: release: the server does not serve sessions (501): this server \
             serves leases only"
        );
    }

    #[test]
    fn misconfiguration_fails_at_once_with_a_hint() {
        for status in [404, 405] {
            let e = map(status, r#"{"released":true}"#).unwrap_err();
            assert!(e.is_invalid_params() && !e.is_retryable(), "{status}: {e}");
            assert_eq!(
                e.to_string(),
                format!(
                    "invalid params: release: the server answered {status} for /v1/release: \
                     check the base url (a unique server, with its path prefix if any)"
                )
            );
        }
        let e = map(413, "").unwrap_err();
        assert!(e.is_invalid_params() && !e.is_retryable(), "{e}");
        assert!(e.to_string().contains("413"), "{e}");
        assert!(e.to_string().contains("size limit"), "{e}");
    }

    fn claim(status: u16, body: &str) -> Error {
        classify::<unique_wire::ClaimAnswer>(
            "claim",
            StatusCode::from_u16(status).unwrap(),
            body.as_bytes(),
        )
        .unwrap_err()
    }

    #[test]
    fn a_claims_409_is_superseded_with_its_gens() {
        let body = r#"{"error":"superseded","message":"m","gen":1,"current_gen":2}"#;
        let e = claim(409, body);
        assert!(
            matches!(
                e,
                Error::Superseded {
                    generation: 1,
                    current: 2
                }
            ),
            "{e}"
        );
        assert!(e.is_superseded() && !e.is_retryable(), "{e}");
    }

    #[test]
    fn a_409_is_read_by_its_code() {
        let e = claim(
            409,
            r#"{"error":"too_many_slots","message":"m","limit":16}"#,
        );
        assert!(matches!(e, Error::TooManySlots { limit: 16 }), "{e}");
        assert!(!e.is_retryable() && !e.is_superseded(), "{e}");
        let e = claim(409, r#"{"error":"too_many_slots","message":"m"}"#);
        assert!(matches!(e, Error::TooManySlots { limit: 0 }), "{e}");
        let e = claim(
            409,
            r##"{"error":"limit_reached","message":"m","limit":2,"sessions":[{"slot":"#0","gen":3,"since":1700000000000},{"slot":"#1","gen":1}]}"##,
        );
        let Error::LimitReached { limit, sessions } = &e else {
            panic!("not LimitReached: {e:?}");
        };
        assert_eq!(*limit, 2);
        let listed: Vec<_> = sessions
            .iter()
            .map(|s| (s.slot.as_str(), s.generation, s.since))
            .collect();
        assert_eq!(
            listed,
            [("#0", 3, Some(1_700_000_000_000)), ("#1", 1, None)]
        );
        assert!(!e.is_retryable() && !e.is_superseded(), "{e}");
        let e = claim(409, r#"{"error":"limit_reached","message":"m"}"#);
        assert!(
            matches!(&e, Error::LimitReached { limit: 0, sessions } if sessions.is_empty()),
            "{e:?}"
        );
        // A code this client does not know, or none: not superseded, worth a retry (a
        // claim's retry with its claim_id is answered by the replay or superseded).
        for body in [
            "",
            "conflict",
            r#"{"error":"conflict","gen":1,"current_gen":2}"#,
        ] {
            let e = claim(409, body);
            assert!(e.is_unavailable() && e.is_retryable(), "{body}: {e}");
        }
    }

    #[test]
    fn a_superseded_409_without_readable_gens_is_still_superseded() {
        for body in [
            r#"{"error":"superseded","message":"m"}"#,
            r#"{"error":"superseded","gen":"1","current_gen":2}"#,
            r#"{"error":"superseded","gen":5,"current_gen":2}"#,
        ] {
            let e = claim(409, body);
            assert!(
                matches!(
                    e,
                    Error::Superseded {
                        generation: 0,
                        current: 0
                    }
                ),
                "{body}: {e}"
            );
            assert!(!e.is_retryable(), "{body}: {e}");
        }
    }

    #[test]
    fn a_409_maps_by_its_code_on_every_route() {
        let body = r#"{"error":"superseded","message":"m","gen":1,"current_gen":2}"#;
        let e = map(409, body).unwrap_err();
        assert!(e.is_superseded(), "{e}");
        let e = map(409, r#"{"error":"x","message":"odd"}"#).unwrap_err();
        assert_eq!(e.to_string(), "unavailable: release: unexpected 409: odd");
    }

    fn lease(status: u16, body: &str) -> Result<bool, LeaseError> {
        classify_lease::<ReleaseAnswer>(
            "lease_release",
            StatusCode::from_u16(status).unwrap(),
            body.as_bytes(),
        )
        .map(|r| r.released)
    }

    #[test]
    fn lease_answers_map_to_lease_errors() {
        assert!(lease(200, r#"{"released":true,"later":1}"#).unwrap());
        assert!(lease(200, "{}").unwrap_err().is_unavailable());
        let e = lease(
            400,
            r#"{"error":"invalid_params","message":"ttl_ms must be at least 1"}"#,
        )
        .unwrap_err();
        assert!(
            matches!(&e, LeaseError::InvalidParams(m) if m == "ttl_ms must be at least 1"),
            "{e}"
        );
        let e = lease(401, r#"{"error":"unauthenticated","message":"why"}"#).unwrap_err();
        assert!(
            matches!(e, LeaseError::Unauthenticated(_)) && !e.is_retryable(),
            "{e}"
        );
        let e = lease(403, r#"{"error":"forbidden","message":"why"}"#).unwrap_err();
        assert!(
            matches!(e, LeaseError::Forbidden(_)) && !e.is_retryable(),
            "{e}"
        );
        let e = lease(429, r#"{"error":"throttled","message":"slow down"}"#).unwrap_err();
        assert!(e.is_throttled() && e.is_retryable(), "{e}");
        for status in [404, 405, 413, 501] {
            let e = lease(status, r#"{"error":"x","message":"why"}"#).unwrap_err();
            assert!(
                matches!(e, LeaseError::Backend { .. }) && !e.is_retryable(),
                "{status}: {e}"
            );
            assert!(e.to_string().contains(&status.to_string()), "{e}");
        }
        let e = lease(
            500,
            r#"{"error":"corrupt","message":"corrupt record: lease hash"}"#,
        )
        .unwrap_err();
        assert!(e.is_corrupt(), "{e}");
        let e = lease(
            500,
            r#"{"error":"internal","message":"epoch counter exhausted"}"#,
        )
        .unwrap_err();
        assert!(matches!(e, LeaseError::Backend { .. }), "{e}");
        assert!(e.to_string().contains("epoch counter exhausted"), "{e}");
        for status in [503, 502, 504, 302, 409] {
            let e = lease(status, "").unwrap_err();
            assert!(e.is_unavailable() && e.is_retryable(), "{status}: {e}");
        }
        let e = lease(503, r#"{"error":"unavailable","message":"redis down"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unavailable: lease_release: server unavailable: redis down"
        );
    }

    #[test]
    fn every_other_status_is_unavailable() {
        for status in [500, 502, 504, 201, 204, 301, 302, 410, 418] {
            let e = map(status, r#"{"released":true}"#).unwrap_err();
            assert!(e.is_unavailable(), "{status}: {e}");
            assert!(e.to_string().contains(&status.to_string()), "{e}");
        }
    }
}
