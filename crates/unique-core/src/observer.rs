//! Hooks for metrics and logs on every claim, kick and release.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::log_budget::LogBudget;
use crate::types::{ClaimOutcome, Key, KickDetail, LogoutOutcome};

/// Called synchronously by the [`Arbiter`](crate::Arbiter).
///
/// # Contract
///
/// Implementations MUST NOT block and MUST NOT panic. Every method has a no-op
/// default, so an observer implements only what it needs.
///
/// - `on_claim` once per claim, success or failure (validation failures included,
///   with `attempts == 0`).
/// - `on_kick` once per kick decision, synthesised ones (`no-endpoint`,
///   `self-replace-skipped`) included; a re-kick on a retried attempt counts again.
///   `detail` is `None` exactly when `success` is true.
/// - `on_release` once per release that finished without error (a `gen <= 0`
///   no-op included, reported as not released).
/// - `on_claim_shed` once per claim the Arbiter refused to go on with for its own
///   bounds (a full claim line, a passed claim deadline), before its `on_claim`.
/// - `on_logout` once per admin logout that finished without error, after the
///   `on_kick` of its kick when it released a session (a logout is not reported to
///   `on_release`).
pub trait Observer: Send + Sync + 'static {
    /// A claim finished after `attempts` store attempts and `took` wall time.
    fn on_claim(&self, result: &Result<ClaimOutcome, Error>, attempts: u32, took: Duration) {
        let _ = (result, attempts, took);
    }
    /// A kick decision was made.
    fn on_kick(&self, detail: Option<KickDetail>, success: bool) {
        let _ = (detail, success);
    }
    /// A release finished.
    fn on_release(&self, key: &Key, released: bool) {
        let _ = (key, released);
    }
    /// A claim was shed: refused or stopped by the Arbiter's own bounds.
    fn on_claim_shed(&self, reason: ShedReason) {
        let _ = reason;
    }
    /// An admin logout finished ([`Arbiter::logout`](crate::Arbiter::logout)).
    fn on_logout(&self, key: &Key, outcome: &LogoutOutcome) {
        let _ = (key, outcome);
    }
}

/// Why the Arbiter shed a claim (see [`Observer::on_claim_shed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShedReason {
    /// Too many claims already waited on the key
    /// ([`max_queued_claims`](crate::ArbiterBuilder::max_queued_claims)): `Throttled`.
    QueueFull,
    /// The claim's deadline ([`claim_timeout`](crate::ArbiterBuilder::claim_timeout))
    /// passed before its next kick or write: `Unavailable`.
    Deadline,
}

impl ShedReason {
    /// Every reason, in a fixed order (for metrics handles).
    pub const ALL: [Self; 2] = [Self::QueueFull, Self::Deadline];

    /// The stable lower-case name: `queue-full`, `deadline`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue-full",
            Self::Deadline => "deadline",
        }
    }
}

impl<T: Observer + ?Sized> Observer for Arc<T> {
    fn on_claim(&self, result: &Result<ClaimOutcome, Error>, attempts: u32, took: Duration) {
        (**self).on_claim(result, attempts, took);
    }
    fn on_kick(&self, detail: Option<KickDetail>, success: bool) {
        (**self).on_kick(detail, success);
    }
    fn on_release(&self, key: &Key, released: bool) {
        (**self).on_release(key, released);
    }
    fn on_claim_shed(&self, reason: ShedReason) {
        (**self).on_claim_shed(reason);
    }
    fn on_logout(&self, key: &Key, outcome: &LogoutOutcome) {
        (**self).on_logout(key, outcome);
    }
}

/// Both observers, `A` first: e.g. `(TracingObserver, metrics)` logs and counts every event.
impl<A: Observer, B: Observer> Observer for (A, B) {
    fn on_claim(&self, result: &Result<ClaimOutcome, Error>, attempts: u32, took: Duration) {
        self.0.on_claim(result, attempts, took);
        self.1.on_claim(result, attempts, took);
    }
    fn on_kick(&self, detail: Option<KickDetail>, success: bool) {
        self.0.on_kick(detail, success);
        self.1.on_kick(detail, success);
    }
    fn on_release(&self, key: &Key, released: bool) {
        self.0.on_release(key, released);
        self.1.on_release(key, released);
    }
    fn on_claim_shed(&self, reason: ShedReason) {
        self.0.on_claim_shed(reason);
        self.1.on_claim_shed(reason);
    }
    fn on_logout(&self, key: &Key, outcome: &LogoutOutcome) {
        self.0.on_logout(key, outcome);
        self.1.on_logout(key, outcome);
    }
}

/// Observes nothing. The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl Observer for NoopObserver {}

/// Failed claims [`TracingObserver`] logs whole per 10 s; past it they are counted and
/// one line says how many were left out (the metrics count them all).
static CLAIM_FAILURES_LOGGED: LogBudget = LogBudget::new(20, Duration::from_secs(10));

