//! Loom models of a connection's activity word (`activity.rs`).
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p unique-listener --lib loom`
//! (`cargo xtask loom` runs them); `--nocapture` shows how many interleavings
//! each model explored.
//!
//! What the watchdog relies on, in a word written and read with relaxed
//! ordering by two tasks (so perhaps two threads): every look it takes is a
//! phase the connection entered, with that phase's own start (so an expiry is
//! always of a phase that lasted its timeout, and a head that begins after a
//! long idle wait is never timed from the idle wait's start), and its looks
//! never go back to a phase older than one it saw. The watchdog may still see a
//! phase late, which no ordering would change: it re-reads at least every
//! `min(header, idle)`.
//!
//! The model also runs on a copy that keeps the phase and its start in two
//! atomics, written start first, and must fail there: that is what shows it can.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize as Counter, Ordering::Relaxed};
use std::time::Duration;

use loom::thread;

use super::{Activity, BUSY, HEAD, IDLE, PHASE_BITS, Seen};
use crate::sync::{AtomicU64, Instant};

/// The message of a look at a phase the connection never entered.
const ENTERED: &str =
    "invariant violated: the watchdog sees a phase the connection entered, with that phase's start";
/// The message of a look at a phase older than one seen before.
const IN_ORDER: &str =
    "invariant violated: the watchdog never sees an older phase after a newer one";

/// What the model drives: the activity word, or a broken copy of it.
trait Word: Sized + 'static {
    fn accepted(origin: Instant) -> Self;
    fn request_started(&self);
    fn request_finished(&self);
    fn read_bytes(&self);
    fn seen(&self) -> Seen;
}

impl Word for Activity {
    fn accepted(origin: Instant) -> Self {
        Activity::new(origin)
    }
    fn request_started(&self) {
        Activity::request_started(self);
    }
    fn request_finished(&self) {
        Activity::request_finished(self);
    }
    fn read_bytes(&self) {
        Activity::read_bytes(self);
    }
    fn seen(&self) -> Seen {
        Activity::seen(self)
    }
}

/// One thing the connection's task does to its word.
type Step<W> = fn(&W);

/// The connection's task, in seconds after the accept: a request at 1,
/// answered at 2, the next request's first bytes at 50 (after a long idle
/// wait) and that request given to the service at 51.
fn connection<W: Word>(word: &W) -> Vec<Seen> {
    let steps: [(u64, Step<W>); 4] = [
        (1, W::request_started),
        (2, W::request_finished),
        (50, W::read_bytes),
        (51, W::request_started),
    ];
    // Read back by the one writer, so exactly what it wrote.
    let mut entered = vec![word.seen()];
    for (at, step) in steps {
        Instant::set_now(Duration::from_secs(at));
        step(word);
        entered.push(word.seen());
    }
    entered
}

/// The connection runs through [`connection`] while its watchdog looks twice.
fn watchdog_looks<W: Word>() {
    let word = loom::sync::Arc::new(W::accepted(Instant::now()));
    let watchdog = {
        let word = loom::sync::Arc::clone(&word);
        thread::spawn(move || [word.seen(), word.seen()])
    };
    let entered = connection(&*word);
    let looks = watchdog.join().unwrap_or_else(|panic| resume_unwind(panic));
    let mut oldest = 0;
    for look in looks {
        let Some(index) = entered[oldest..].iter().position(|e| *e == look) else {
            assert!(
                entered.contains(&look),
                "{ENTERED}: saw {look:?}, the connection entered {entered:?}"
            );
            panic!("{IN_ORDER}: saw {looks:?}, the connection entered {entered:?}");
        };
        oldest += index;
    }
}

/// Runs `model` under loom and returns how many interleavings it explored.
fn explore(name: &str, model: impl Fn() + Send + Sync + 'static) -> usize {
    let runs = std::sync::Arc::new(Counter::new(0));
    let counter = std::sync::Arc::clone(&runs);
    loom::model(move || {
        counter.fetch_add(1, Relaxed);
        model();
    });
    let explored = runs.load(Relaxed);
    eprintln!("loom model {name}: {explored} interleavings explored");
    explored
}

/// Runs a model that must fail and returns the message of its failure.
fn violation_found(name: &str, model: impl Fn() + Send + Sync + 'static) -> String {
    let runs = std::sync::Arc::new(Counter::new(0));
    let counter = std::sync::Arc::clone(&runs);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        loom::model(move || {
            counter.fetch_add(1, Relaxed);
            model();
        });
    }));
    eprintln!(
        "loom model {name}: violation found at interleaving {}",
        runs.load(Relaxed)
    );
    let payload = outcome.expect_err("the model must find the defect of the broken copy");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[test]
fn loom_the_watchdog_sees_whole_phases_in_order() {
    let explored = explore(
        "watchdog looks at the activity word",
        watchdog_looks::<Activity>,
    );
    assert!(explored > 1);
}

#[test]
fn loom_rejects_a_phase_and_start_in_two_words() {
    let message = violation_found(
        "broken: phase and start in two words",
        watchdog_looks::<TwoWords>,
    );
    assert!(
        message.contains(ENTERED),
        "the model failed for another reason: {message}"
    );
}

/// The broken copy: the phase and its start in two relaxed atomics, the start
/// written first. A watchdog can then see a phase with an older phase's start.
struct TwoWords {
    origin: Instant,
    phase: AtomicU64,
    /// Microseconds after `origin`.
    since: AtomicU64,
}

impl TwoWords {
    fn enter(&self, phase: u64) {
        let micros = u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.since.store(micros, Relaxed);
        self.phase.store(phase, Relaxed);
    }
}

impl Word for TwoWords {
    fn accepted(origin: Instant) -> Self {
        Self {
            origin,
            phase: AtomicU64::new(HEAD),
            since: AtomicU64::new(0),
        }
    }
    fn request_started(&self) {
        self.phase.store(BUSY, Relaxed);
    }
    fn request_finished(&self) {
        self.enter(IDLE);
    }
    fn read_bytes(&self) {
        if self.phase.load(Relaxed) & PHASE_BITS == IDLE {
            self.enter(HEAD);
        }
    }
    fn seen(&self) -> Seen {
        let phase = self.phase.load(Relaxed);
        let since = self.since.load(Relaxed);
        Seen {
            phase,
            since: self.origin + Duration::from_micros(since),
        }
    }
}
