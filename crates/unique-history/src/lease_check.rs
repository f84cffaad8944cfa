//! The lease checker: the five rules over a [`LeaseHistory`], judged on the one monotonic
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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use crate::lease::{LeaseHistory, LeaseOp, LeaseOpKind, LeaseOutcome, short};
use crate::report::Tally;

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
}

impl LeaseRule {
    /// Every rule.
    pub const ALL: [LeaseRule; 5] = [
        LeaseRule::Overlap,
        LeaseRule::EpochOrder,
        LeaseRule::OneTokenOneHolding,
        LeaseRule::StaleVerify,
        LeaseRule::Revived,
    ];

    /// The rule in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Overlap => "one holding in force at a time",
            Self::EpochOrder => "epochs increase in grant order",
            Self::OneTokenOneHolding => "one token, one holding",
            Self::StaleVerify => "no verify for a superseded token",
            Self::Revived => "an ended holding never comes back",
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

/// Where a holding is in force: from an answer's arrival to its deadline (or the
/// holder's release), with the answers that opened and closed it.
#[derive(Debug, Clone, Copy)]
struct Interval<'a> {
    start: Instant,
    end: Instant,
    from: &'a LeaseOp,
    until: &'a LeaseOp,
}

/// One token, as the history knows it.
#[derive(Debug)]
struct Holding<'a> {
    token: &'a str,
    /// From the first answer that named it.
    node: &'a str,
    epoch: u64,
    /// The earliest arrival of an answer naming it: it was granted before.
    first_seen: Instant,
    first_op: &'a LeaseOp,
    /// The holder's first answer naming it, and the instant its grant was asked for at
    /// the earliest (that answer's send, or an earlier unanswered ensure of the holder).
    granted: Option<(&'a LeaseOp, Instant)>,
    /// The holder's answers after the first.
    renewals: usize,
    /// A release of it was answered `true`.
    released: bool,
    /// Where it was in force, merged, in order.
    in_force: Vec<Interval<'a>>,
}

struct Room<'a> {
    holdings: BTreeMap<&'a str, Holding<'a>>,
    /// Verifies answered `true`.
    verified: Vec<&'a LeaseOp>,
    /// Answers to a holder naming a token it had been told it holds before.
    renewed: Vec<&'a LeaseOp>,
}

struct Analysis<'a> {
    history: &'a LeaseHistory,
    rooms: BTreeMap<&'a str, Room<'a>>,
    /// Found while building: tokens seen with two rooms, nodes or epochs.
    inconsistent: Vec<LeaseViolation>,
}

