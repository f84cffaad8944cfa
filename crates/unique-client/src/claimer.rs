//! Logging in and out with bounded, jittered retries.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, sleep, timeout_at};
use unique_core::{
    ClaimInput, ClaimOutcome, Error, Key, Owner, PoolRequest, PooledOutcome, ReleaseReason, UserKey,
};

use crate::jitter::Jitter;
use crate::transport::Transport;

/// Retry policy of a [`Claimer`]. Defaults: backoff from 100 ms, ×2 per retry, capped at
/// 2 s, full jitter, 25 s total budget.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClaimerOptions {
    /// Nominal wait before the first retry.
    pub initial_backoff: Duration,
    /// Factor applied to the nominal wait after each retry.
    pub backoff_multiplier: u32,
    /// Largest nominal wait.
    pub max_backoff: Duration,
    /// Total time a login may take, from its first attempt: no attempt starts once it is
    /// spent, and an attempt still in flight at that moment is abandoned.
    pub budget: Duration,
    /// How a nominal wait becomes the slept wait ([`Jitter::full`] by default).
    pub jitter: Jitter,
}

impl Default for ClaimerOptions {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(100),
            backoff_multiplier: 2,
            max_backoff: Duration::from_secs(2),
            budget: Duration::from_secs(25),
            jitter: Jitter::full(),
        }
    }
}

impl ClaimerOptions {
    /// Sets [`initial_backoff`](Self::initial_backoff).
    #[must_use]
    pub fn initial_backoff(mut self, wait: Duration) -> Self {
        self.initial_backoff = wait;
        self
    }

    /// Sets [`backoff_multiplier`](Self::backoff_multiplier).
    #[must_use]
    pub fn backoff_multiplier(mut self, factor: u32) -> Self {
        self.backoff_multiplier = factor;
        self
    }

    /// Sets [`max_backoff`](Self::max_backoff).
    #[must_use]
    pub fn max_backoff(mut self, wait: Duration) -> Self {
        self.max_backoff = wait;
        self
    }

    /// Sets [`budget`](Self::budget).
    #[must_use]
    pub fn budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// Sets [`jitter`](Self::jitter).
    #[must_use]
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }
}

/// A successful login: the arbitration's outcome and the claim_id that won it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    /// What the arbitration answered (gen, previous session, kick report, replay flag).
    pub outcome: ClaimOutcome,
    /// The claim_id sent on every attempt of this login.
    pub claim_id: String,
    /// How many claim attempts it took (1 = no retry).
    pub attempts: u32,
}

impl Login {
    /// The session's fencing gen: pass it to the heartbeat, the kick handler's table and
    /// the eventual release.
    pub fn generation(&self) -> i64 {
        self.outcome.generation
    }
}

/// A successful pooled login ([`Claimer::login_pooled`]): the place the server chose and
/// the login on that place's key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PooledLogin {
    /// The session's key: the user's, on the place taken (`#0`, `#1`, …). Every later call
    /// (heartbeat, release, logout) names it.
    pub key: Key,
    /// The login on that key: the claim's outcome (for an eviction, `prev_gen`,
    /// `prev_owner`, `kicked` and `kick_detail` describe the evicted session), the
    /// claim_id and the attempts.
    pub login: Login,
    /// The login took the place of the oldest online session (`evict-oldest` at the limit).
    pub evicted: bool,
}

impl PooledLogin {
    /// The place taken: the key's slot (`#0`, `#1`, …).
    pub fn slot(&self) -> &str {
        &self.key.slot
    }
}

/// A login (or logout) that did not succeed.
///
/// Keeps the claim_id: after `Unavailable` the claim may still have been applied on the
/// server, and [`Claimer::login_with_claim_id`] with the same id is then answered by the
/// replay short-circuit instead of kicking again. After `Superseded` the login is over for
/// good: its claim did win a gen, but another login replaced it (or it was logged out)
/// before this attempt got the answer; resuming with the same id is superseded again, and a
/// new login (a new claim_id) would kick the session that replaced it.
#[derive(Debug)]
pub struct LoginError {
    /// The last error: `InvalidParams` or `Superseded` (never retried), or the last
    /// `Throttled` / `Unavailable` when the budget ran out.
    pub error: Error,
    /// The claim_id the login used (empty for a logout).
    pub claim_id: String,
    /// How many attempts were made.
    pub attempts: u32,
}

