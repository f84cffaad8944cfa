//! The error body every failed request gets, and its codes.

use http::StatusCode;
use serde::{Deserialize, Serialize};
use unique_core::Error;

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
    /// 401: the request did not prove who sent it (a kick without a valid signature).
    Unauthenticated,
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
        }
    }
}

/// Every error answer: `{"error": code, "message": text}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ErrorBody<'a> {
    /// What kind of failure; also decides the status.
    pub error: ErrorCode,
    /// A lower-case fragment for people; never a secret or a URL's query string.
    pub message: &'a str,
}

impl<'a> ErrorBody<'a> {
    /// The body with `code` and `message`.
    pub const fn new(error: ErrorCode, message: &'a str) -> Self {
        Self { error, message }
    }

    /// The answer to a request the arbiter failed with `error`: `InvalidParams` → 400 with its
    /// reason, `Throttled` → 429, anything else → 503 (with its reason when it has one).
    pub fn from_error(error: &'a Error) -> Self {
        match error {
            Error::InvalidParams(reason) => Self::new(ErrorCode::InvalidParams, reason),
            Error::Throttled => Self::new(ErrorCode::Throttled, "throttled by the store"),
            Error::Unavailable { reason, .. } => Self::new(ErrorCode::Unavailable, reason),
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

#[cfg(test)]
mod tests {
    use super::*;

    const CODES: [ErrorCode; 7] = [
        ErrorCode::InvalidParams,
        ErrorCode::Throttled,
        ErrorCode::Unavailable,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::TooLarge,
        ErrorCode::Unauthenticated,
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
        assert_eq!(statuses, [400, 429, 503, 404, 405, 413, 401]);
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
        for e in [&invalid, &Error::Throttled, &down] {
            assert_eq!(ErrorBody::from_error(e).error.as_str(), e.code());
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
