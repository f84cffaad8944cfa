//! [`MetricsObserver`]: claims, replays, attempts, latency, kicks and releases.

use std::time::Duration;

use metrics::{Counter, Histogram, Unit};
use unique_core::{ClaimOutcome, Error, Key, KickDetail, Observer, ShedReason};

use crate::{
    CLAIM_ATTEMPTS, CLAIM_DURATION_SECONDS, CLAIM_REPLAYS_TOTAL, CLAIMS_SHED_TOTAL, CLAIMS_TOTAL,
    KICKS_TOTAL, RELEASES_TOTAL,
};

/// The `result` label of a successful claim; failures carry their [`Error::code`].
const OK: &str = "ok";
/// Claim results with a handle of their own: `ok` and every error code.
const CLAIM_RESULTS: [&str; 6] = [
    OK,
    "invalid_params",
    "throttled",
    "unavailable",
    "superseded",
    "limit_reached",
];
/// The `detail` label of a confirmed kick; failed kicks carry their [`KickDetail`].
const CONFIRMED: &str = "confirmed";

/// An [`Observer`] that records every claim, kick and release through the `metrics` facade.
///
/// | metric | kind | labels |
/// |---|---|---|
/// | `unique_claims_total` | counter | `result`: `ok`, `invalid_params`, `throttled`, `unavailable`, `superseded`, `limit_reached` (a `deny-new` pool at its limit) |
/// | `unique_claims_shed_total` | counter | `reason`: `queue-full`, `deadline` |
/// | `unique_claim_replays_total` | counter | — |
/// | `unique_claim_attempts` | histogram | — |
/// | `unique_claim_duration_seconds` | histogram | — |
/// | `unique_kicks_total` | counter | `detail`: `confirmed`, `no-endpoint`, `self-replace-skipped`, `timeout`, `connect-error`, `non-2xx` |
/// | `unique_releases_total` | counter | `released`: `true`, `false` |
///
/// Every handle is registered (and every metric described) by [`new`](Self::new) with the
/// recorder in force then, so **install the recorder first**; afterwards an event costs an
/// array index and the recorder's own update, with no lookup and no allocation. Every label
/// value is registered at once, so a counter that never moved reads 0 instead of missing.
#[derive(Debug, Clone)]
pub struct MetricsObserver {
    /// Indexed like [`CLAIM_RESULTS`].
    claims: [Counter; 6],
    /// Indexed like [`ShedReason::ALL`].
    shed: [Counter; ShedReason::ALL.len()],
    replays: Counter,
    attempts: Histogram,
    duration: Histogram,
    /// `confirmed`, then [`KickDetail::ALL`] in order.
    kicks: [Counter; 1 + KickDetail::ALL.len()],
    /// `[false, true]`.
    releases: [Counter; 2],
}

impl Default for MetricsObserver {
    fn default() -> Self {
        Self::new()
    }
}

impl MetricsObserver {
    /// Describes the metrics and registers every handle with the current recorder.
    pub fn new() -> Self {
        metrics::describe_counter!(
            CLAIMS_TOTAL,
            "Claims by result: ok, or the error code they failed with"
        );
        metrics::describe_counter!(
            CLAIM_REPLAYS_TOTAL,
            "Claims answered as a replay of a claim that already won (same claim_id; no kick, no write)"
        );
        metrics::describe_histogram!(
            CLAIM_ATTEMPTS,
            "Store attempts per claim that reached the store; above 1 after lost races"
        );
        metrics::describe_histogram!(
            CLAIM_DURATION_SECONDS,
            Unit::Seconds,
            "Wall time of a claim, validation, kick and store included"
        );
        metrics::describe_counter!(
            KICKS_TOTAL,
            "Kick decisions by detail: confirmed (2xx), or why the old session is presumed offline"
        );
        metrics::describe_counter!(
            CLAIMS_SHED_TOTAL,
            "Claims shed by the arbiter's own bounds: a full line of claims on one key (throttled), a passed claim deadline (unavailable)"
        );
        metrics::describe_counter!(
            RELEASES_TOTAL,
            "Releases that finished, by whether the session was tombstoned"
        );
        let mut kicks = [CONFIRMED; 1 + KickDetail::ALL.len()];
        for (label, detail) in kicks[1..].iter_mut().zip(KickDetail::ALL) {
            *label = detail.as_str();
        }
        Self {
            claims: CLAIM_RESULTS.map(|result| metrics::counter!(CLAIMS_TOTAL, "result" => result)),
            shed: ShedReason::ALL
                .map(|reason| metrics::counter!(CLAIMS_SHED_TOTAL, "reason" => reason.as_str())),
            replays: metrics::counter!(CLAIM_REPLAYS_TOTAL),
            attempts: metrics::histogram!(CLAIM_ATTEMPTS),
            duration: metrics::histogram!(CLAIM_DURATION_SECONDS),
            kicks: kicks.map(|detail| metrics::counter!(KICKS_TOTAL, "detail" => detail)),
            releases: ["false", "true"]
                .map(|released| metrics::counter!(RELEASES_TOTAL, "released" => released)),
        }
    }

    fn claim_counter(&self, result: &Result<ClaimOutcome, Error>) -> Option<&Counter> {
        let code = match result {
            Ok(_) => OK,
            Err(e) => e.code(),
        };
        let index = CLAIM_RESULTS.iter().position(|r| *r == code)?;
        Some(&self.claims[index])
    }
}

impl Observer for MetricsObserver {
    fn on_claim(&self, result: &Result<ClaimOutcome, Error>, attempts: u32, took: Duration) {
        match self.claim_counter(result) {
            Some(counter) => counter.increment(1),
            // An error code added after this crate was written: registered on first sight.
            None => {
                if let Err(e) = result {
                    metrics::counter!(CLAIMS_TOTAL, "result" => e.code()).increment(1);
                }
            }
        }
        if matches!(result, Ok(outcome) if outcome.replayed) {
            self.replays.increment(1);
        }
        // Claims refused before the store (attempts == 0) made no attempt to count.
        if attempts > 0 {
            self.attempts.record(f64::from(attempts));
        }
        self.duration.record(took.as_secs_f64());
    }

    fn on_kick(&self, detail: Option<KickDetail>, _success: bool) {
        let Some(detail) = detail else {
            self.kicks[0].increment(1);
            return;
        };
        match KickDetail::ALL.iter().position(|d| *d == detail) {
            Some(index) => self.kicks[1 + index].increment(1),
            // A detail missing from `ALL` (never expected): registered on sight, no panic.
            None => metrics::counter!(KICKS_TOTAL, "detail" => detail.as_str()).increment(1),
        }
    }

    fn on_release(&self, _key: &Key, released: bool) {
        self.releases[usize::from(released)].increment(1);
    }

    fn on_claim_shed(&self, reason: ShedReason) {
        match ShedReason::ALL.iter().position(|r| *r == reason) {
            Some(index) => self.shed[index].increment(1),
            None => metrics::counter!(CLAIMS_SHED_TOTAL, "reason" => reason.as_str()).increment(1),
        }
    }
}