impl<'a> Analysis<'a> {
    fn new(history: &'a LeaseHistory) -> Self {
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
            });
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

    fn violations(&self) -> Vec<LeaseViolation> {
        let mut violations = self.inconsistent.clone();
        for (name, room) in &self.rooms {
            overlaps(name, room, &mut violations);
            epoch_order(name, room, &mut violations);
            stale_verifies(name, room, &mut violations);
            revivals(name, room, &mut violations);
        }
        violations
    }

    fn counts(&self) -> LeaseCounts {
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
fn overlaps(name: &str, room: &Room<'_>, violations: &mut Vec<LeaseViolation>) {
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
fn epoch_order(name: &str, room: &Room<'_>, violations: &mut Vec<LeaseViolation>) {
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
fn stale_verifies(name: &str, room: &Room<'_>, violations: &mut Vec<LeaseViolation>) {
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
fn revivals(name: &str, room: &Room<'_>, violations: &mut Vec<LeaseViolation>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{LeaseSeen, NodeClock};

    /// A scripted history in one room, times in ms after a common origin.
    struct Script {
        t0: Instant,
        ops: Vec<LeaseOp>,
    }

    impl Script {
        fn new() -> Self {
            Self {
                t0: Instant::now(),
                ops: Vec::new(),
            }
        }

        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }

        fn op(
            mut self,
            node: &str,
            (sent, arrived): (u64, u64),
            kind: LeaseOpKind,
            outcome: LeaseOutcome,
        ) -> Self {
            self.ops.push(LeaseOp {
                id: self.ops.len(),
                node: node.to_owned(),
                room: "r".to_owned(),
                kind,
                sent: self.at(sent),
                arrived: self.at(arrived),
                outcome,
            });
            self
        }

        /// `node` asked and was told `holder` holds `token` at `epoch` with `left` ms left
        /// (its deadline: the send plus that).
        fn ensure(
            self,
            node: &str,
            at: (u64, u64),
            holder: &str,
            token: &str,
            epoch: u64,
            left: u64,
        ) -> Self {
            let seen = LeaseSeen {
                node: holder.to_owned(),
                token: token.to_owned(),
                epoch,
                ttl_left: Duration::from_millis(left),
                deadline: self.at(at.0 + left),
            };
            let ttl = Duration::from_millis(left);
            self.op(
                node,
                at,
                LeaseOpKind::Ensure { ttl },
                LeaseOutcome::Lease(seen),
            )
        }

        /// `node` was granted (or renewed) `token`.
        fn holds(self, node: &str, at: (u64, u64), token: &str, epoch: u64, left: u64) -> Self {
            self.ensure(node, at, node, token, epoch, left)
        }

        fn lost_ensure(self, node: &str, at: (u64, u64)) -> Self {
            let ttl = Duration::from_millis(10);
            self.op(
                node,
                at,
                LeaseOpKind::Ensure { ttl },
                LeaseOutcome::Indeterminate("timeout".into()),
            )
        }

        fn verify(self, node: &str, at: (u64, u64), token: &str, held: bool) -> Self {
            let kind = LeaseOpKind::Verify {
                token: token.into(),
            };
            self.op(node, at, kind, LeaseOutcome::Verified(held))
        }

        fn release(self, node: &str, at: (u64, u64), token: &str, released: bool) -> Self {
            let kind = LeaseOpKind::Release {
                token: token.into(),
            };
            self.op(node, at, kind, LeaseOutcome::Released(released))
        }

        fn freeze(self, node: &str, at: (u64, u64), token: &str) -> Self {
            let kind = LeaseOpKind::Freeze {
                token: token.into(),
            };
            self.op(node, at, kind, LeaseOutcome::Froze)
        }

        fn history(&self) -> LeaseHistory {
            let clocks = ["a", "b", "c"]
                .map(|n| (n.to_owned(), NodeClock { offset_ms: 0 }))
                .to_vec();
            LeaseHistory::new(self.ops.clone(), clocks)
        }

        fn check(&self) -> Vec<LeaseViolation> {
            check_leases(&self.history())
        }
    }

    fn rules(violations: &[LeaseViolation]) -> Vec<LeaseRule> {
        violations.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_handover_after_the_deadline_or_a_release_is_clean() {
        let expired = Script::new()
            .holds("a", (0, 1), "t1", 1, 10)
            .holds("b", (11, 12), "t2", 2, 10)
            .check();
        assert!(expired.is_empty(), "{expired:#?}");
        // The release was sent before b's grant arrived: a stopped acting when it sent it.
        let released = Script::new()
            .holds("a", (0, 1), "t1", 1, 100)
            .release("a", (5, 7), "t1", true)
            .holds("b", (6, 8), "t2", 2, 100)
            .check();
        assert!(released.is_empty(), "{released:#?}");
    }

    #[test]
    fn two_holdings_in_force_at_once_break_the_overlap_rule() {
        let violations = Script::new()
            .holds("a", (0, 1), "t1", 1, 10)
            .holds("b", (5, 6), "t2", 2, 10)
            .check();
        assert_eq!(rules(&violations), [LeaseRule::Overlap], "{violations:#?}");
        let shown = violations[0].to_string();
        assert!(
            shown.starts_with(
                "[one holding in force at a time] r: epoch 1 (a token t1) and epoch 2 (b token t2) \
                 both in force for 4.000ms"
            ),
            "{shown}"
        );
        assert!(
            shown.contains("#0 a ensure r ttl 10ms -> held by a epoch 1 token t1"),
            "{shown}"
        );
    }

    #[test]
    fn a_renewal_extends_the_holding_until_its_own_deadline() {
        let renewed = Script::new()
            .holds("a", (0, 1), "t1", 1, 10)
            .holds("a", (8, 9), "t1", 1, 10)
            .holds("b", (15, 16), "t2", 2, 10)
            .check();
        assert_eq!(rules(&renewed), [LeaseRule::Overlap], "{renewed:#?}");
        // A renewal arriving after the previous deadline (the store's expiry came later)
        // puts the holding in force again from its arrival, not across the gap.
        let late = Script::new()
            .holds("a", (0, 1), "t1", 1, 10)
            .holds("a", (9, 12), "t1", 1, 10)
            .holds("b", (10, 11), "t2", 2, 1)
            .check();
        assert!(late.is_empty(), "{late:#?}");
    }

    #[test]
    fn only_the_holders_own_answers_put_a_holding_in_force() {
        // b was told a holds with more time left than a itself was: a never acted on it.
        let violations = Script::new()
            .holds("a", (0, 1), "t1", 1, 10)
            .ensure("b", (2, 3), "a", "t1", 1, 50)
            .holds("c", (20, 21), "t2", 2, 10)
            .check();
        assert!(violations.is_empty(), "{violations:#?}");
    }

    #[test]
    fn a_frozen_holder_is_out_of_force_after_its_deadline() {
        let violations = Script::new()
            .holds("a", (0, 1), "t1", 1, 10)
            .freeze("a", (2, 40), "t1")
            .holds("b", (20, 21), "t2", 2, 10)
            .verify("a", (41, 42), "t1", false)
            .check();
        assert!(violations.is_empty(), "{violations:#?}");
        let counts = LeaseCounts::of(
            &Script::new()
                .holds("a", (0, 1), "t1", 1, 10)
                .holds("a", (5, 6), "t1", 1, 10)
                .freeze("a", (7, 40), "t1")
                .holds("b", (20, 21), "t2", 2, 10)
                .verify("a", (41, 42), "t1", false)
                .verify("b", (22, 23), "t2", true)
                .release("b", (24, 25), "t2", true)
                .holds("a", (26, 27), "t3", 3, 10)
                .history(),
        );
        assert_eq!(
            (
                counts.grants,
                counts.renewals,
                counts.takeovers,
                counts.released,
                counts.freezes
            ),
            (3, 1, 1, 1, 1),
            "{counts:?}"
        );
        assert_eq!((counts.verified_true, counts.verified_false), (1, 1));
        assert_eq!(counts.missing(), None);
        assert_eq!(counts.calls(), 7);
    }

    #[test]
    fn a_verify_true_while_another_holding_is_in_force_is_stale() {
        let violations = Script::new()
            .holds("a", (0, 1), "t1", 1, 5)
            .holds("b", (10, 11), "t2", 2, 100)
            .verify("a", (20, 21), "t1", true)
            .check();
        assert_eq!(
            rules(&violations),
            [LeaseRule::StaleVerify],
            "{violations:#?}"
        );
        // A verify that may have been judged before the other holding was granted is not.
        let racing = Script::new()
            .holds("a", (0, 1), "t1", 1, 5)
            .verify("a", (9, 12), "t1", true)
            .holds("b", (10, 11), "t2", 2, 100)
            .check();
        assert!(racing.is_empty(), "{racing:#?}");
    }

    #[test]
    fn a_superseded_token_is_never_answered_as_held() {
        // b's holding (epoch 2) was released; a's older token must stay dead.
        let verified = Script::new()
            .holds("a", (0, 1), "t1", 1, 5)
            .holds("b", (10, 11), "t2", 2, 100)
            .release("b", (12, 13), "t2", true)
            .verify("a", (20, 21), "t1", true)
            .check();
        assert_eq!(rules(&verified), [LeaseRule::StaleVerify], "{verified:#?}");
        assert!(
            verified[0]
                .message
                .contains("after epoch 2 (b token t2) had been seen"),
            "{}",
            verified[0]
        );
        let renewed = Script::new()
            .holds("a", (0, 1), "t1", 1, 5)
            .holds("b", (10, 11), "t2", 2, 100)
            .release("b", (12, 13), "t2", true)
            .holds("a", (20, 21), "t1", 1, 10)
            .check();
        assert_eq!(rules(&renewed), [LeaseRule::Revived], "{renewed:#?}");
        // A renewal sent before the later holding was seen may have been judged first.
        let racing = Script::new()
            .holds("a", (0, 1), "t1", 1, 5)
            .holds("a", (4, 12), "t1", 1, 10)
            .holds("b", (10, 11), "t2", 2, 5)
            .check();
        assert!(rules(&racing).contains(&LeaseRule::Overlap), "{racing:#?}");
        assert!(!rules(&racing).contains(&LeaseRule::Revived), "{racing:#?}");
    }

    #[test]
    fn epochs_climb_in_grant_order() {
        let backwards = Script::new()
            .holds("a", (0, 1), "t1", 5, 3)
            .holds("b", (10, 11), "t2", 4, 3)
            .check();
        assert_eq!(rules(&backwards), [LeaseRule::EpochOrder], "{backwards:#?}");
        // Grants asked for at once may come out in either order.
        let concurrent = Script::new()
            .holds("a", (0, 10), "t1", 5, 1)
            .holds("b", (2, 3), "t2", 4, 1)
            .check();
        assert!(concurrent.is_empty(), "{concurrent:#?}");
        let shared = Script::new()
            .holds("a", (0, 1), "t1", 4, 3)
            .holds("b", (10, 11), "t2", 4, 3)
            .check();
        assert!(
            rules(&shared).contains(&LeaseRule::EpochOrder),
            "{shared:#?}"
        );
    }

    #[test]
    fn a_grant_counts_from_the_holders_first_unanswered_ensure() {
        // a's first ensure went unanswered but granted t1 (epoch 1); the renewal tells a
        // later. Meanwhile b held epoch 2, seen before a's renewal was sent.
        let lost = Script::new()
            .lost_ensure("a", (0, 1))
            .holds("b", (5, 6), "t2", 2, 2)
            .holds("a", (20, 21), "t1", 1, 10)
            .check();
        assert!(lost.is_empty(), "{lost:#?}");
        let answered = Script::new()
            .holds("b", (5, 6), "t2", 2, 2)
            .holds("a", (20, 21), "t1", 1, 10)
            .check();
        assert_eq!(rules(&answered), [LeaseRule::EpochOrder], "{answered:#?}");
    }

    #[test]
    fn a_token_belongs_to_one_holding() {
        let violations = Script::new()
            .holds("a", (0, 1), "t1", 1, 10)
            .ensure("b", (2, 3), "a", "t1", 2, 8)
            .ensure("c", (4, 5), "c", "t1", 1, 8)
            .check();
        assert_eq!(
            rules(&violations),
            [LeaseRule::OneTokenOneHolding],
            "{violations:#?}"
        );
        assert!(
            violations[0]
                .message
                .contains("as a epoch 1 in r and as a epoch 2 in r"),
            "{}",
            violations[0]
        );
    }

    #[test]
    fn the_report_names_counts_and_violations() {
        let history = Script::new()
            .holds("a", (0, 1), "t1", 1, 10)
            .holds("b", (5, 6), "t2", 2, 10)
            .history();
        let report = LeaseReport::new("scripted", &history);
        let shown = report.to_string();
        assert!(
            shown.starts_with("lease history scripted: 2 calls in 6ms by 3 nodes"),
            "{shown}"
        );
        assert!(
            shown.contains("2 grants, 0 renewals, 1 takeovers"),
            "{shown}"
        );
        assert!(
            shown.contains("1 violations (1 × one holding in force at a time)"),
            "{shown}"
        );
        assert_eq!(report.violations_of(LeaseRule::Overlap), 1);
        assert_eq!(report.counts.missing(), Some("renewals"));
    }
}
