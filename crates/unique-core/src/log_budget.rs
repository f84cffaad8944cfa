//! A bound on how many lines one kind of failure writes to the server's own log, so that a
//! flood of failing requests (a store that refuses every write, a caller sending garbage)
//! costs a bounded number of lines per interval instead of one per request.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Lines a [`LogBudget`] admits per interval, and the interval: at most `per_interval`
/// lines of its kind, then counted only; the first line of a later interval says how many
/// the earlier one left out (or [`close`](LogBudget::close) does).
#[derive(Debug)]
pub struct LogBudget {
    per_interval: u64,
    interval: Duration,
    state: Mutex<Spent>,
}

#[derive(Debug)]
struct Spent {
    /// When the current interval began (`None`: nothing spent yet).
    since: Option<Instant>,
    logged: u64,
    left_out: u64,
}

/// Whether one failure may be logged whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogVerdict {
    /// Log it; `left_out` lines of the interval that just ended were not logged (say so).
    Log {
        /// Lines the interval before left out.
        left_out: u64,
    },
    /// Count it only.
    LeaveOut,
}

impl LogBudget {
    /// A budget of `per_interval` lines every `interval`; `const`, so a call site can keep
    /// one in a `static`.
    pub const fn new(per_interval: u64, interval: Duration) -> Self {
        Self {
            per_interval,
            interval,
            state: Mutex::new(Spent {
                since: None,
                logged: 0,
                left_out: 0,
            }),
        }
    }

    /// Spends one line at `now`, when the interval has one left.
    pub fn spend(&self, now: Instant) -> LogVerdict {
        let mut spent = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ended = 0;
        let over = spent
            .since
            .is_none_or(|since| now.saturating_duration_since(since) >= self.interval);
        if over {
            ended = std::mem::take(&mut spent.left_out);
            spent.since = Some(now);
            spent.logged = 0;
        }
        if spent.logged < self.per_interval {
            spent.logged += 1;
            LogVerdict::Log { left_out: ended }
        } else {
            spent.left_out += 1;
            LogVerdict::LeaveOut
        }
    }

    /// Spends one line now for a failure of the kind `what` names (e.g. `"claim failed"`):
    /// whether to log it. When the interval before left lines out, says how many first, at
    /// `warn`.
    pub fn admit(&self, what: &str) -> bool {
        match self.spend(Instant::now()) {
            LogVerdict::Log { left_out } => {
                if left_out > 0 {
                    tracing::warn!(
                        left_out,
                        interval = ?self.interval,
                        "{what}: {left_out} more not logged in the last interval (the log holds {} per interval)",
                        self.per_interval
                    );
                }
                true
            }
            LogVerdict::LeaveOut => false,
        }
    }

    /// Ends the interval at `now` when it is over: how many lines it left out.
    pub fn close(&self, now: Instant) -> u64 {
        let mut spent = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match spent.since {
            Some(since) if now.saturating_duration_since(since) >= self.interval => {
                spent.since = Some(now);
                spent.logged = 0;
                std::mem::take(&mut spent.left_out)
            }
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_per_interval_and_says_what_it_left_out() {
        const PER: u64 = 20;
        const INTERVAL: Duration = Duration::from_secs(10);
        let budget = LogBudget::new(PER, INTERVAL);
        let t0 = Instant::now();
        let verdicts: Vec<LogVerdict> = (0..100).map(|_| budget.spend(t0)).collect();
        let logged = verdicts
            .iter()
            .filter(|v| **v != LogVerdict::LeaveOut)
            .count();
        assert_eq!(logged as u64, PER);
        assert_eq!(budget.close(t0 + INTERVAL / 2), 0, "not over yet");
        // The next interval's first failure is logged and reports the interval before.
        let next = t0 + INTERVAL;
        assert_eq!(
            budget.spend(next),
            LogVerdict::Log {
                left_out: 100 - PER
            }
        );
        for _ in 0..50 {
            budget.spend(next);
        }
        assert_eq!(budget.close(next + INTERVAL), 51 - PER);
        assert_eq!(budget.close(next + INTERVAL * 3), 0);
    }
}
