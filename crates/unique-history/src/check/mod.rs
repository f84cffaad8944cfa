//! The checker: the five rules, each key's operations (one slot of one user) in real-time order.

pub(crate) mod pool;
#[cfg(test)]
mod pool_tests;
mod rules;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use unique_core::Key;

use self::rules::{check_claim_ids, check_gens_per_claim, check_order};
use crate::history::{History, Op, OpKind};

/// The rules a history must keep, per key. See the crate docs for why each holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// (a) A claim answered with a new write (not replayed) gets a gen strictly above every
    /// gen observed by an operation that finished before it started.
    ClaimAbove,
    /// (b) Nothing goes back: a read or a replayed claim sees a gen at least as high as every
    /// gen observed by an operation that finished before it started.
    NoGoingBack,
    /// (c) One gen belongs to one claim_id: no two claim_ids are ever seen at the same gen,
    /// and a claim_id a read sees at a gen was sent by a claim that wrote that gen or may
    /// have (it did not answer, or it answered that gen or a later one).
    OneClaimPerGen,
    /// (d) A released gen reads back as a tombstone: a read that starts after a release of
    /// gen g held sees a gen above g, or g with no owner.
    ReleasedIsTombstone,
    /// (e) One claim_id gets one gen: a claim_id is never seen at two gens (claims and
    /// replays answered, reads naming it, superseded answers naming the gen it won) while
    /// the record still remembers its win (C9: a superseded retry never writes again). A
    /// key's gens are consecutive, so a win at gen g is remembered until gen
    /// g + [`RECENT_CLAIMS`](unique_core::RECENT_CLAIMS) is written; a retry arriving later
    /// is a new login by design.
    OneGenPerClaim,
}

impl Rule {
    /// Every rule, in the order of the crate docs.
    pub const ALL: [Rule; 5] = [
        Rule::ClaimAbove,
        Rule::NoGoingBack,
        Rule::OneClaimPerGen,
        Rule::ReleasedIsTombstone,
        Rule::OneGenPerClaim,
    ];

    /// The rule in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::ClaimAbove => {
                "a claim that starts after another operation finished gets a strictly higher gen"
            }
            Self::NoGoingBack => "reads never go back",
            Self::OneClaimPerGen => "one gen belongs to one claim_id",
            Self::ReleasedIsTombstone => "a released gen reads back as a tombstone",
            Self::OneGenPerClaim => "one claim_id gets one gen",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A broken rule: which, on which key, the operations involved, and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule broken.
    pub rule: Rule,
    /// The key.
    pub key: Key,
    /// The operations involved: the earlier one(s) first, the one that broke the rule last.
    pub ops: Vec<Op>,
    /// What happened, in words.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}: {}", self.rule, self.key, self.message)?;
        // Times relative to the first operation's start, which is all real-time order needs.
        let origin = self.ops.iter().map(|op| op.start).min();
        for op in &self.ops {
            let at = |t: std::time::Instant| origin.map_or(0.0, |o| (t - o).as_secs_f64() * 1e3);
            write!(
                f,
                "\n    {op}  [{:.3} ms .. {:.3} ms]",
                at(op.start),
                at(op.end)
            )?;
        }
        Ok(())
    }
}

/// Checks every rule on every key of `history`; an empty list means it holds.
///
/// Each key, one slot of one user, is checked on its own (slots are keys of their own): rules (a), (b) and (d) by one sweep over the operations
/// ordered by when they finished and started (`O(n log n)`), rule (c) with two maps.
pub fn check(history: &History) -> Vec<Violation> {
    // A listing is judged as one read of each slot it lists, on that slot's key. What it
    // leaves out is not judged: a slot missing from it says no gen.
    let listed: Vec<Op> = history.ops().iter().flat_map(Op::listed_reads).collect();
    let mut by_key: BTreeMap<&Key, Vec<&Op>> = BTreeMap::new();
    let single_key_ops = history
        .ops()
        .iter()
        .filter(|op| !matches!(op.kind, OpKind::List));
    for op in single_key_ops.chain(&listed) {
        by_key.entry(&op.key).or_default().push(op);
    }
    let mut violations = Vec::new();
    for (key, ops) in by_key {
        check_order(key, &ops, &mut violations);
        check_claim_ids(key, &ops, &mut violations);
        check_gens_per_claim(key, &ops, &mut violations);
    }
    violations
}
