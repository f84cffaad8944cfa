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
/// - An endpoint its policy refuses (see [`check_endpoint`](Kicker::check_endpoint))
///   MUST be `Failed(ConnectError)` with nothing sent to it.
/// - [`kick_node`](Kicker::kick_node) (a session whose owner names a node rather than an
///   endpoint) keeps the same bounds and mapping: the node's ack plays the part of the
///   status; no stream for the node, or one that closes before the ack, is
///   `Failed(ConnectError)`.
#[async_trait]
pub trait Kicker: Send + Sync + 'static {
    /// POSTs `payload` to `endpoint`, waiting at most `timeout`.
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome;

    /// Pushes `payload` over the kick stream node `node` holds open and waits at most
    /// `timeout` for its ack (`docs/design.md#push-kicks`). The
    /// [`Arbiter`](crate::Arbiter) calls it, never [`kick`](Kicker::kick), for an owner
    /// whose `node` is set. The default has no push channel: the node is presumed offline,
    /// `Failed(ConnectError)` (I5b).
    async fn kick_node(&self, node: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        let _ = (node, payload, timeout);
        KickOutcome::Failed(KickDetail::ConnectError)
    }

    /// Whether this kicker could ever kick `endpoint`, decided without I/O. The
    /// [`Arbiter`](crate::Arbiter) calls it on a claiming owner's endpoint after
    /// validation and before any store call, and refuses the claim with
    /// `InvalidParams` when it fails: a session nobody can kick must not be written
    /// (`docs/design.md#kick-endpoint-policy`).
    ///
    /// A kicker that resolves names MUST NOT resolve here; whatever only a lookup
    /// can tell is decided by [`kick`](Kicker::kick), which then fails with
    /// `ConnectError`. The default accepts every endpoint.
    ///
    /// # Errors
    ///
    /// Why the endpoint is refused: a short lower-case fragment that names the rule,
    /// never the endpoint or any part of it (its query string may hold a secret).
    fn check_endpoint(&self, endpoint: &str) -> Result<(), String> {
        let _ = endpoint;
        Ok(())
    }
}

#[async_trait]
impl<T: Kicker + ?Sized> Kicker for Arc<T> {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        (**self).kick(endpoint, payload, timeout).await
    }

    async fn kick_node(&self, node: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        (**self).kick_node(node, payload, timeout).await
    }

    fn check_endpoint(&self, endpoint: &str) -> Result<(), String> {
        (**self).check_endpoint(endpoint)
    }
}

#[async_trait]
impl<T: Kicker + ?Sized> Kicker for Box<T> {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        (**self).kick(endpoint, payload, timeout).await
    }

    async fn kick_node(&self, node: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        (**self).kick_node(node, payload, timeout).await
    }

    fn check_endpoint(&self, endpoint: &str) -> Result<(), String> {
        (**self).check_endpoint(endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn _object_safe(_: Box<dyn Kicker>) {}

    /// Refuses every endpoint holding "bad"; never kicks.
    struct Picky;

    #[async_trait]
    impl Kicker for Picky {
        async fn kick(&self, _: &str, _: &KickPayload, _: Duration) -> KickOutcome {
            unreachable!("only check_endpoint is called")
        }

        fn check_endpoint(&self, endpoint: &str) -> Result<(), String> {
            if endpoint.contains("bad") {
                Err("refused".to_owned())
            } else {
                Ok(())
            }
        }
    }

    /// Accepts everything: the provided method.
    struct Lenient;

    #[async_trait]
    impl Kicker for Lenient {
        async fn kick(&self, _: &str, _: &KickPayload, _: Duration) -> KickOutcome {
            unreachable!("only check_endpoint is called")
        }
    }

    #[test]
    fn check_endpoint_defaults_to_accepting_and_passes_through_arc_and_box() {
        assert_eq!(Lenient.check_endpoint("http://bad/"), Ok(()));
        let boxed: Box<dyn Kicker> = Box::new(Picky);
        let shared: Arc<dyn Kicker> = Arc::new(Picky);
        for kicker in [&boxed as &dyn Kicker, &shared] {
            assert_eq!(
                kicker.check_endpoint("http://bad/"),
                Err("refused".to_owned())
            );
            assert_eq!(kicker.check_endpoint("http://good/"), Ok(()));
        }
    }
}
