#![doc = include_str!("../README.md")]

mod check;
mod history;
mod lease;
mod lease_check;
mod pool;
mod push_nodes;
mod report;
mod workload;

use std::time::Duration;

pub use check::pool::{
    KickCounts, PoolReport, PoolRule, PoolViolation, UnconfirmedKick, check_pool,
};
pub use check::{Rule, Violation, check};
pub use history::{History, Listed, Op, OpKind, Outcome, Pending, Recorder};
pub use lease::{
    LeaseHistory, LeaseOp, LeaseOpKind, LeaseOutcome, LeaseSeen, LeaseWorkload, NodeClock,
};
pub use lease_check::{LeaseCounts, LeaseReport, LeaseRule, LeaseViolation, check_leases};
pub use pool::{KickSeen, PoolHistory, PoolOp, PoolOpKind, PoolOutcome, PoolWorkload};
pub use report::{Counts, Report, Tally};
pub use workload::{Mix, Workload};

/// The environment variable that sets how long history runs last, in seconds.
pub const DURATION_VAR: &str = "UNIQUE_HISTORY_SECS";

/// How long a history run should last: [`DURATION_VAR`] seconds when set to a positive
/// number, else `default`.
///
/// # Panics
///
/// When the variable is set but is not a positive whole number of seconds: a long run asked
/// for must not silently turn into a short one.
pub fn run_duration(default: Duration) -> Duration {
    match std::env::var(DURATION_VAR) {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(secs) if secs > 0 => Duration::from_secs(secs),
            _ => panic!("{DURATION_VAR}={text:?}: expected a positive number of seconds"),
        },
        Err(_) => default,
    }
}
