//! What a history says about each room: every token's holding (room, node, epoch),
//! when it was first seen and granted, and where it was in force for its holder.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use super::rules::{epoch_order, overlaps, revivals, stale_verifies, ttl_left};
use super::{LeaseCounts, LeaseRule, LeaseViolation};
use crate::lease::{LeaseHistory, LeaseOp, LeaseOpKind, LeaseOutcome, short};

/// Where a holding is in force: from an answer's arrival to its deadline (or the
/// holder's release), with the answers that opened and closed it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Interval<'a> {
    pub(super) start: Instant,
    pub(super) end: Instant,
    pub(super) from: &'a LeaseOp,
    pub(super) until: &'a LeaseOp,
}

/// One token, as the history knows it.
#[derive(Debug)]
pub(super) struct Holding<'a> {
    pub(super) token: &'a str,
    /// From the first answer that named it.
    pub(super) node: &'a str,
    pub(super) epoch: u64,
    /// The earliest arrival of an answer naming it: it was granted before.
    pub(super) first_seen: Instant,
    pub(super) first_op: &'a LeaseOp,
    /// The holder's first answer naming it, and the instant its grant was asked for at
    /// the earliest (that answer's send, or an earlier unanswered ensure of the holder).
    pub(super) granted: Option<(&'a LeaseOp, Instant)>,
    /// The holder's answers after the first.
    pub(super) renewals: usize,
    /// A release of it was answered `true`.
    pub(super) released: bool,
    /// Where it was in force, merged, in order.
    pub(super) in_force: Vec<Interval<'a>>,
}

pub(super) struct Room<'a> {
    pub(super) holdings: BTreeMap<&'a str, Holding<'a>>,
    /// Verifies answered `true`.
    pub(super) verified: Vec<&'a LeaseOp>,
    /// Answers to a holder naming a token it had been told it holds before.
    pub(super) renewed: Vec<&'a LeaseOp>,
    /// Ensures answered with a lease of a consistent token, any node's, in send order.
    pub(super) answers: Vec<&'a LeaseOp>,
    /// Every node's ensures of the room (answered or not), each node's in send order.
    pub(super) ensures: HashMap<&'a str, Vec<&'a LeaseOp>>,
}

pub(super) struct Analysis<'a> {
    history: &'a LeaseHistory,
    rooms: BTreeMap<&'a str, Room<'a>>,
    /// Found while building: tokens seen with two rooms, nodes or epochs.
    inconsistent: Vec<LeaseViolation>,
}

impl<'a> Analysis<'a> {
    pub(super) fn new(history: &'a LeaseHistory) -> Self {
        let mut analysis = Self {
            history,
            rooms: BTreeMap::new(),
            inconsistent: Vec::new(),
        };
        analysis.collect_tokens();
        analysis.follow_holders();
        analysis
    }

    /// Every token any answer named: its holding (room, node, epoch) and when it was
    /// first seen; a token named with another room, node or epoch breaks
    /// [`LeaseRule::OneTokenOneHolding`].
    fn collect_tokens(&mut self) {
        let mut home: HashMap<&'a str, &'a LeaseOp> = HashMap::new();
        let mut reported: HashSet<&'a str> = HashSet::new();
        for op in self.history.ops() {
            let LeaseOutcome::Lease(seen) = &op.outcome else {
                continue;
            };
            let token = seen.token.as_str();
            let first = *home.entry(token).or_insert(op);
            let first_seen = first
                .outcome
                .lease()
                .expect("homes are answers with leases");
            if first.room != op.room
                || first_seen.node != seen.node
                || first_seen.epoch != seen.epoch
            {
                if reported.insert(token) {
                    self.inconsistent.push(LeaseViolation {
                        rule: LeaseRule::OneTokenOneHolding,
                        room: op.room.clone(),
                        ops: vec![first.clone(), op.clone()],
                        message: format!(
                            "token {} seen as {} epoch {} in {} and as {} epoch {} in {}",
                            short(token),
                            first_seen.node,
                            first_seen.epoch,
                            first.room,
                            seen.node,
                            seen.epoch,
                            op.room
                        ),
                    });
                }
                continue;
            }
            let room = self.rooms.entry(op.room.as_str()).or_insert_with(|| Room {
                holdings: BTreeMap::new(),
                verified: Vec::new(),
                renewed: Vec::new(),
                answers: Vec::new(),
                ensures: HashMap::new(),
            });
            room.answers.push(op);
            let holding = room.holdings.entry(token).or_insert_with(|| Holding {
                token,
                node: seen.node.as_str(),
                epoch: seen.epoch,
                first_seen: op.arrived,
                first_op: op,
                granted: None,
                renewals: 0,
                released: false,
                in_force: Vec::new(),
            });
            if op.arrived < holding.first_seen {
                holding.first_seen = op.arrived;
                holding.first_op = op;
            }
        }
    }

