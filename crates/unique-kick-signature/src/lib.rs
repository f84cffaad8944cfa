#![doc = include_str!("../README.md")]

mod header;
mod keys;

use std::time::Duration;

pub use keys::{KeyError, KeyId, MIN_KEY_BYTES, SigningKeys};

/// The header a signed kick carries, `Unique-Signature` (header names are
/// case-insensitive; this is the lower-case spelling `http::HeaderName` wants).
pub const HEADER: &str = "unique-signature";

/// How far a signature's timestamp may be from the receiver's clock, either way, by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_mins(5);

/// At most this many `v1=` entries are tried; a header with more is malformed, so a
/// peer cannot make one request cost an unbounded number of HMACs.
pub const MAX_SIGNATURES: usize = 8;

/// Why [`SigningKeys::verify`] refused a request. The message is a lower-case fragment
/// that names the reason and never echoes a key or a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The request has no `Unique-Signature` header.
    #[error("no unique-signature header")]
    Missing,
    /// The header is not `t=<unix seconds>,v1=<64 hex digits>[,v1=…]`: no or a repeated
    /// `t`, no `v1`, a `v1` that is not 64 hex digits, more than [`MAX_SIGNATURES`]
    /// `v1` entries, or an entry without `=`.
    #[error("malformed unique-signature header")]
    Malformed,
    /// The signature is genuine but its timestamp is older than the window: a replay,
    /// or the sender's clock is behind.
    #[error("signature timestamp is older than the window")]
    Stale,
    /// The signature is genuine but its timestamp is ahead of the clock by more than
    /// the window: the sender's clock is ahead.
    #[error("signature timestamp is ahead of the clock by more than the window")]
    Future,
    /// No `v1` entry is the HMAC of this timestamp and body under any of the keys: a
    /// wrong key, or a body or timestamp changed after signing.
    #[error("no signature matches the body under any key")]
    BadSignature,
}

impl Rejection {
    /// A short stable name for logs and metrics (`missing`, `malformed`, `stale`,
    /// `future`, `bad-signature`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::Stale => "stale",
            Self::Future => "future",
            Self::BadSignature => "bad-signature",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_have_stable_names_and_lower_case_messages() {
        let all = [
            Rejection::Missing,
            Rejection::Malformed,
            Rejection::Stale,
            Rejection::Future,
            Rejection::BadSignature,
        ];
        let names: Vec<&str> = all.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names,
            ["missing", "malformed", "stale", "future", "bad-signature"]
        );
        for r in all {
            let message = r.to_string();
            assert!(
                message.starts_with(|c: char| c.is_ascii_lowercase()),
                "{message}"
            );
            assert!(!message.ends_with('.'), "{message}");
        }
    }
}
