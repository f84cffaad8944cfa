//! How the Arbiter tells an old session to go away.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::types::{KickDetail, KickPayload};

/// What a kick attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KickOutcome {
    /// The old session's receiver answered 2xx: it is gone (I5a).
    Confirmed,
    /// The old session is presumed offline for this reason (I5b).
    Failed(KickDetail),
}

/// Delivers a [`KickPayload`] to an old session's endpoint.
///
/// # Contract
///
/// - MUST NOT take longer than `timeout`; the [`Arbiter`](crate::Arbiter) also cuts
///   it there, so a kicker that hangs cannot hang a claim.
/// - 2xx → [`KickOutcome::Confirmed`]; no answer in time → `Failed(Timeout)`; a
///   connection that fails before a status arrives → `Failed(ConnectError)`; any
///   other status (redirects included, never followed) → `Failed(Non2xx)`.
/// - Never panics and has no error type: every failure is a [`KickDetail`].
#[async_trait]
pub trait Kicker: Send + Sync + 'static {
    /// POSTs `payload` to `endpoint`, waiting at most `timeout`.
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome;
}

#[async_trait]
impl<T: Kicker + ?Sized> Kicker for Arc<T> {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        (**self).kick(endpoint, payload, timeout).await
    }
}

#[async_trait]
impl<T: Kicker + ?Sized> Kicker for Box<T> {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        (**self).kick(endpoint, payload, timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn _object_safe(_: Box<dyn Kicker>) {}
}