    /// Each node's own operations in order: which answers granted and renewed its
    /// holdings, where they were in force, what it released and verified.
    fn follow_holders(&mut self) {
        let mut by_node: BTreeMap<&'a str, Vec<&'a LeaseOp>> = BTreeMap::new();
        for op in self.history.ops() {
            by_node.entry(op.node.as_str()).or_default().push(op);
        }
        for ops in by_node.values() {
            // Per room: the send of the earliest ensure without an answer since the last
            // answered one (a grant it made counts from there), and the answers seen.
            let mut unanswered: HashMap<&str, Instant> = HashMap::new();
            let mut answers: HashMap<&'a str, Vec<&'a LeaseOp>> = HashMap::new();
            let mut releases: HashMap<&'a str, Vec<&'a LeaseOp>> = HashMap::new();
            for &op in ops {
                if let (LeaseOpKind::Ensure { .. }, Some(room)) =
                    (&op.kind, self.rooms.get_mut(op.room.as_str()))
                {
                    room.ensures.entry(op.node.as_str()).or_default().push(op);
                }
                match (&op.kind, &op.outcome) {
                    (LeaseOpKind::Ensure { .. }, LeaseOutcome::Indeterminate(_)) => {
                        unanswered.entry(op.room.as_str()).or_insert(op.sent);
                    }
                    (LeaseOpKind::Ensure { .. }, LeaseOutcome::Lease(seen)) => {
                        let asked = unanswered.remove(op.room.as_str()).unwrap_or(op.sent);
                        if seen.node != op.node {
                            continue;
                        }
                        let Some(holding) = self.holding_mut(&op.room, &seen.token) else {
                            continue; // inconsistent token, reported already
                        };
                        if holding.granted.is_none() {
                            holding.granted = Some((op, asked.min(op.sent)));
                        } else {
                            holding.renewals += 1;
                            if let Some(room) = self.rooms.get_mut(op.room.as_str()) {
                                room.renewed.push(op);
                            }
                        }
                        answers.entry(seen.token.as_str()).or_default().push(op);
                    }
                    (LeaseOpKind::Release { token }, outcome) => {
                        releases.entry(token.as_str()).or_default().push(op);
                        if *outcome == LeaseOutcome::Released(true)
                            && let Some(holding) = self.holding_mut(&op.room, token)
                        {
                            holding.released = true;
                        }
                    }
                    (LeaseOpKind::Verify { .. }, LeaseOutcome::Verified(true)) => {
                        if let Some(room) = self.rooms.get_mut(op.room.as_str()) {
                            room.verified.push(op);
                        }
                    }
                    _ => {}
                }
            }
            for (token, answered) in answers {
                let cuts = releases.get(token).map_or(&[][..], Vec::as_slice);
                let room = answered[0].room.as_str();
                if let Some(holding) = self.holding_mut(room, token) {
                    holding.in_force = in_force(&answered, cuts);
                }
            }
        }
    }

    fn holding_mut(&mut self, room: &str, token: &str) -> Option<&mut Holding<'a>> {
        self.rooms.get_mut(room)?.holdings.get_mut(token)
    }

    pub(super) fn violations(&self) -> Vec<LeaseViolation> {
        let mut violations = self.inconsistent.clone();
        for (name, room) in &self.rooms {
            overlaps(name, room, &mut violations);
            epoch_order(name, room, &mut violations);
            stale_verifies(name, room, &mut violations);
            revivals(name, room, &mut violations);
            ttl_left(name, room, &mut violations);
        }
        violations
    }

    pub(super) fn counts(&self) -> LeaseCounts {
        let mut counts = LeaseCounts {
            nodes: self.history.clocks().len(),
            max_skew: self
                .history
                .clocks()
                .iter()
                .map(|(_, clock)| Duration::from_millis(clock.offset_ms.unsigned_abs()))
                .max()
                .unwrap_or_default(),
            ..LeaseCounts::default()
        };
        for op in self.history.ops() {
            let tally = match op.kind {
                LeaseOpKind::Ensure { .. } => &mut counts.ensure,
                LeaseOpKind::Verify { .. } => &mut counts.verify,
                LeaseOpKind::Release { .. } => &mut counts.release,
                LeaseOpKind::Freeze { .. } => {
                    counts.freezes += 1;
                    continue;
                }
            };
            match &op.outcome {
                LeaseOutcome::Failed(_) => tally.failed += 1,
                LeaseOutcome::Indeterminate(_) => tally.indeterminate += 1,
                _ => tally.ok += 1,
            }
            match op.outcome {
                LeaseOutcome::Verified(true) => counts.verified_true += 1,
                LeaseOutcome::Verified(false) => counts.verified_false += 1,
                LeaseOutcome::Released(true) => counts.released += 1,
                _ => {}
            }
        }
        for room in self.rooms.values() {
            let mut by_epoch: Vec<&Holding<'_>> = room.holdings.values().collect();
            by_epoch.sort_by_key(|h| h.epoch);
            for holding in &by_epoch {
                if holding.granted.is_some() {
                    counts.grants += 1;
                }
                counts.renewals += holding.renewals;
            }
            // A takeover: a grant to another node after the previous holding ran out
            // without a release.
            counts.takeovers += by_epoch
                .windows(2)
                .filter(|pair| {
                    pair[1].granted.is_some() && pair[0].node != pair[1].node && !pair[0].released
                })
                .count();
        }
        counts
    }
}

/// Where a holding was in force for its holder: each answer from its arrival to its
/// deadline, cut at the holder's first release sent after that arrival; merged.
fn in_force<'a>(answers: &[&'a LeaseOp], releases: &[&'a LeaseOp]) -> Vec<Interval<'a>> {
    let mut raw: Vec<Interval<'a>> = answers
        .iter()
        .filter_map(|&op| {
            let seen = op.outcome.lease()?;
            let cut = releases
                .iter()
                .copied()
                .filter(|r| r.sent >= op.arrived)
                .min_by_key(|r| r.sent);
            let (end, until) = match cut {
                Some(release) if release.sent < seen.deadline => (release.sent, release),
                _ => (seen.deadline, op),
            };
            (end > op.arrived).then_some(Interval {
                start: op.arrived,
                end,
                from: op,
                until,
            })
        })
        .collect();
    raw.sort_by_key(|i| i.start);
    let mut merged: Vec<Interval<'a>> = Vec::with_capacity(raw.len());
    for next in raw {
        match merged.last_mut() {
            Some(last) if next.start <= last.end => {
                if next.end > last.end {
                    last.end = next.end;
                    last.until = next.until;
                }
            }
            _ => merged.push(next),
        }
    }
    merged
}
