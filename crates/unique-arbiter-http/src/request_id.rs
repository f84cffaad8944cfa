//! The id that ties a request's log events together.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use http::{HeaderMap, HeaderName, HeaderValue};
use unique_core::Key;

/// The header a proxy or caller may set to choose the id.
pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest caller-chosen id kept; a longer or unprintable one is replaced.
const MAX_GIVEN: usize = 64;

/// A request's id: the caller's `x-request-id` when it sent a usable one (printable
/// ASCII, at most 64 bytes), else one made here. Made ids are a per-process random
/// prefix and a counter, so ids of several servers do not collide in one log store,
/// and making one costs no allocation until a log line prints it.
///
/// It carries where the request came from too (the listener's [`PeerAddr`], when the service
/// runs under `unique-listener`): the audit log's refusal tallies are kept per source.
///
/// [`PeerAddr`]: unique_listener::PeerAddr
pub(crate) struct RequestId {
    id: Id,
    source: Option<IpAddr>,
}

enum Id {
    Given(HeaderValue),
    Made(u64),
}

impl RequestId {
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = match headers.get(REQUEST_ID) {
            Some(given)
                if !given.is_empty()
                    && given.len() <= MAX_GIVEN
                    && given.as_bytes().iter().all(u8::is_ascii_graphic) =>
            {
                Id::Given(given.clone())
            }
            _ => Id::Made(NEXT.fetch_add(1, Ordering::Relaxed)),
        };
        Self { id, source: None }
    }

    /// The same id, for a request that came from `source`.
    pub(crate) const fn with_source(mut self, source: Option<IpAddr>) -> Self {
        self.source = source;
        self
    }

    /// Where the request came from, when the server knows.
    pub(crate) const fn source(&self) -> Option<IpAddr> {
        self.source
    }

    /// The span every log event of the request is recorded in: the id, the
    /// operation and the key's fields (never the owner or its endpoint).
    pub(crate) fn span(&self, operation: &'static str, key: &Key) -> tracing::Span {
        tracing::info_span!(
            "request",
            request_id = %self,
            operation,
            project = %key.project,
            env = %key.env,
            uid = key.uid,
        )
    }

    /// The span of a request on several keys: the id, the operation and how many keys.
    pub(crate) fn batch_span(&self, operation: &'static str, keys: usize) -> tracing::Span {
        tracing::info_span!("request", request_id = %self, operation, keys)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        static PREFIX: OnceLock<u32> = OnceLock::new();
        match &self.id {
            // Checked printable ASCII when it was taken.
            Id::Given(value) => f.write_str(value.to_str().unwrap_or_default()),
            Id::Made(n) => {
                let prefix = PREFIX.get_or_init(|| {
                    // Only the low 32 bits of a randomly keyed hash are kept.
                    #[allow(clippy::cast_possible_truncation)]
                    let bits = RandomState::new().hash_one(std::process::id()) as u32;
                    bits
                });
                write!(f, "{prefix:08x}-{n}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(REQUEST_ID, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_usable_caller_id_is_kept() {
        assert_eq!(RequestId::of(&with("req-42/abc")).to_string(), "req-42/abc");
    }

    #[test]
    fn missing_long_or_odd_ids_are_made_here_and_unique() {
        let long = "x".repeat(MAX_GIVEN + 1);
        let made: Vec<String> = [HeaderMap::new(), with(&long), with("has space"), with("")]
            .iter()
            .map(|h| RequestId::of(h).to_string())
            .collect();
        for id in &made {
            let (prefix, n) = id.split_once('-').expect("prefix-counter");
            assert_eq!(prefix.len(), 8, "{id}");
            assert!(n.parse::<u64>().is_ok(), "{id}");
        }
        let mut unique = made.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), made.len(), "{made:?}");
    }
}
