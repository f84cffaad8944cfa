//! What a run prints: operations by kind and outcome, faults injected, violations.

use std::fmt;
use std::time::Duration;

use crate::check::{Rule, Violation, check};
use crate::history::{History, OpKind, Outcome};

/// Operations of one kind by how they ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Answered.
    pub ok: usize,
    /// Refused outright (nothing happened).
    pub failed: usize,
    /// No telling answer (may or may not have happened).
    pub indeterminate: usize,
}

impl Tally {
    /// Every operation counted.
    pub fn total(&self) -> usize {
        self.ok + self.failed + self.indeterminate
    }

    fn add(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Failed(_) => self.failed += 1,
            Outcome::Indeterminate(_) => self.indeterminate += 1,
            Outcome::Claimed { .. }
            | Outcome::Read { .. }
            | Outcome::Listed { .. }
            | Outcome::Released { .. }
            | Outcome::Superseded { .. } => {
                self.ok += 1;
            }
        }
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ok / {} indeterminate / {} failed",
            self.ok, self.indeterminate, self.failed
        )
    }
}

/// A history's operations by kind and outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Claims with a fresh claim_id.
    pub claim: Tally,
    /// Claims sent again with an earlier claim_id.
    pub replay: Tally,
    /// Claims (of either kind) the server answered from its replay short-circuit.
    pub answered_replayed: usize,
    /// Reads.
    pub read: Tally,
    /// Releases.
    pub release: Tally,
    /// Listings of a user's sessions.
    pub list: Tally,
    /// Releases that tombstoned the session.
    pub released: usize,
    /// Claims answered `superseded` (a retry whose login was replaced or logged out).
    pub superseded: usize,
}

impl Counts {
    /// Counts `history`.
    pub fn of(history: &History) -> Self {
        let mut counts = Self::default();
        for op in history.ops() {
            let tally = match op.kind {
                OpKind::Claim { .. } => &mut counts.claim,
                OpKind::Replay { .. } => &mut counts.replay,
                OpKind::Read => &mut counts.read,
                OpKind::Release { .. } => &mut counts.release,
                OpKind::List => &mut counts.list,
            };
            tally.add(&op.outcome);
            match op.outcome {
                Outcome::Claimed { replayed: true, .. } => counts.answered_replayed += 1,
                Outcome::Released { released: true } => counts.released += 1,
                Outcome::Superseded { .. } => counts.superseded += 1,
                _ => {}
            }
        }
        counts
    }

    /// The first kind of answered operation a clean run must have and this one lacks:
    /// claims, replays, reads, releases that held, and listings.
    pub fn missing(&self) -> Option<&'static str> {
        [
            ("claims answered", self.claim.ok),
            ("replays answered", self.replay.ok),
            ("reads answered", self.read.ok),
            ("releases that held", self.released),
            ("listings answered", self.list.ok),
        ]
        .into_iter()
        .find_map(|(what, n)| (n == 0).then_some(what))
    }

    /// Every operation.
    pub fn total(&self) -> usize {
        self.claim.total()
            + self.replay.total()
            + self.read.total()
            + self.release.total()
            + self.list.total()
    }

    /// Operations without a telling answer.
    pub fn indeterminate(&self) -> usize {
        self.claim.indeterminate
            + self.replay.indeterminate
            + self.read.indeterminate
            + self.release.indeterminate
            + self.list.indeterminate
    }
}

/// One run's result: its name, counts, the faults the harness injected, and the checker's
/// verdict. `Display` prints the report line, then one line per violation.
#[derive(Debug, Clone)]
pub struct Report {
    /// What ran (store, servers, faults).
    pub name: String,
    /// How long the clients ran: the history's span.
    pub duration: Duration,
    /// Operations by kind and outcome.
    pub counts: Counts,
    /// Faults the harness injected (kills, dropped responses), as it counted them.
    pub faults: u64,
    /// What the checker found.
    pub violations: Vec<Violation>,
}

impl Report {
    /// Checks `history` and reports it.
    pub fn new(name: impl Into<String>, history: &History, faults: u64) -> Self {
        Self {
            name: name.into(),
            duration: history.span(),
            counts: Counts::of(history),
            faults,
            violations: check(history),
        }
    }

    /// Asserts the run was clean and meaningful: no violation, and every kind of operation
    /// answered at least once (claims, replays, reads, releases that held, listings), so a run that did
    /// nothing cannot pass. (Replays answered from the record are not required: on hot keys
    /// the record has usually moved on by the time a replay's turn comes.)
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
    pub fn violations_of(&self, rule: Rule) -> usize {
        self.violations.iter().filter(|v| v.rule == rule).count()
    }
}

/// At most this many violations are spelled out; the count covers them all.
const SHOWN_VIOLATIONS: usize = 10;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counts;
        write!(
            f,
            "history {}: {} ops in {:.0?} (claim {}; replay {}; read {}; release {}; list {}; {} \
             answered as replays, {} superseded, {} released), {} faults injected, {} violations",
            self.name,
            c.total(),
            self.duration,
            c.claim,
            c.replay,
            c.read,
            c.release,
            c.list,
            c.answered_replayed,
            c.superseded,
            c.released,
            self.faults,
            self.violations.len()
        )?;
        if !self.violations.is_empty() {
            let by_rule: Vec<String> = Rule::ALL
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
