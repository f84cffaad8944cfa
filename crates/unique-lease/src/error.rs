//! The crate's error type and its classification helpers.

/// A boxed error source kept for diagnostics: the workspace's one definition,
/// [`unique_core::BoxError`], re-exported so `unique_lease::BoxError` names the same type.
pub use unique_core::BoxError;

/// Every failure a [`Directory`](crate::Directory) or
/// [`NodeRegistry`](crate::NodeRegistry) can report. Callers branch on the variant
/// (or the `is_*` helpers), never on message text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Bad input (empty or over-long id, control characters, a time outside the
    /// supported range, …). Nothing was read or written; retrying cannot help.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// The backend could not be reached or is temporarily unable to serve (connection
    /// refused or dropped, timeout, server loading, failover in progress). The
    /// operation may or may not have taken effect; retrying after a backoff is safe
    /// (see the retry notes on [`Directory`](crate::Directory)).
    #[error("unavailable: {reason}")]
    Unavailable {
        /// What went wrong, without secrets or connection strings.
        reason: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// A stored record is not one this crate wrote (missing fields, unparseable
    /// numbers, a key of the wrong type). The operation fails closed: no lease is
    /// granted over a record that might belong to someone.
    #[error("corrupt record: {0}")]
    Corrupt(String),
    /// The backend refused the request for a reason retrying will not fix
    /// (authentication, permissions, a script error, an exhausted epoch counter).
    #[error("backend error: {reason}")]
    Backend {
        /// What went wrong, without secrets or connection strings.
        reason: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// A lease server refused the caller's credentials (HTTP 401: a missing, malformed or
    /// unknown token). Only `unique-client-http` reports it; no retry fixes it.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// A lease server refused the request because the caller's credentials do not cover it
    /// (HTTP 403: a token without every env of the project). Only `unique-client-http`
    /// reports it; no retry fixes it.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A lease server or its store throttled the request (HTTP 429). Nothing was decided;
    /// retrying after a backoff is safe.
    #[error("throttled: {0}")]
    Throttled(String),
}

impl LeaseError {
    /// `InvalidParams` with a reason.
    pub fn invalid(reason: impl Into<String>) -> Self {
        Self::InvalidParams(reason.into())
    }

    /// `Unavailable` with a reason and the error that caused it.
    pub fn unavailable_with(reason: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
            source: Some(source.into()),
        }
    }

    /// `Backend` with a reason and no source.
    pub fn backend(reason: impl Into<String>) -> Self {
        Self::Backend {
            reason: reason.into(),
            source: None,
        }
    }

    /// `Backend` with a reason and the error that caused it.
    pub fn backend_with(reason: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            reason: reason.into(),
            source: Some(source.into()),
        }
    }

    /// Bad input.
    pub fn is_invalid_params(&self) -> bool {
        matches!(self, Self::InvalidParams(_))
    }

    /// The backend is temporarily unreachable or unable to serve.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// A stored record is corrupt.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, Self::Corrupt(_))
    }

    /// A lease server refused the caller's credentials (401) or their scope (403).
    pub fn is_refused_credentials(&self) -> bool {
        matches!(self, Self::Unauthenticated(_) | Self::Forbidden(_))
    }

    /// A lease server throttled the request.
    pub fn is_throttled(&self) -> bool {
        matches!(self, Self::Throttled(_))
    }

    /// Worth retrying after a backoff (`Unavailable`, `Throttled`).
    pub fn is_retryable(&self) -> bool {
        self.is_unavailable() || self.is_throttled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_helpers() {
        let cases = [
            (LeaseError::invalid("x"), [true, false, false, false]),
            (
                LeaseError::unavailable_with("x", std::io::Error::other("y")),
                [false, true, false, true],
            ),
            (LeaseError::Corrupt("x".into()), [false, false, true, false]),
            (LeaseError::backend("x"), [false, false, false, false]),
            (
                LeaseError::Throttled("x".into()),
                [false, false, false, true],
            ),
            (LeaseError::Unauthenticated("x".into()), [false; 4]),
            (LeaseError::Forbidden("x".into()), [false; 4]),
        ];
        for (e, [invalid, unavailable, corrupt, retryable]) in cases {
            assert_eq!(e.is_invalid_params(), invalid, "{e}");
            assert_eq!(e.is_unavailable(), unavailable, "{e}");
            assert_eq!(e.is_corrupt(), corrupt, "{e}");
            assert_eq!(e.is_retryable(), retryable, "{e}");
        }
    }

    #[test]
    fn messages_are_lower_case_fragments() {
        let e =
            LeaseError::unavailable_with("redis connection dropped", std::io::Error::other("x"));
        assert_eq!(e.to_string(), "unavailable: redis connection dropped");
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(
            LeaseError::invalid("room_id must not be empty").to_string(),
            "invalid params: room_id must not be empty"
        );
        assert_eq!(LeaseError::backend("x").to_string(), "backend error: x");
    }
}