/// Emits one structured `tracing` event per call, target `unique`.
///
/// Levels: failed claims at `warn` (at most 20 per 10 s, see [`LogBudget`]); superseded and shed claims, kicks that did not
/// confirm and admin logouts (an operator's act, rare) at `info`; successful claims,
/// confirmed kicks and releases at `debug` (a busy server must not log every request by
/// default).
///
/// Events carry gens, flags, kick details, attempt counts and durations; never an
/// owner endpoint (which may hold a secret in its query string).
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingObserver;

impl Observer for TracingObserver {
    fn on_claim(&self, result: &Result<ClaimOutcome, Error>, attempts: u32, took: Duration) {
        let took_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        match result {
            Ok(o) => tracing::debug!(
                target: "unique",
                generation = o.generation,
                prev_generation = o.prev_generation,
                has_prev = o.has_prev,
                kicked = o.kicked,
                kick_detail = o.kick_detail.map(KickDetail::as_str),
                replayed = o.replayed,
                attempts,
                took_us,
                "claim ok"
            ),
            // A superseded retry is a normal end of a replaced login, not a fault.
            Err(e) if e.is_superseded() => tracing::info!(
                target: "unique",
                error = %e,
                code = e.code(),
                attempts,
                took_us,
                "claim superseded"
            ),
            // A store that refuses every write fails every claim: a bounded number of lines.
            Err(e) => {
                if CLAIM_FAILURES_LOGGED.admit("claim failed") {
                    tracing::warn!(
                        target: "unique",
                        error = %e,
                        code = e.code(),
                        attempts,
                        took_us,
                        "claim failed"
                    );
                }
            }
        }
    }

    fn on_kick(&self, detail: Option<KickDetail>, success: bool) {
        match detail {
            None => tracing::debug!(target: "unique", success, "kick"),
            Some(detail) => {
                tracing::info!(target: "unique", success, detail = detail.as_str(), "kick");
            }
        }
    }

    fn on_release(&self, key: &Key, released: bool) {
        tracing::debug!(target: "unique", key = %key, released, "release");
    }

    fn on_claim_shed(&self, reason: ShedReason) {
        tracing::info!(target: "unique", reason = reason.as_str(), "claim shed");
    }

    fn on_logout(&self, key: &Key, outcome: &LogoutOutcome) {
        tracing::info!(
            target: "unique",
            key = %key,
            released = outcome.released,
            generation = outcome.generation,
            kicked = outcome.kicked,
            kick_detail = outcome.kick_detail.map(KickDetail::as_str),
            "admin logout"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn _object_safe(_: Box<dyn Observer>) {}

    /// Writes every call it sees into a shared log, tagged with its name.
    struct Recording {
        name: &'static str,
        log: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl Observer for Recording {
        fn on_claim(&self, result: &Result<ClaimOutcome, Error>, attempts: u32, _: Duration) {
            let code = result.as_ref().map_or_else(Error::code, |_| "ok");
            self.push(&format!("claim {code} {attempts}"));
        }
        fn on_kick(&self, detail: Option<KickDetail>, success: bool) {
            let detail = detail.map_or("confirmed", KickDetail::as_str);
            self.push(&format!("kick {detail} {success}"));
        }
        fn on_release(&self, key: &Key, released: bool) {
            self.push(&format!("release {key} {released}"));
        }
        fn on_claim_shed(&self, reason: ShedReason) {
            self.push(&format!("shed {}", reason.as_str()));
        }
        fn on_logout(&self, key: &Key, outcome: &LogoutOutcome) {
            self.push(&format!("logout {key} {}", outcome.released));
        }
    }

    impl Recording {
        fn push(&self, event: &str) {
            self.log
                .lock()
                .unwrap()
                .push(format!("{}: {event}", self.name));
        }
    }

    #[test]
    fn a_pair_passes_every_call_to_both_first_then_second() {
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let named = |name| Recording {
            name,
            log: Arc::clone(&log),
        };
        let pair = (named("a"), named("b"));
        pair.on_claim(&Err(Error::Throttled), 2, Duration::ZERO);
        pair.on_kick(Some(KickDetail::Non2xx), false);
        pair.on_kick(None, true);
        pair.on_release(&Key::new("p", "e", 7), true);
        pair.on_claim_shed(ShedReason::Deadline);
        let logged_out = LogoutOutcome {
            released: true,
            generation: 3,
            kicked: true,
            kick_detail: None,
        };
        pair.on_logout(&Key::new("p", "e", 8), &logged_out);
        Arc::new(named("c")).on_logout(&Key::new("p", "e", 9), &logged_out);
        assert_eq!(
            *log.lock().unwrap(),
            [
                "a: claim throttled 2",
                "b: claim throttled 2",
                "a: kick non-2xx false",
                "b: kick non-2xx false",
                "a: kick confirmed true",
                "b: kick confirmed true",
                "a: release p#e#7 true",
                "b: release p#e#7 true",
                "a: shed deadline",
                "b: shed deadline",
                "a: logout p#e#8 true",
                "b: logout p#e#8 true",
                "c: logout p#e#9 true",
            ]
        );
    }
}
