//! Steps of the store's wall clock (D11): the [`StepGuard`] a directory keeps beside its
//! clock, and the reading it hands the lease rules ([`StoreNow`]).
//!
//! Expiry is judged on the store's wall clock (D10) while holders count down on their
//! monotonic clocks. A step of the wall clock (an operator's `date -s`, a VM resumed, NTP
//! stepping instead of slewing) would otherwise move every lease: forward, it frees rooms
//! whose holders still act on them; back, it keeps rooms held long after their holders
//! stopped. The backward case is settled statelessly in [`LeaseRow`](crate::LeaseRow) (every row
//! knows its granted ttl); the forward case needs memory, and this is it.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::error::LeaseError;
use crate::time::{Clock, clock_millis};

/// How far a store reading may run ahead of the one the monotonic clock predicts before
/// the guard counts a forward step (1 s): a step smaller than this is absorbed, so a
/// holder may lose up to this much of its time to one (which D11 states).
pub const STEP_TOLERANCE_MS: u64 = 1_000;

/// A store clock reading as the lease rules take it: the wall-clock milliseconds that
/// judge expiry, and the last forward step the directory saw, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreNow {
    /// The store's clock, whole ms since the Unix epoch.
    pub ms: u64,
    /// The last forward step this directory saw.
    pub step: Option<ForwardStep>,
}

impl StoreNow {
    /// A reading with no step known.
    pub fn at(ms: u64) -> Self {
        Self { ms, step: None }
    }
}

/// A forward step of the store's clock, as [`StepGuard`] saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardStep {
    /// The store's reading when the step was noticed: rows written before it (less
    /// [`STEP_TOLERANCE_MS`]) were written on the clock before the step.
    pub wall_ms: u64,
    /// Monotonic milliseconds since the step was noticed.
    pub elapsed_ms: u64,
}

/// What a script that reads the store's clock itself (Redis) needs to notice a step in
/// the same call: the reading the monotonic clock predicts, and the step known so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expectation {
    /// The store reading the last one and the monotonic time since predict; `None`
    /// before the first reading.
    pub expected_ms: Option<u64>,
    /// The last forward step seen, aged to the monotonic reading given.
    pub step: Option<ForwardStep>,
}

/// Remembers the last (store clock, monotonic clock) pair a directory read and notices a
/// store reading more than [`STEP_TOLERANCE_MS`] ahead of the prediction: a forward step.
/// It keeps the latest step only; a later step's hold covers every row an earlier one
/// covered, for longer. One guard per directory instance; a process started after a step
/// cannot know of it (D11 states this gap).
#[derive(Debug, Default)]
pub struct StepGuard {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The latest reading: store ms, monotonic time.
    last: Option<(u64, Duration)>,
    /// The latest forward step: store ms and monotonic time when it was noticed.
    step: Option<(u64, Duration)>,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl State {
    fn expected(&self, mono: Duration) -> Option<u64> {
        self.last
            .map(|(wall, at)| wall.saturating_add(millis(mono.saturating_sub(at))))
    }

    fn step(&self, mono: Duration) -> Option<ForwardStep> {
        self.step.map(|(wall_ms, at)| ForwardStep {
            wall_ms,
            elapsed_ms: millis(mono.saturating_sub(at)),
        })
    }
}

impl StepGuard {
    /// A guard that has seen no reading yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads `clock` (monotonic first, then the wall clock) and observes the pair.
    ///
    /// # Errors
    ///
    /// `InvalidParams` when the wall clock reads outside the supported range.
    pub fn read(&self, clock: &dyn Clock) -> Result<StoreNow, LeaseError> {
        let mono = clock.monotonic();
        let ms = clock_millis(clock)?;
        Ok(self.observe(ms, mono))
    }

    /// Observes the store reading `ms` taken at monotonic time `mono` (for a store whose
    /// clock is read remotely, the monotonic time just before the request was sent).
    /// Readings that arrive out of order (an older `mono`) are judged but do not become
    /// the baseline.
    pub fn observe(&self, ms: u64, mono: Duration) -> StoreNow {
        let mut state = self.state();
        if state
            .expected(mono)
            .is_some_and(|expected| ms > expected.saturating_add(STEP_TOLERANCE_MS))
        {
            state.step = Some((ms, mono));
        }
        if state.last.is_none_or(|(_, at)| mono >= at) {
            state.last = Some((ms, mono));
        }
        StoreNow {
            ms,
            step: state.step(mono),
        }
    }

    /// What a script must know to notice a step itself at monotonic time `mono`; call
    /// [`observe`](Self::observe) with the reading it returns and the same `mono`.
    pub fn expect(&self, mono: Duration) -> Expectation {
        let state = self.state();
        Expectation {
            expected_ms: state.expected(mono),
            step: state.step(mono),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::ManualClock;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn time_passing_is_no_step_and_a_jump_ahead_is() {
        let clock = ManualClock::new(UNIX_EPOCH + 1_000 * SEC);
        let guard = StepGuard::new();
        assert_eq!(guard.read(&clock).unwrap(), StoreNow::at(1_000_000));
        clock.advance(60 * SEC);
        assert_eq!(guard.read(&clock).unwrap().step, None);
        // Within the tolerance: absorbed.
        clock.step_forward(Duration::from_millis(STEP_TOLERANCE_MS));
        assert_eq!(guard.read(&clock).unwrap().step, None);
        clock.step_forward(120 * SEC);
        let now = guard.read(&clock).unwrap();
        let step = ForwardStep {
            wall_ms: now.ms,
            elapsed_ms: 0,
        };
        assert_eq!(now.step, Some(step));
        clock.advance(3 * SEC);
        assert_eq!(
            guard.read(&clock).unwrap().step.map(|s| s.elapsed_ms),
            Some(3_000)
        );
        // A step back is no forward step, and the one seen is kept.
        clock.step_back(600 * SEC);
        let back = guard.read(&clock).unwrap();
        assert_eq!(back.step.map(|s| s.wall_ms), Some(step.wall_ms));
    }

    #[test]
    fn a_late_reading_does_not_become_the_baseline() {
        let guard = StepGuard::new();
        guard.observe(10_000, 10 * SEC);
        // Taken earlier, answered later: judged, not kept.
        assert_eq!(guard.observe(9_000, 9 * SEC).step, None);
        assert_eq!(guard.expect(12 * SEC).expected_ms, Some(12_000));
        assert_eq!(
            guard.observe(30_000, 12 * SEC).step.map(|s| s.wall_ms),
            Some(30_000)
        );
        assert_eq!(
            guard.expect(14 * SEC),
            Expectation {
                expected_ms: Some(32_000),
                step: Some(ForwardStep {
                    wall_ms: 30_000,
                    elapsed_ms: 2_000
                }),
            }
        );
    }
}
