//! [`MeteredStore`]: latency, errors and lost races of every store operation.

use std::time::Instant;

use metrics::{Counter, Histogram, Unit};
use unique_core::{Error, Store, StoreAnswer, StoreCall, StoreLayer, StoreOperation};

use crate::{STORE_ERRORS_TOTAL, STORE_LOST_RACES_TOTAL, STORE_OPERATION_DURATION_SECONDS};

/// The timed operations, in the order of their handles. Readiness is not one of them.
const OPERATIONS: [StoreOperation; 8] = [
    StoreOperation::ReadOwner,
    StoreOperation::ClaimCas,
    StoreOperation::Current,
    StoreOperation::Release,
    StoreOperation::ReadOwners,
    StoreOperation::ListSessions,
    StoreOperation::ClaimVacant,
    StoreOperation::CountOnline,
];
/// The `kind` label values of store errors: the [`Error::code`]s.
const ERROR_KINDS: [&str; 3] = ["throttled", "unavailable", "invalid_params"];

/// The index of an operation's handles in [`OPERATIONS`]; `None` for one not timed.
fn handle_index(operation: StoreOperation) -> Option<usize> {
    match operation {
        StoreOperation::ReadOwner => Some(0),
        StoreOperation::ClaimCas => Some(1),
        StoreOperation::Current => Some(2),
        StoreOperation::Release => Some(3),
        StoreOperation::ReadOwners => Some(4),
        StoreOperation::ListSessions => Some(5),
        StoreOperation::ClaimVacant => Some(6),
        StoreOperation::CountOnline => Some(7),
        // A probe, not an operation claims make.
        StoreOperation::CheckReady => None,
    }
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
/// through unchanged. It is a [`StoreLayer`], so every method is the wrapped store's own
/// (C12), the ones the trait gives a default included: the Arbiter writes first and
/// `/readyz` checks readiness through this wrapper exactly as on the store alone.
/// Readiness is not timed: it is a probe, not an operation claims make.
///
/// Handles are registered (and metrics described) by [`new`](Self::new) with the recorder
/// in force then: install the recorder first. An operation then costs two clock reads and
/// the recorder's update, plus the one boxed future every `Store` call through
/// `async_trait` has (the wrapped store's future runs inside it).
#[derive(Debug, Clone)]
pub struct MeteredStore<S> {
    inner: S,
    /// Indexed like [`OPERATIONS`].
    operations: [Handles; OPERATIONS.len()],
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
                let operation = operation.name();
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
}

impl<S: Store> StoreLayer for MeteredStore<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    /// Runs one operation, recording its time and, when it fails, its error; a lost race
    /// is counted on its own.
    async fn around<'a, T: StoreAnswer + 'a>(
        &'a self,
        operation: StoreOperation,
        call: StoreCall<'a, T>,
    ) -> Result<T, Error> {
        let Some(index) = handle_index(operation) else {
            return call.await;
        };
        let handles = &self.operations[index];
        let started = Instant::now();
        let result = call.await;
        handles.duration.record(started.elapsed().as_secs_f64());
        match &result {
            Ok(answer) if answer.is_lost_race() => self.lost_races.increment(1),
            Ok(_) => {}
            Err(e) => {
                let code = e.code();
                match ERROR_KINDS.iter().position(|kind| *kind == code) {
                    Some(kind) => handles.errors[kind].increment(1),
                    // An error code added after this crate was written: registered on sight.
                    None => metrics::counter!(
                        STORE_ERRORS_TOTAL,
                        "operation" => operation.name(),
                        "kind" => code
                    )
                    .increment(1),
                }
            }
        }
        result
    }
}
