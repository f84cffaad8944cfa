//! The one error type of the workspace and its classification helpers.

/// A boxed error source kept for diagnostics (never shown to remote callers).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Every failure the arbitration can report. Callers branch on the variant
/// (or the `is_*` helpers), never on message text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad input. Fail at once; retrying cannot help.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// The store throttled the request. Back off and retry with the same claim_id.
    #[error("throttled by the store")]
    Throttled,
    /// A store fault, a corrupt owner on `current`, an exhausted CAS budget or an
    /// exhausted gen. Fail closed: never let the login through; back off and retry.
    #[error("unavailable: {reason}")]
    Unavailable {
        /// What went wrong, without secrets or URL query strings.
        reason: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// This claim_id already won an earlier gen of the key and no longer holds it:
    /// another login replaced it, or it logged out, while this retry was in flight
    /// (C9). Nothing was kicked or written. Do not retry: the login is over.
    #[error("superseded: this claim won gen {generation}; the key is at gen {current}")]
    Superseded {
        /// The gen this claim_id won.
        generation: i64,
        /// The key's gen now.
        current: i64,
    },
    /// The claim would take a slot the user has no online session in while the user
    /// already holds `limit` online sessions, the most the Arbiter allows
    /// ([`ArbiterBuilder::max_slots_per_user`](crate::ArbiterBuilder::max_slots_per_user)).
    /// Nothing was kicked or written. Not worth retrying until one of the user's sessions
    /// ends; a login in a slot that is already online is never refused this way.
    #[error("too many slots: the user already has {limit} online sessions, the most allowed")]
    TooManySlots {
        /// The most online sessions one user may hold.
        limit: usize,
    },
    /// A pooled claim with the `deny-new` policy found all `limit` places of the user online
    /// (`docs/design.md#pooled-sessions`). Nothing was kicked or written. Not retryable, and
    /// never a superseded login: the user must end one of `sessions` first.
    #[error("limit reached: the user already has {limit} online sessions in the pool")]
    LimitReached {
        /// The pool's limit `k`.
        limit: usize,
        /// The places online, by place: slots, gens and login times, never owners.
        sessions: Vec<crate::PooledSession>,
    },
    /// A server refused the caller's credentials (HTTP 401: a missing, malformed or unknown
    /// token). Only a client reports it; no retry fixes it.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// A server refused the request because the caller's credentials do not cover it (HTTP
    /// 403: a key outside the token's scope, a missing role). Only a client reports it; no
    /// retry fixes it.
    #[error("forbidden: {0}")]
    Forbidden(String),
}

impl Error {
    /// `InvalidParams` with a reason.
    pub fn invalid(reason: impl Into<String>) -> Self {
        Self::InvalidParams(reason.into())
    }

    /// `Unavailable` with a reason and no source.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
            source: None,
        }
    }

    /// `Unavailable` with a reason and the error that caused it.
    pub fn unavailable_with(reason: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
            source: Some(source.into()),
        }
    }

    /// Bad input.
    pub fn is_invalid_params(&self) -> bool {
        matches!(self, Self::InvalidParams(_))
    }

    /// The store throttled.
    pub fn is_throttled(&self) -> bool {
        matches!(self, Self::Throttled)
    }

    /// A fail-closed fault.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// The claim_id's login was replaced or logged out while it was in flight.
    pub fn is_superseded(&self) -> bool {
        matches!(self, Self::Superseded { .. })
    }

    /// The user already holds the most online slots allowed.
    pub fn is_too_many_slots(&self) -> bool {
        matches!(self, Self::TooManySlots { .. })
    }

    /// A `deny-new` pooled claim found the user's pool full.
    pub fn is_limit_reached(&self) -> bool {
        matches!(self, Self::LimitReached { .. })
    }

    /// A server refused the caller's credentials (401) or their scope (403).
    pub fn is_refused_credentials(&self) -> bool {
        matches!(self, Self::Unauthenticated(_) | Self::Forbidden(_))
    }

    /// Worth retrying with the same claim_id after a backoff (`Throttled`, `Unavailable`).
    pub fn is_retryable(&self) -> bool {
        self.is_throttled() || self.is_unavailable()
    }

    /// The stable wire code: `invalid_params`, `throttled`, `unavailable`, `superseded`,
    /// `too_many_slots`, `limit_reached`, `unauthenticated`, `forbidden`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidParams(_) => "invalid_params",
            Self::Throttled => "throttled",
            Self::Unavailable { .. } => "unavailable",
            Self::Superseded { .. } => "superseded",
            Self::TooManySlots { .. } => "too_many_slots",
            Self::LimitReached { .. } => "limit_reached",
            Self::Unauthenticated(_) => "unauthenticated",
            Self::Forbidden(_) => "forbidden",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_helpers() {
        let cases = [
            (Error::invalid("x"), [true, false, false, false]),
            (Error::Throttled, [false, true, false, true]),
            (Error::unavailable("x"), [false, false, true, true]),
            (
                Error::Superseded {
                    generation: 1,
                    current: 2,
                },
                [false, false, false, false],
            ),
            (Error::TooManySlots { limit: 16 }, [false; 4]),
            (
                Error::LimitReached {
                    limit: 3,
                    sessions: Vec::new(),
                },
                [false; 4],
            ),
            (Error::Unauthenticated("x".into()), [false; 4]),
            (Error::Forbidden("x".into()), [false; 4]),
        ];
        for (e, [inv, thr, una, retry]) in cases {
            assert_eq!(e.is_invalid_params(), inv, "{e}");
            assert_eq!(e.is_throttled(), thr, "{e}");
            assert_eq!(e.is_unavailable(), una, "{e}");
            assert_eq!(e.is_retryable(), retry, "{e}");
        }
    }

    #[test]
    fn messages_are_lower_case_fragments() {
        let e = Error::unavailable_with("store read failed", std::io::Error::other("boom"));
        assert_eq!(e.to_string(), "unavailable: store read failed");
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(
            Error::invalid("uid must be >= 1").to_string(),
            "invalid params: uid must be >= 1"
        );
        assert_eq!(Error::unavailable("x").code(), "unavailable");
        let full = Error::TooManySlots { limit: 16 };
        assert_eq!(
            full.to_string(),
            "too many slots: the user already has 16 online sessions, the most allowed"
        );
        assert_eq!(full.code(), "too_many_slots");
        assert!(full.is_too_many_slots() && !full.is_refused_credentials());
        assert!(Error::Forbidden("x".into()).is_refused_credentials());
    }
}