impl LoginError {
    /// The login was replaced or logged out while its claim was in flight
    /// ([`Error::Superseded`]): it won a gen that another login has since taken. Nothing was
    /// kicked by the attempt that learnt it; do not retry it.
    pub fn is_superseded(&self) -> bool {
        self.error.is_superseded()
    }

    /// A pooled `deny-new` login found every place of the user's pool online
    /// ([`Error::LimitReached`], which lists them). Not retried; nothing was kicked or
    /// written.
    pub fn is_limit_reached(&self) -> bool {
        self.error.is_limit_reached()
    }
}

impl fmt::Display for LoginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gave up after {} attempt(s): {}",
            self.attempts, self.error
        )
    }
}

impl std::error::Error for LoginError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<LoginError> for Error {
    fn from(e: LoginError) -> Self {
        e.error
    }
}

/// Logs sessions in (and out) through a [`Transport`], retrying what is worth retrying.
///
/// Every login gets one fresh claim_id (a random UUIDv4: 122 random bits) that is sent
/// unchanged on each retry, so a retry of a claim whose response was lost is answered by the
/// arbitration's replay short-circuit: no second kick, same gen (I4). `Throttled` and
/// `Unavailable` (transport failures included) are retried with exponential backoff and
/// jitter within the budget; `InvalidParams` fails at once, and so does `Superseded`: the
/// claim won a gen whose answer was lost, and another login (or a logout) has taken the key
/// since, so the login is over (C9) and a further try would only be superseded again.
#[derive(Debug, Clone)]
pub struct Claimer<T> {
    transport: T,
    options: ClaimerOptions,
}

impl<T: Transport> Claimer<T> {
    /// A claimer with the default [`ClaimerOptions`].
    pub fn new(transport: T) -> Self {
        Self::with_options(transport, ClaimerOptions::default())
    }

    /// A claimer with the given retry policy.
    pub fn with_options(transport: T, options: ClaimerOptions) -> Self {
        Self { transport, options }
    }

    /// The transport it claims through.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Its retry policy.
    pub fn options(&self) -> &ClaimerOptions {
        &self.options
    }

    /// Claims `key` for `owner` with a fresh claim_id, retrying within the budget.
    ///
    /// Errors: `InvalidParams` at once; `Superseded` at once, when an earlier attempt's claim
    /// won a gen whose answer was lost and another login or a logout took the key since
    /// (its gen and the key's gen now; see [`LoginError::is_superseded`]); otherwise the last
    /// `Throttled` / `Unavailable` once the budget is spent. Either way the error carries the
    /// claim_id used.
    pub async fn login(&self, key: Key, owner: Owner) -> Result<Login, LoginError> {
        self.login_with_claim_id(key, owner, new_claim_id()).await
    }

    /// Like [`login`](Self::login), but with a caller-chosen claim_id: resumes a login that
    /// gave up (reusing its [`LoginError::claim_id`]) without risking a second kick.
    pub async fn login_with_claim_id(
        &self,
        key: Key,
        owner: Owner,
        claim_id: String,
    ) -> Result<Login, LoginError> {
        let request = ClaimInput {
            key,
            owner,
            claim_id,
        };
        match self.retry("claim", || self.transport.claim(&request)).await {
            Ok((outcome, attempts)) => Ok(Login {
                outcome,
                claim_id: request.claim_id,
                attempts,
            }),
            Err((error, attempts)) => Err(LoginError {
                error,
                claim_id: request.claim_id,
                attempts,
            }),
        }
    }

    /// Claims a place in `user`'s pool for `owner` with a fresh claim_id, retrying within
    /// the budget as [`login`](Self::login) does (every retry sends the same claim_id, so
    /// a retry of a claim whose answer was lost is answered with the place it took). The
    /// server picks the place (`docs/design.md#pooled-sessions`): the lowest free one below
    /// the pool's limit, or at the limit the oldest login's (`evict-oldest`, kicked first).
    ///
    /// Errors: as [`login`](Self::login), and [`Error::LimitReached`] at once, listing the
    /// places online, when `deny-new` finds the pool full
    /// ([`LoginError::is_limit_reached`]); `InvalidParams` for a limit outside 1 to the
    /// project's session limit, or a transport that cannot claim pooled sessions.
    pub async fn login_pooled(
        &self,
        user: &UserKey,
        owner: Owner,
        pool: PoolRequest,
    ) -> Result<PooledLogin, LoginError> {
        self.login_pooled_with_claim_id(user, owner, pool, new_claim_id())
            .await
    }

