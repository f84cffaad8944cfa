//! A lease run's counts and report: what happened, and the checker's verdict.

use std::fmt;
use std::time::Duration;

use super::analysis::Analysis;
use super::{LeaseRule, LeaseViolation};
use crate::lease::LeaseHistory;
use crate::report::Tally;

/// A lease history's operations and events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseCounts {
    /// Nodes that ran.
    pub nodes: usize,
    /// The largest clock offset of a node, either way.
    pub max_skew: Duration,
    /// `ensure_owner` calls.
    pub ensure: Tally,
    /// `verify_owner` calls.
    pub verify: Tally,
    /// `release_owner` calls.
    pub release: Tally,
    /// Holdings their holder was told it got (one per token).
    pub grants: usize,
    /// Answers to a holder naming a token it was already told it holds.
    pub renewals: usize,
    /// Grants to another node after the previous holding ran out without a release.
    pub takeovers: usize,
    /// Releases answered `true`.
    pub released: usize,
    /// Stalls of a node that believed it held a room.
    pub freezes: usize,
    /// Verifies answered `true`.
    pub verified_true: usize,
    /// Verifies answered `false` (a stalled node fenced off).
    pub verified_false: usize,
}

impl LeaseCounts {
    /// Counts `history`.
    pub fn of(history: &LeaseHistory) -> Self {
        Analysis::new(history).counts()
    }

    /// The first kind of event a clean run must have and this one lacks.
    pub fn missing(&self) -> Option<&'static str> {
        [
            ("grants", self.grants),
            ("renewals", self.renewals),
            ("takeovers", self.takeovers),
            ("releases that held", self.released),
            ("freezes", self.freezes),
            ("verifies answered true", self.verified_true),
            ("verifies answered false", self.verified_false),
        ]
        .into_iter()
        .find_map(|(what, n)| (n == 0).then_some(what))
    }

    /// Every call (freezes are not calls).
    pub fn calls(&self) -> usize {
        self.ensure.total() + self.verify.total() + self.release.total()
    }
}

/// One lease run's result: its name, counts and the checker's verdict. `Display` prints
/// the report line, then one line per violation (the first ten).
#[derive(Debug, Clone)]
pub struct LeaseReport {
    /// What ran (directories, servers).
    pub name: String,
    /// How long the nodes ran: the history's span.
    pub duration: Duration,
    /// Calls and events.
    pub counts: LeaseCounts,
    /// What the checker found.
    pub violations: Vec<LeaseViolation>,
}

impl LeaseReport {
    /// Checks `history` and reports it.
    pub fn new(name: impl Into<String>, history: &LeaseHistory) -> Self {
        let analysis = Analysis::new(history);
        Self {
            name: name.into(),
            duration: history.span(),
            counts: analysis.counts(),
            violations: analysis.violations(),
        }
    }

    /// Asserts the run was clean and meaningful: no violation, and every kind of event
    /// happened (grants, renewals, takeovers, releases, freezes, verifies both ways).
    ///
    /// # Panics
    ///
    /// With this report when either does not hold.
    pub fn assert_clean(&self) {
        assert!(self.violations.is_empty(), "{self}");
        if let Some(what) = self.counts.missing() {
            panic!("no {what}: the run exercised too little\n{self}");
        }
    }

    /// How many violations broke `rule`.
    pub fn violations_of(&self, rule: LeaseRule) -> usize {
        self.violations.iter().filter(|v| v.rule == rule).count()
    }
}

/// At most this many violations are spelled out; the count covers them all.
const SHOWN_VIOLATIONS: usize = 10;

impl fmt::Display for LeaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counts;
        write!(
            f,
            "lease history {}: {} calls in {:.0?} by {} nodes, clocks off by up to {:?} \
             (ensure {}; verify {}; release {}), {} grants, {} renewals, {} takeovers, \
             {} released, {} freezes, verified {} true / {} false, {} violations",
            self.name,
            c.calls(),
            self.duration,
            c.nodes,
            c.max_skew,
            c.ensure,
            c.verify,
            c.release,
            c.grants,
            c.renewals,
            c.takeovers,
            c.released,
            c.freezes,
            c.verified_true,
            c.verified_false,
            self.violations.len()
        )?;
        if !self.violations.is_empty() {
            let by_rule: Vec<String> = LeaseRule::ALL
                .iter()
                .map(|&rule| (rule, self.violations_of(rule)))
                .filter(|&(_, n)| n > 0)
                .map(|(rule, n)| format!("{n} × {rule}"))
                .collect();
            write!(f, " ({})", by_rule.join(", "))?;
        }
        for violation in self.violations.iter().take(SHOWN_VIOLATIONS) {
            write!(f, "\n  {violation}")?;
        }
        Ok(())
    }
}
