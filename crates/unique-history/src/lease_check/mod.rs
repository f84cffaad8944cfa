//! The lease checker: the six rules over a [`LeaseHistory`], judged on the one monotonic
//! clock of the machine, and the report a run prints.
//!
//! A **holding** is one token. It is *in force* for its holder from the arrival of an
//! answer that showed the holder its token until that answer's deadline (send instant +
//! `ttl_left`, computed by `unique-lease`'s front), or until the holder sent a release
//! of the token, whichever comes first; the holding is in force wherever one of its
//! holder's answers puts it so. Only the holder's own ensure answers count: another node
//! told who holds the room never acts on it. A correct directory makes this safe: the store
//! answered after the request was sent, so a deadline counted from the send falls at or
//! before the store's expiry of the holding, and the store grants the room again only
//! after that expiry (or a release, which the holder sent after it stopped acting). Stores
//! count whole milliseconds of a truncated clock, so a `ttl_left` can overstate what was
//! left by up to 1 ms; the deadline must allow for that, and the checker holds it to it.

mod analysis;
mod report;
mod rules;
#[cfg(test)]
mod tests;

use std::fmt;
use std::time::Instant;

use crate::lease::{LeaseHistory, LeaseOp, LeaseOutcome};

pub use self::report::{LeaseCounts, LeaseReport};

use self::analysis::Analysis;

/// The rules a lease history must keep, per room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LeaseRule {
    /// Two holdings of one room (two tokens) are never in force at the same real instant
    /// (D1, D3, D8, D10).
    Overlap,
    /// Epochs of a room increase in the order its holdings were granted: a holding an
    /// answer showed before another's grant was asked for has a lower epoch, and no two
    /// holdings share one (D4).
    EpochOrder,
    /// A token belongs to one holding: one room, one node, one epoch (D1, D2).
    OneTokenOneHolding,
    /// A verify is never answered `true` for a token while another holding of the room was
    /// in force for the whole call, nor after a holding with a higher epoch was seen (D5).
    StaleVerify,
    /// A holding is never renewed after a holding with a higher epoch was seen: that one was
    /// granted after this one ended, and an ended holding never comes back (D1, D2).
    Revived,
    /// No answer reports more time left than the ttl the holding was granted or last
    /// extended with, whatever the store's clock did (D11).
    TtlLeft,
}

impl LeaseRule {
    /// Every rule.
    pub const ALL: [LeaseRule; 6] = [
        LeaseRule::Overlap,
        LeaseRule::EpochOrder,
        LeaseRule::OneTokenOneHolding,
        LeaseRule::StaleVerify,
        LeaseRule::Revived,
        LeaseRule::TtlLeft,
    ];

    /// The rule in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Overlap => "one holding in force at a time",
            Self::EpochOrder => "epochs increase in grant order",
            Self::OneTokenOneHolding => "one token, one holding",
            Self::StaleVerify => "no verify for a superseded token",
            Self::Revived => "an ended holding never comes back",
            Self::TtlLeft => "no more left than the ttl granted",
        }
    }
}

impl fmt::Display for LeaseRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A broken rule: which, in which room, the operations involved, and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseViolation {
    /// The rule broken.
    pub rule: LeaseRule,
    /// The room.
    pub room: String,
    /// The operations involved, earliest first.
    pub ops: Vec<LeaseOp>,
    /// What happened, in words.
    pub message: String,
}

impl fmt::Display for LeaseViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}: {}", self.rule, self.room, self.message)?;
        let origin = self.ops.iter().map(|op| op.sent).min();
        let at = |t: Instant| {
            origin.map_or(0.0, |o| {
                if t >= o {
                    (t - o).as_secs_f64() * 1e3
                } else {
                    -(o - t).as_secs_f64() * 1e3
                }
            })
        };
        for op in &self.ops {
            write!(
                f,
                "\n    {op}  [{:.3} ms .. {:.3} ms",
                at(op.sent),
                at(op.arrived)
            )?;
            if let LeaseOutcome::Lease(seen) = &op.outcome {
                write!(f, ", deadline {:.3} ms", at(seen.deadline))?;
            }
            write!(f, "]")?;
        }
        Ok(())
    }
}

/// Checks every rule in every room of `history`; an empty list means it holds.
pub fn check_leases(history: &LeaseHistory) -> Vec<LeaseViolation> {
    Analysis::new(history).violations()
}