    /// Like [`login_pooled`](Self::login_pooled), with a caller-chosen claim_id: resumes a
    /// pooled login that gave up (reusing its [`LoginError::claim_id`]); the server answers
    /// it with the place it took, without a second kick or a second place.
    pub async fn login_pooled_with_claim_id(
        &self,
        user: &UserKey,
        owner: Owner,
        pool: PoolRequest,
        claim_id: String,
    ) -> Result<PooledLogin, LoginError> {
        let request = ClaimInput {
            key: user.key(""),
            owner,
            claim_id,
        };
        let answered = self
            .retry("claim", || self.transport.claim_pooled(&request, &pool))
            .await;
        match answered {
            Ok((outcome, attempts)) => {
                let PooledOutcome {
                    slot,
                    evicted,
                    claim,
                } = outcome;
                Ok(PooledLogin {
                    key: user.key(slot),
                    login: Login {
                        outcome: claim,
                        claim_id: request.claim_id,
                        attempts,
                    },
                    evicted,
                })
            }
            Err((error, attempts)) => Err(LoginError {
                error,
                claim_id: request.claim_id,
                attempts,
            }),
        }
    }

    /// Releases (tombstones) the session at `generation`, with the same retry policy.
    ///
    /// Returns `false` when that gen no longer holds the key (a newer session replaced it,
    /// or `generation <= 0`); a repeated release at the same gen returns `true` again, so
    /// retrying is safe.
    pub async fn logout(&self, key: &Key, generation: i64) -> Result<bool, LoginError> {
        self.logout_with_reason(key, generation, None).await
    }

    /// As [`logout`](Self::logout), telling the server why when `reason` is given
    /// ([`Transport::release_with_reason`]).
    pub async fn logout_with_reason(
        &self,
        key: &Key,
        generation: i64,
        reason: Option<ReleaseReason>,
    ) -> Result<bool, LoginError> {
        self.retry("release", || async move {
            match reason {
                Some(reason) => {
                    self.transport
                        .release_with_reason(key, generation, reason)
                        .await
                }
                None => self.transport.release(key, generation).await,
            }
        })
        .await
        .map(|(released, _)| released)
        .map_err(|(error, attempts)| LoginError {
            error,
            claim_id: String::new(),
            attempts,
        })
    }

    /// Runs `call` until it succeeds, fails with a non-retryable error, or the budget is
    /// spent. Returns the value or the last error, with the number of attempts.
    async fn retry<R, F, Fut>(&self, what: &str, mut call: F) -> Result<(R, u32), (Error, u32)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<R, Error>>,
    {
        let o = &self.options;
        let deadline = Instant::now() + o.budget;
        let mut nominal = o.initial_backoff.min(o.max_backoff);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let result = timeout_at(deadline, call()).await.unwrap_or_else(|_| {
                Err(Error::unavailable(format!(
                    "{what} still in flight when the retry budget ran out"
                )))
            });
            let error = match result {
                Ok(value) => return Ok((value, attempts)),
                Err(error) if error.is_superseded() => {
                    // Not a failure to reach the server: the login is over (C9).
                    tracing::info!(what, attempts, %error, "superseded, not retrying");
                    return Err((error, attempts));
                }
                Err(error) if !error.is_retryable() => return Err((error, attempts)),
                Err(error) => error,
            };
            let wait = o.jitter.apply(nominal);
            // An attempt that would start at or after the deadline has no time to run.
            if Instant::now() + wait >= deadline {
                tracing::warn!(what, attempts, %error, "retry budget spent");
                return Err((error, attempts));
            }
            tracing::debug!(what, attempts, %error, ?wait, "retrying");
            sleep(wait).await;
            nominal = nominal
                .saturating_mul(o.backoff_multiplier)
                .min(o.max_backoff);
        }
    }
}

/// A fresh claim_id: a random (v4) UUID, 122 random bits, hyphenated lower-case.
pub(crate) fn new_claim_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_ids_are_random_v4_uuids() {
        let a = new_claim_id();
        let b = new_claim_id();
        assert_ne!(a, b);
        let parsed = uuid::Uuid::parse_str(&a).expect("a uuid");
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(a.len(), 36);
    }

    #[test]
    fn login_error_keeps_its_source_and_converts() {
        let e = LoginError {
            error: Error::Throttled,
            claim_id: "c".into(),
            attempts: 3,
        };
        assert_eq!(
            e.to_string(),
            "gave up after 3 attempt(s): throttled by the store"
        );
        assert!(std::error::Error::source(&e).is_some());
        assert!(Error::from(e).is_throttled());
    }
}
