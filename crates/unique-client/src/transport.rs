//! How a client reaches the arbitration: the [`Transport`] trait.

use std::sync::Arc;

use async_trait::async_trait;
use unique_core::{
    Arbiter, ClaimInput, ClaimOutcome, CurrentView, Error, Key, MAX_BATCH_KEYS, PoolRequest,
    PooledOutcome, ReleaseReason, Store,
};

/// The calls a client makes to the arbitration, over any medium.
///
/// # Contract
///
/// - Errors are [`unique_core::Error`]: `InvalidParams` for input the arbitration rejected
///   (retrying cannot help), `Throttled` when the store throttled, and `Unavailable` for
///   everything else, transport failures included (refused or reset connections,
///   timeouts, unexpected statuses, unparseable answers).
/// - A transport SHOULD bound each call by its own timeout; the [`Claimer`](crate::Claimer)
///   and [`Heartbeat`](crate::Heartbeat) also bound calls by their own budgets, so a
///   transport that hangs cannot hang them forever.
/// - `claim` is safe to repeat with the same claim_id: the arbitration answers a repeat of a
///   claim that already succeeded from its replay short-circuit, without a second kick.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Claims `request.key` for `request.owner` (kick-then-write on the server side).
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error>;

    /// Claims a place in the pool of `request.key`'s user (its slot must be the default
    /// `""`) for `request.owner`: the lowest free place below the pool's limit, or at the
    /// limit, by `pool.policy`, the oldest login's place (kicked first) or nothing
    /// (`docs/design.md#pooled-sessions`). The answer's `slot` is the place (`#0`, `#1`, …):
    /// the slot of the session's key for every later call. Safe to repeat with the same
    /// claim_id, as [`claim`](Transport::claim) is (the replay names the same place).
    ///
    /// Errors as [`claim`](Transport::claim), and [`Error::LimitReached`] (not retryable,
    /// never superseded) when `deny-new` finds every place online.
    ///
    /// The default refuses with `InvalidParams`: a transport that predates pools cannot send
    /// one. `unique-client-http` sends `"pool"` in `POST /v1/claim`; the in-process
    /// [`Arbiter`] calls [`Arbiter::claim_pooled`].
    async fn claim_pooled(
        &self,
        request: &ClaimInput,
        pool: &PoolRequest,
    ) -> Result<PooledOutcome, Error> {
        let _ = (request, pool);
        Err(Error::invalid(
            "this transport cannot claim pooled sessions",
        ))
    }

    /// Reads the self-eviction baseline of `key`.
    async fn current(&self, key: &Key) -> Result<CurrentView, Error>;

    /// Tombstones the session at `generation`; `false` when that gen no longer holds the key
    /// (or `generation <= 0`).
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error>;

    /// Tombstones the session at `generation` as [`release`](Transport::release) does,
    /// telling the arbitration why, so that a server can count and audit it (what
    /// [`Node::drain`](crate::Node::drain) sends, with [`ReleaseReason::NodeDraining`]). The
    /// reason changes nothing about what is released.
    ///
    /// The default ignores `reason` and calls [`release`](Transport::release): correct for
    /// any transport, the reason being only told. `unique-client-http` sends it in the
    /// request's `reason`; the in-process [`Arbiter`] keeps the default, having no audit
    /// log and no per-request metrics to tell.
    async fn release_with_reason(
        &self,
        key: &Key,
        generation: i64,
        reason: ReleaseReason,
    ) -> Result<bool, Error> {
        let _ = reason;
        self.release(key, generation).await
    }

    /// Reads the self-eviction baselines of several keys (any number, any mix of tenants),
    /// answering in the order of `keys`; what [`Heartbeat`](crate::Heartbeat) sends for all
    /// the sessions due together. An inner error concerns that key alone; the outer error
    /// fails every key.
    ///
    /// The default calls [`current`](Transport::current) once per key, one after another, each
    /// result in its place (so no outer error): correct for any transport, but one call per
    /// key. Transports with a batch call override it (`unique-client-http` sends one request
    /// per [`MAX_BATCH_KEYS`] keys; the in-process [`Arbiter`] one store round trip).
    async fn current_batch(&self, keys: &[Key]) -> Result<Vec<Result<CurrentView, Error>>, Error> {
        let mut views = Vec::with_capacity(keys.len());
        for key in keys {
            views.push(self.current(key).await);
        }
        Ok(views)
    }
}

/// Pass-through impls, so a shared or boxed transport is a transport.
macro_rules! forward_transport {
    ($ty:ty) => {
        #[async_trait]
        impl<T: Transport + ?Sized> Transport for $ty {
            async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
                (**self).claim(request).await
            }
            async fn claim_pooled(
                &self,
                request: &ClaimInput,
                pool: &PoolRequest,
            ) -> Result<PooledOutcome, Error> {
                (**self).claim_pooled(request, pool).await
            }
            async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
                (**self).current(key).await
            }
            async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
                (**self).release(key, generation).await
            }
            async fn release_with_reason(
                &self,
                key: &Key,
                generation: i64,
                reason: ReleaseReason,
            ) -> Result<bool, Error> {
                (**self).release_with_reason(key, generation, reason).await
            }
            async fn current_batch(
                &self,
                keys: &[Key],
            ) -> Result<Vec<Result<CurrentView, Error>>, Error> {
                (**self).current_batch(keys).await
            }
        }
    };
}

forward_transport!(Arc<T>);
forward_transport!(Box<T>);

/// An in-process [`Arbiter`] is a transport too: single-process deployments and tests
/// can drive the client side against it without any network.
#[async_trait]
impl<S: Store> Transport for Arbiter<S> {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        Arbiter::claim(self, request).await
    }
    async fn claim_pooled(
        &self,
        request: &ClaimInput,
        pool: &PoolRequest,
    ) -> Result<PooledOutcome, Error> {
        Arbiter::claim_pooled(self, request, pool).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        Arbiter::current(self, key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        Arbiter::release(self, key, generation).await
    }
    /// One [`Arbiter::current_batch`] per [`MAX_BATCH_KEYS`] keys.
    async fn current_batch(&self, keys: &[Key]) -> Result<Vec<Result<CurrentView, Error>>, Error> {
        let mut views = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MAX_BATCH_KEYS) {
            views.extend(Arbiter::current_batch(self, chunk).await?);
        }
        Ok(views)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn _object_safe(_: Box<dyn Transport>) {}
}
