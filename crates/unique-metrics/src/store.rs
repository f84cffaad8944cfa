//! [`MeteredStore`]: latency, errors and lost races of every store operation.

use std::future::Future;
use std::time::Instant;

use metrics::{Counter, Histogram, Unit};
use unique_core::{
    CasOutcome, CurrentView, Error, Key, Owner, OwnerState, Store, UserKey, UserSession,
    VacantClaim, VacantClaims, async_trait,
};

use crate::{STORE_ERRORS_TOTAL, STORE_LOST_RACES_TOTAL, STORE_OPERATION_DURATION_SECONDS};

/// The `operation` label values, indexed by [`Operation`].
const OPERATIONS: [&str; 7] = [
    "read_owner",
    "claim_cas",
    "current",
    "release",
    "read_owners",
    "list_sessions",
    "claim_vacant",
];
/// The `kind` label values of store errors: the [`Error::code`]s.
const ERROR_KINDS: [&str; 3] = ["throttled", "unavailable", "invalid_params"];

#[derive(Debug, Clone, Copy)]
enum Operation {
    ReadOwner = 0,
    ClaimCas = 1,
    Current = 2,
    Release = 3,
    ReadOwners = 4,
    ListSessions = 5,
    ClaimVacant = 6,
}

/// The handles of one operation.
#[derive(Debug, Clone)]
struct Handles {
    duration: Histogram,
    /// Indexed like [`ERROR_KINDS`].
    errors: [Counter; 3],
}

/// A [`Store`] that records how long each operation of the store it wraps takes, and how
/// each failed, through the `metrics` facade.
///
/// | metric | kind | labels |
/// |---|---|---|
/// | `unique_store_operation_duration_seconds` | histogram | `operation`: `read_owner`, `claim_cas`, `claim_vacant`, `current`, `release`, `read_owners` (one per batch), `list_sessions` |
/// | `unique_store_errors_total` | counter | `operation`; `kind`: `throttled`, `unavailable`, `invalid_params` |
/// | `unique_store_lost_races_total` | counter | — |
///
/// A lost race is a normal outcome of concurrent logins (C8), not an error: it is counted
/// on its own. A write-first claim that finds the key occupied (C11) is neither: it is how
/// every takeover starts. Every operation is timed, failed ones included. Results pass
/// through unchanged, and so do the wrapped store's own [`Store::vacant_claims`] and
/// [`Store::check_ready`] (every method the trait gives a default is forwarded, so the
/// Arbiter writes first and `/readyz` checks readiness through this wrapper exactly as on
/// the store alone). Readiness is not timed: it is a probe, not an operation claims make.
///
/// Handles are registered (and metrics described) by [`new`](Self::new) with the recorder
/// in force then: install the recorder first. An operation then costs two clock reads and
/// the recorder's update, plus the one boxed future every `Store` call through
/// `async_trait` has (the wrapped store's future runs inside it).
#[derive(Debug, Clone)]
pub struct MeteredStore<S> {
    inner: S,
    /// Indexed by [`Operation`].
    operations: [Handles; 7],
    lost_races: Counter,
}

impl<S: Store> MeteredStore<S> {
    /// Wraps `inner`, registering every handle with the current recorder.
    pub fn new(inner: S) -> Self {
        metrics::describe_histogram!(
            STORE_OPERATION_DURATION_SECONDS,
            Unit::Seconds,
            "Time of one store operation, failed ones included"
        );
        metrics::describe_counter!(
            STORE_ERRORS_TOTAL,
            "Store operations that failed, by operation and error kind (lost races are not errors)"
        );
        metrics::describe_counter!(
            STORE_LOST_RACES_TOTAL,
            "Fenced claim writes whose condition failed because another write came first"
        );
        Self {
            inner,
            operations: OPERATIONS.map(|operation| {
                Handles {
                duration: metrics::histogram!(
                    STORE_OPERATION_DURATION_SECONDS,
                    "operation" => operation
                ),
                errors: ERROR_KINDS.map(|kind| {
                    metrics::counter!(STORE_ERRORS_TOTAL, "operation" => operation, "kind" => kind)
                }),
            }
            }),
            lost_races: metrics::counter!(STORE_LOST_RACES_TOTAL),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps the store.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Runs one operation, recording its time and, when it fails, its error.
    async fn timed<T>(
        &self,
        operation: Operation,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let handles = &self.operations[operation as usize];
        let started = Instant::now();
        let result = call.await;
        handles.duration.record(started.elapsed().as_secs_f64());
        if let Err(e) = &result {
            let code = e.code();
            match ERROR_KINDS.iter().position(|kind| *kind == code) {
                Some(index) => handles.errors[index].increment(1),
                // An error code added after this crate was written: registered on sight.
                None => metrics::counter!(
                    STORE_ERRORS_TOTAL,
                    "operation" => OPERATIONS[operation as usize],
                    "kind" => code
                )
                .increment(1),
            }
        }
        result
    }
}

#[async_trait]
impl<S: Store> Store for MeteredStore<S> {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.timed(Operation::ReadOwner, self.inner.read_owner(key))
            .await
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        let outcome = self
            .timed(
                Operation::ClaimCas,
                self.inner.claim_cas(key, owner, claim_id, snap),
            )
            .await;
        if let Ok(CasOutcome::LostRace { .. }) = &outcome {
            self.lost_races.increment(1);
        }
        outcome
    }

    fn vacant_claims(&self) -> VacantClaims {
        self.inner.vacant_claims()
    }

    async fn claim_vacant(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
    ) -> Result<VacantClaim, Error> {
        self.timed(
            Operation::ClaimVacant,
            self.inner.claim_vacant(key, owner, claim_id),
        )
        .await
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.timed(Operation::Current, self.inner.current(key))
            .await
    }

    /// Forwarded as one batch (timed once), so the wrapped store keeps its one round trip.
    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        self.timed(Operation::ReadOwners, self.inner.read_owners(keys))
            .await
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.timed(Operation::Release, self.inner.release(key, generation))
            .await
    }

    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        self.timed(Operation::ListSessions, self.inner.list_sessions(user))
            .await
    }

    async fn check_ready(&self) -> Result<(), Error> {
        self.inner.check_ready().await
    }
}
