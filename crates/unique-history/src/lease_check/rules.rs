//! The rules judged room by room over the analysed holdings: overlaps, epoch order,
//! stale verifies and revivals, and how a violation names the holdings involved.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::analysis::{Holding, Interval, Room};
use super::{LeaseRule, LeaseViolation};
use crate::lease::{LeaseOp, LeaseOpKind, short};

/// The in-force intervals seen so far with the latest ends, of two different tokens: the
/// latest end of any token is `first`; the latest end of any other token is `second`.
#[derive(Default)]
struct LatestTwo<'h, 'a> {
    first: Option<(&'h Holding<'a>, Interval<'a>)>,
    second: Option<(&'h Holding<'a>, Interval<'a>)>,
}

impl<'h, 'a> LatestTwo<'h, 'a> {
    fn add(&mut self, holding: &'h Holding<'a>, interval: Interval<'a>) {
        let Some((first, latest)) = &mut self.first else {
            self.first = Some((holding, interval));
            return;
        };
        if first.token == holding.token {
            if interval.end > latest.end {
                *latest = interval;
            }
            return;
        }
        if interval.end > latest.end {
            self.second = self.first.replace((holding, interval));
            return;
        }
        match &mut self.second {
            Some((second, latest)) if second.token == holding.token => {
                if interval.end > latest.end {
                    *latest = interval;
                }
            }
            Some((_, latest)) if interval.end <= latest.end => {}
            _ => self.second = Some((holding, interval)),
        }
    }

    /// The latest-ending interval of a token other than `token`.
    fn other_than(&self, token: &str) -> Option<(&'h Holding<'a>, Interval<'a>)> {
        match self.first {
            Some((h, _)) if h.token == token => self.second,
            first => first,
        }
    }
}

/// [`LeaseRule::Overlap`]: a sweep over the room's in-force intervals by start.
pub(super) fn overlaps(name: &str, room: &Room<'_>, violations: &mut Vec<LeaseViolation>) {
    let mut intervals: Vec<(&Holding<'_>, Interval<'_>)> = room
        .holdings
        .values()
        .flat_map(|h| h.in_force.iter().map(move |i| (h, *i)))
        .collect();
    intervals.sort_by_key(|(_, i)| i.start);
    let mut latest = LatestTwo::default();
    let mut reported: HashSet<(&str, &str)> = HashSet::new();
    for (holding, interval) in intervals {
        if let Some((earlier, before)) = latest.other_than(holding.token)
            && before.end > interval.start
        {
            let pair = if earlier.token < holding.token {
                (earlier.token, holding.token)
            } else {
                (holding.token, earlier.token)
            };
            if reported.insert(pair) {
                let both = before.end.min(interval.end) - interval.start;
                violations.push(LeaseViolation {
                    rule: LeaseRule::Overlap,
                    room: name.to_owned(),
                    ops: ops_of(&[before.from, before.until, interval.from]),
                    message: format!(
                        "{} and {} both in force for {both:.3?}",
                        describe(earlier),
                        describe(holding)
                    ),
                });
            }
        }
        latest.add(holding, interval);
    }
}

/// [`LeaseRule::EpochOrder`]: a holding seen before another's grant was asked for has the
/// lower epoch, and no two holdings share one.
pub(super) fn epoch_order(name: &str, room: &Room<'_>, violations: &mut Vec<LeaseViolation>) {
    let mut by_epoch: HashMap<u64, &Holding<'_>> = HashMap::new();
    for holding in room.holdings.values() {
        if let Some(other) = by_epoch.insert(holding.epoch, holding) {
            violations.push(LeaseViolation {
                rule: LeaseRule::EpochOrder,
                room: name.to_owned(),
                ops: ops_of(&[other.first_op, holding.first_op]),
                message: format!(
                    "{} and {} share an epoch",
                    describe(other),
                    describe(holding)
                ),
            });
        }
    }
    let mut seen: Vec<&Holding<'_>> = room.holdings.values().collect();
    seen.sort_by_key(|h| h.first_seen);
    let mut granted: Vec<(&Holding<'_>, &LeaseOp, Instant)> = room
        .holdings
        .values()
        .filter_map(|h| h.granted.map(|(op, asked)| (h, op, asked)))
        .collect();
    granted.sort_by_key(|(_, _, asked)| *asked);
    let mut next = seen.into_iter().peekable();
    // The holding with the highest epoch among those seen before the current grant was
    // asked for.
    let mut highest: Option<&Holding<'_>> = None;
    for (holding, op, asked) in granted {
        while let Some(earlier) = next.next_if(|h| h.first_seen < asked) {
            if highest.is_none_or(|h| earlier.epoch > h.epoch) {
                highest = Some(earlier);
            }
        }
        if let Some(earlier) = highest
            && earlier.token != holding.token
            && earlier.epoch >= holding.epoch
        {
            violations.push(LeaseViolation {
                rule: LeaseRule::EpochOrder,
                room: name.to_owned(),
                ops: ops_of(&[earlier.first_op, op]),
                message: format!(
                    "{} was granted after {} had been seen, yet its epoch is not higher",
                    describe(holding),
                    describe(earlier)
                ),
            });
        }
    }
}

/// The holdings of a room in the order they were first seen, each with the one of highest
/// epoch seen up to it: which holding of highest epoch had been seen before an instant.
struct SeenBefore<'h, 'a> {
    first_seen: Vec<Instant>,
    highest: Vec<&'h Holding<'a>>,
}

impl<'h, 'a> SeenBefore<'h, 'a> {
    fn new(room: &'h Room<'a>) -> Self {
        let mut seen: Vec<&Holding<'_>> = room.holdings.values().collect();
        seen.sort_by_key(|h| h.first_seen);
        let mut highest: Vec<&Holding<'_>> = Vec::with_capacity(seen.len());
        for holding in &seen {
            let top = match highest.last() {
                Some(top) if top.epoch >= holding.epoch => *top,
                _ => *holding,
            };
            highest.push(top);
        }
        Self {
            first_seen: seen.iter().map(|h| h.first_seen).collect(),
            highest,
        }
    }

    /// The holding of highest epoch seen strictly before `t`, if its epoch is above `epoch`.
    fn above(&self, epoch: u64, t: Instant) -> Option<&'h Holding<'a>> {
        let before = self.first_seen.partition_point(|&seen| seen < t);
        let top = *self.highest.get(before.checked_sub(1)?)?;
        (top.epoch > epoch).then_some(top)
    }
}

/// [`LeaseRule::StaleVerify`]: a verify answered `true` while another holding was in force
/// for its whole call, or after a holding with a higher epoch was seen.
pub(super) fn stale_verifies(name: &str, room: &Room<'_>, violations: &mut Vec<LeaseViolation>) {
    let mut intervals: Vec<(&Holding<'_>, Interval<'_>)> = room
        .holdings
        .values()
        .flat_map(|h| h.in_force.iter().map(move |i| (h, *i)))
        .collect();
    intervals.sort_by_key(|(_, i)| i.start);
    let seen_before = SeenBefore::new(room);
    let mut verified = room.verified.clone();
    verified.sort_by_key(|op| op.sent);
    let mut next = intervals.into_iter().peekable();
    let mut latest = LatestTwo::default();
    for op in verified {
        while let Some((holding, interval)) = next.next_if(|(_, i)| i.start <= op.sent) {
            latest.add(holding, interval);
        }
        let token = op.kind.token().unwrap_or_default();
        if let Some((other, interval)) = latest.other_than(token)
            && interval.end > op.arrived
        {
            violations.push(LeaseViolation {
                rule: LeaseRule::StaleVerify,
                room: name.to_owned(),
                ops: ops_of(&[interval.from, interval.until, op]),
                message: format!(
                    "{} verified token {} while {} was in force",
                    op.node,
                    short(token),
                    describe(other)
                ),
            });
        } else if let Some(verified) = room.holdings.get(token)
            && let Some(later) = seen_before.above(verified.epoch, op.sent)
        {
            violations.push(LeaseViolation {
                rule: LeaseRule::StaleVerify,
                room: name.to_owned(),
                ops: ops_of(&[later.first_op, op]),
                message: format!(
                    "{} verified {} after {} had been seen",
                    op.node,
                    describe(verified),
                    describe(later)
                ),
            });
        }
    }
}

/// [`LeaseRule::Revived`]: a renewal sent after a holding with a higher epoch was seen.
pub(super) fn revivals(name: &str, room: &Room<'_>, violations: &mut Vec<LeaseViolation>) {
    let seen_before = SeenBefore::new(room);
    for &op in &room.renewed {
        let Some(renewed) = op
            .outcome
            .lease()
            .and_then(|seen| room.holdings.get(seen.token.as_str()))
        else {
            continue;
        };
        if let Some(later) = seen_before.above(renewed.epoch, op.sent) {
            violations.push(LeaseViolation {
                rule: LeaseRule::Revived,
                room: name.to_owned(),
                ops: ops_of(&[later.first_op, op]),
                message: format!(
                    "{} renewed after {} had been seen",
                    describe(renewed),
                    describe(later)
                ),
            });
        }
    }
}

/// [`LeaseRule::TtlLeft`]: an answer's `ttl_left` is at most the ttl its holding was granted
/// or last extended with. That ttl is one its holder asked for in the room, at or after its
/// grant was asked for (a renewal never shortens, so an earlier, longer ttl of the same
/// holding may still stand) and before the answer arrived; the largest of those bounds it.
pub(super) fn ttl_left(name: &str, room: &Room<'_>, violations: &mut Vec<LeaseViolation>) {
    for &op in &room.answers {
        let Some(seen) = op.outcome.lease() else {
            continue;
        };
        let (Some(holding), Some(asked)) = (
            room.holdings.get(seen.token.as_str()),
            room.ensures.get(seen.node.as_str()),
        ) else {
            continue;
        };
        let since = holding.granted.map(|(_, asked)| asked);
        let granting = asked
            .iter()
            .filter(|e| e.sent < op.arrived && since.is_none_or(|since| e.sent >= since))
            .filter_map(|&e| match e.kind {
                LeaseOpKind::Ensure { ttl } => Some((ttl, e)),
                _ => None,
            })
            .max_by_key(|(ttl, _)| *ttl);
        let Some((ttl, asking)) = granting else {
            continue;
        };
        if seen.ttl_left > ttl {
            violations.push(LeaseViolation {
                rule: LeaseRule::TtlLeft,
                room: name.to_owned(),
                ops: ops_of(&[asking, op]),
                message: format!(
                    "{} was told {} has {:?} left, above the largest ttl its holder asked \
                     for ({ttl:?})",
                    op.node,
                    describe(holding),
                    seen.ttl_left
                ),
            });
        }
    }
}

fn describe(holding: &Holding<'_>) -> String {
    format!(
        "epoch {} ({} token {})",
        holding.epoch,
        holding.node,
        short(holding.token)
    )
}

/// The operations, each once, in the order they were sent.
fn ops_of(ops: &[&LeaseOp]) -> Vec<LeaseOp> {
    let mut unique: Vec<&LeaseOp> = ops.to_vec();
    unique.sort_by_key(|op| op.id);
    unique.dedup_by_key(|op| op.id);
    unique.into_iter().cloned().collect()
}
