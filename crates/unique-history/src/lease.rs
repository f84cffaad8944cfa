//! The lease workload: many nodes with skewed clocks and stalls race for a few rooms
//! through one or more lease directories, and every answer is recorded on the machine's
//! one monotonic clock.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use unique_lease::{Directory, Lease, LeaseError};

/// After its duration, a run goes on until every kind of event a clean report needs has
/// happened at least once, for at most this many times the duration.
const OVERTIME_FACTOR: u32 = 10;

/// How often the overtime watcher looks at the nodes' progress.
const OVERTIME_POLL: Duration = Duration::from_millis(50);

/// What a node asked (or, for a freeze, what it did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOpKind {
    /// `ensure_owner` with this ttl: a grant, a renewal, or told who holds the room.
    Ensure {
        /// The ttl asked for.
        ttl: Duration,
    },
    /// `verify_owner` of a token the node believes it holds.
    Verify {
        /// The token verified.
        token: String,
    },
    /// `release_owner` of a token the node believes it holds.
    Release {
        /// The token released.
        token: String,
    },
    /// Not a call: the node stalled (a GC pause) while it believed it held `token`, from
    /// the op's `sent` to its `arrived`, then carried on as if nothing happened.
    Freeze {
        /// The token the node believed it held.
        token: String,
    },
}

impl LeaseOpKind {
    /// `ensure`, `verify`, `release` or `freeze`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ensure { .. } => "ensure",
            Self::Verify { .. } => "verify",
            Self::Release { .. } => "release",
            Self::Freeze { .. } => "freeze",
        }
    }

    /// The token a verify, release or freeze is about.
    pub fn token(&self) -> Option<&str> {
        match self {
            Self::Verify { token } | Self::Release { token } | Self::Freeze { token } => {
                Some(token)
            }
            Self::Ensure { .. } => None,
        }
    }
}

/// A lease as an answer showed it to the node that asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSeen {
    /// The node holding the room.
    pub node: String,
    /// The holding's token.
    pub token: String,
    /// The holding's epoch.
    pub epoch: u64,
    /// What the store said was left.
    pub ttl_left: Duration,
    /// [`Lease::deadline`]: the asking node's monotonic clock before the request was sent
    /// (taken by `unique-lease`'s front), plus `ttl_left`.
    pub deadline: Instant,
}

impl From<&Lease> for LeaseSeen {
    fn from(lease: &Lease) -> Self {
        Self {
            node: lease.node_id.clone(),
            token: lease.lease_token.clone(),
            epoch: lease.epoch,
            ttl_left: lease.ttl_left,
            deadline: lease.deadline,
        }
    }
}

/// How an operation ended, as the node saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// `ensure_owner` answered with this lease (the caller's, or another node's).
    Lease(LeaseSeen),
    /// `verify_owner` answered.
    Verified(bool),
    /// `release_owner` answered: whether it deleted the holding.
    Released(bool),
    /// A freeze ended.
    Froze,
    /// A definite failure (`InvalidParams`): nothing happened.
    Failed(String),
    /// No telling answer (`Unavailable` and the rest): the call may or may not have taken
    /// effect.
    Indeterminate(String),
}

impl LeaseOutcome {
    /// The outcome of a call that returned `error`: `InvalidParams` is checked before the
    /// store is touched; anything else may have taken effect.
    pub fn from_error(error: &LeaseError) -> Self {
        if error.is_invalid_params() {
            Self::Failed(error.to_string())
        } else {
            Self::Indeterminate(error.to_string())
        }
    }

    /// The lease an ensure was answered with.
    pub fn lease(&self) -> Option<&LeaseSeen> {
        match self {
            Self::Lease(seen) => Some(seen),
            _ => None,
        }
    }
}

/// One operation of a lease history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOp {
    /// Unique within its history, in the order the operations were sent.
    pub id: usize,
    /// The node that asked; a node runs one operation at a time.
    pub node: String,
    /// The room.
    pub room: String,
    /// What was asked.
    pub kind: LeaseOpKind,
    /// Taken just before the call.
    pub sent: Instant,
    /// Taken just after the answer (or the failure) arrived.
    pub arrived: Instant,
    /// How it ended.
    pub outcome: LeaseOutcome,
}

/// The first characters of a token, enough to tell holdings apart in a report.
pub(crate) fn short(token: &str) -> &str {
    token.get(..8).unwrap_or(token)
}

impl fmt::Display for LeaseOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} {} {}",
            self.id,
            self.node,
            self.kind.name(),
            self.room
        )?;
        match &self.kind {
            LeaseOpKind::Ensure { ttl } => write!(f, " ttl {ttl:?}")?,
            LeaseOpKind::Verify { token }
            | LeaseOpKind::Release { token }
            | LeaseOpKind::Freeze { token } => write!(f, " {}", short(token))?,
        }
        write!(f, " -> ")?;
        match &self.outcome {
            LeaseOutcome::Lease(seen) => write!(
                f,
                "held by {} epoch {} token {}, {:?} left",
                seen.node,
                seen.epoch,
                short(&seen.token),
                seen.ttl_left
            ),
            LeaseOutcome::Verified(held) => write!(f, "verified {held}"),
            LeaseOutcome::Released(released) => write!(f, "released {released}"),
            LeaseOutcome::Froze => write!(f, "woke after {:?}", self.arrived - self.sent),
            LeaseOutcome::Failed(reason) => write!(f, "failed ({reason})"),
            LeaseOutcome::Indeterminate(reason) => write!(f, "indeterminate ({reason})"),
        }
    }
}

/// A node's clock: how far the `now` it passes is from the real time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeClock {
    /// Milliseconds ahead of the real time (negative: behind).
    pub offset_ms: i64,
}

/// A finished lease history: every operation, in the order they were sent, and each
/// node's clock offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseHistory {
    ops: Vec<LeaseOp>,
    clocks: Vec<(String, NodeClock)>,
}

impl LeaseHistory {
    /// A history of these operations (sorted by id), with the nodes' clocks.
    pub fn new(mut ops: Vec<LeaseOp>, clocks: Vec<(String, NodeClock)>) -> Self {
        ops.sort_by_key(|op| op.id);
        Self { ops, clocks }
    }

    /// The operations, in the order they were sent.
    pub fn ops(&self) -> &[LeaseOp] {
        &self.ops
    }

    /// Each node's clock offset.
    pub fn clocks(&self) -> &[(String, NodeClock)] {
        &self.clocks
    }

    /// From the first operation's send to the last one's arrival (zero when empty).
    pub fn span(&self) -> Duration {
        let start = self.ops.iter().map(|op| op.sent).min();
        let end = self.ops.iter().map(|op| op.arrived).max();
        match (start, end) {
            (Some(start), Some(end)) => end.saturating_duration_since(start),
            _ => Duration::ZERO,
        }
    }

    /// How many operations it holds.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether it holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// The lease workload: nodes with skewed clocks that stall, racing for few rooms with
/// short ttls, through any number of [`Directory`] values.
///
/// Node `i` is `node-i` and talks to `directories[i % n]`. A third of the nodes pass a
/// `now` ahead of the real time by 0.5–1 × [`skew`](Self::skew), a third one behind by as
/// much, a third the real time. A node without a room asks for one (a random room after a
/// short pause, or, most of the time, the room it was told is held, at the instant that
/// holding's deadline passes, so takeovers race the expiry). A node holding a room renews
/// it (ensure again) before its deadline, verifies its token at random moments, sometimes
/// releases it by token, and sometimes freezes: it sleeps 1.5–3 ttls believing it holds,
/// then carries on (verifies, or renews). Every call is recorded with the real
/// [`Instant`]s before it was sent and after its answer arrived.
#[derive(Clone)]
pub struct LeaseWorkload {
    directories: Vec<Arc<dyn Directory>>,
    nodes: usize,
    rooms: usize,
    ttl_ms: (u64, u64),
    skew: Duration,
    duration: Duration,
    prefix: String,
    seed: u64,
}

impl fmt::Debug for LeaseWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseWorkload")
            .field("directories", &self.directories.len())
            .field("nodes", &self.nodes)
            .field("rooms", &self.rooms)
            .field("ttl_ms", &self.ttl_ms)
            .field("skew", &self.skew)
            .field("duration", &self.duration)
            .field("prefix", &self.prefix)
            .field("seed", &self.seed)
            .finish()
    }
}

impl LeaseWorkload {
    /// 12 nodes over 4 rooms with ttls of 40–200 ms and clocks skewed by up to 1 s, for
    /// 3 s, through these directories.
    pub fn new(directories: impl IntoIterator<Item = Arc<dyn Directory>>) -> Self {
        Self {
            directories: directories.into_iter().collect(),
            nodes: 12,
            rooms: 4,
            ttl_ms: (40, 200),
            skew: Duration::from_secs(1),
            duration: Duration::from_secs(3),
            prefix: "room".to_owned(),
            seed: fastrand::u64(..),
        }
    }

    /// Concurrent nodes (at least 1).
    #[must_use]
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.nodes = nodes.max(1);
        self
    }

    /// Rooms they race for (at least 1).
    #[must_use]
    pub fn rooms(mut self, rooms: usize) -> Self {
        self.rooms = rooms.max(1);
        self
    }

    /// The range each ensure's ttl is drawn from (whole milliseconds, at least 1).
    #[must_use]
    pub fn ttl(mut self, min: Duration, max: Duration) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
        self.ttl_ms = (ms(min), ms(max).max(ms(min)));
        self
    }

    /// How far the skewed nodes' clocks are off: each by 0.5–1 × this, ahead or behind.
    #[must_use]
    pub fn skew(mut self, skew: Duration) -> Self {
        self.skew = skew;
        self
    }

    /// How long nodes keep starting operations.
    #[must_use]
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// The rooms are `<prefix>-0`, `<prefix>-1`, …, so runs sharing a store use their own
    /// rooms. Default `room`.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The seed of the nodes' choices and clock offsets (random by default).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Runs the nodes until the duration is over (and past it, until there was a grant, a
    /// renewal, a takeover, a release, a freeze and a verify answered `false`, within ten
    /// times the duration) and returns every operation recorded.
    ///
    /// # Errors
    ///
    /// `InvalidParams` when there is no directory.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime with timers, or when a node task panics.
    pub async fn run(&self) -> Result<LeaseHistory, LeaseError> {
        if self.directories.is_empty() {
            return Err(LeaseError::invalid("a lease workload needs a directory"));
        }
        let rooms: Arc<[String]> = (0..self.rooms)
            .map(|i| format!("{}-{i}", self.prefix))
            .collect();
        let progress = Arc::new(Progress::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut clocks = Vec::with_capacity(self.nodes);
        let mut tasks = Vec::with_capacity(self.nodes);
        for i in 0..self.nodes {
            let mut rng = fastrand::Rng::with_seed(self.seed.wrapping_add(i as u64));
            let size = self.skew.mul_f64(0.5 + rng.f64() / 2.0);
            let offset = match i % 3 {
                0 => Offset::Ahead(size),
                1 => Offset::Behind(size),
                _ => Offset::Ahead(Duration::ZERO),
            };
            let name = format!("node-{i}");
            clocks.push((name.clone(), offset.clock()));
            let node = Node {
                name,
                directory: self.directories[i % self.directories.len()].clone(),
                offset,
                rooms: rooms.clone(),
                ttl_ms: self.ttl_ms,
                rng,
                ops: Vec::new(),
                held: None,
                waiting: None,
                progress: progress.clone(),
            };
            tasks.push(tokio::spawn(node.run(stop.clone())));
        }
        self.stop_when_done(&progress, &stop).await;
        let mut ops = Vec::new();
        for task in tasks {
            match task.await {
                Ok(node_ops) => ops.extend(node_ops),
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        ops.sort_by_key(|op| op.sent);
        for (id, op) in ops.iter_mut().enumerate() {
            op.id = id;
        }
        Ok(LeaseHistory::new(ops, clocks))
    }

    async fn stop_when_done(&self, progress: &Progress, stop: &AtomicBool) {
        let started = Instant::now();
        tokio::time::sleep(self.duration).await;
        let limit = started + self.duration * OVERTIME_FACTOR;
        while Instant::now() < limit && !progress.complete() {
            tokio::time::sleep(OVERTIME_POLL).await;
        }
        stop.store(true, Ordering::Relaxed);
    }
}

/// What the nodes have seen happen, as they know it (the checker counts from the history).
#[derive(Debug, Default)]
struct Progress {
    grants: AtomicUsize,
    renewals: AtomicUsize,
    /// Grants of a room the node had been told another node held.
    takeovers: AtomicUsize,
    releases: AtomicUsize,
    freezes: AtomicUsize,
    verified_false: AtomicUsize,
}

impl Progress {
    fn complete(&self) -> bool {
        [
            &self.grants,
            &self.renewals,
            &self.takeovers,
            &self.releases,
            &self.freezes,
            &self.verified_false,
        ]
        .iter()
        .all(|n| n.load(Ordering::Relaxed) > 0)
    }

    fn bump(counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy)]
enum Offset {
    Ahead(Duration),
    Behind(Duration),
}

impl Offset {
    fn apply(self, t: SystemTime) -> SystemTime {
        match self {
            Self::Ahead(by) => t + by,
            Self::Behind(by) => t - by,
        }
    }

    fn clock(self) -> NodeClock {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        NodeClock {
            offset_ms: match self {
                Self::Ahead(by) => ms(by),
                Self::Behind(by) => -ms(by),
            },
        }
    }
}

/// What a node believes it holds.
#[derive(Debug, Clone)]
struct Held {
    room: usize,
    token: String,
    deadline: Instant,
    ttl: Duration,
}

struct Node {
    name: String,
    directory: Arc<dyn Directory>,
    offset: Offset,
    rooms: Arc<[String]>,
    ttl_ms: (u64, u64),
    rng: fastrand::Rng,
    ops: Vec<LeaseOp>,
    held: Option<Held>,
    /// The room it was last told is held by another node, and that holding's deadline.
    waiting: Option<(usize, Instant)>,
    progress: Arc<Progress>,
}

impl Node {
    async fn run(mut self, stop: Arc<AtomicBool>) -> Vec<LeaseOp> {
        while !stop.load(Ordering::Relaxed) {
            match self.held.clone() {
                None => self.seek().await,
                Some(held) => self.hold(held).await,
            }
        }
        self.ops
    }

    /// The node's wall clock, skewed.
    fn now(&self) -> SystemTime {
        self.offset.apply(SystemTime::now())
    }

    fn ttl(&mut self) -> Duration {
        Duration::from_millis(self.rng.u64(self.ttl_ms.0..=self.ttl_ms.1))
    }

    /// Asks for a room: most of the time the one it was told is held, the moment that
    /// holding's deadline passes; else a random one after a short pause.
    async fn seek(&mut self) {
        let (room, after_wait) = match self.waiting.take() {
            Some((room, until)) if self.rng.u32(..10) < 7 => {
                let jitter = Duration::from_micros(self.rng.u64(..=2_000));
                sleep_until(until + jitter).await;
                (room, true)
            }
            _ => {
                let pause = Duration::from_millis(self.rng.u64(1..=self.ttl_ms.0.div_ceil(2)));
                tokio::time::sleep(pause).await;
                (self.rng.usize(..self.rooms.len()), false)
            }
        };
        let ttl = self.ttl();
        if let Some(lease) = self.ensure(room, ttl).await {
            if lease.is_held_by(&self.name) {
                Progress::bump(&self.progress.grants);
                if after_wait {
                    Progress::bump(&self.progress.takeovers);
                }
                self.held = Some(Held {
                    room,
                    token: lease.lease_token,
                    deadline: lease.deadline,
                    ttl,
                });
            } else {
                self.waiting = Some((room, lease.deadline));
            }
        }
    }

    /// One step of holding a room: renew before the deadline (most often), verify at a
    /// random moment, release, or freeze.
    async fn hold(&mut self, held: Held) {
        let roll = self.rng.u32(..100);
        if roll < 12 {
            self.freeze(&held).await;
            if self.rng.bool() {
                self.verify(&held).await;
            }
        } else if roll < 30 {
            let work = held.ttl.mul_f64(self.rng.f64() / 4.0);
            tokio::time::sleep(work).await;
            self.verify(&held).await;
        } else if roll < 40 {
            self.release(&held).await;
        } else {
            let margin = held.ttl.mul_f64(0.2 + self.rng.f64() * 0.3);
            sleep_until(held.deadline.checked_sub(margin).unwrap_or(held.deadline)).await;
            self.renew(&held).await;
        }
    }

    async fn renew(&mut self, held: &Held) {
        let ttl = self.ttl();
        let Some(lease) = self.ensure(held.room, ttl).await else {
            // No telling answer: keep believing (the deadline still bounds it) and try
            // again next step, after a pause.
            let pause = Duration::from_millis(self.rng.u64(5..=30));
            tokio::time::sleep(pause).await;
            return;
        };
        if !lease.is_held_by(&self.name) {
            self.held = None;
            self.waiting = Some((held.room, lease.deadline));
            return;
        }
        if lease.lease_token == held.token {
            Progress::bump(&self.progress.renewals);
        } else {
            // Lost and granted again.
            Progress::bump(&self.progress.grants);
        }
        self.held = Some(Held {
            room: held.room,
            token: lease.lease_token,
            deadline: lease.deadline,
            ttl,
        });
    }

    async fn freeze(&mut self, held: &Held) {
        let pause = held.ttl.mul_f64(1.5 + self.rng.f64() * 1.5);
        let sent = Instant::now();
        tokio::time::sleep(pause).await;
        Progress::bump(&self.progress.freezes);
        self.record(
            held.room,
            LeaseOpKind::Freeze {
                token: held.token.clone(),
            },
            sent,
            LeaseOutcome::Froze,
        );
    }

    async fn verify(&mut self, held: &Held) {
        let room = &self.rooms[held.room];
        let now = self.now();
        let sent = Instant::now();
        let answer = self
            .directory
            .verify_owner(room, &self.name, &held.token, now)
            .await;
        let outcome = match answer {
            Ok(true) => LeaseOutcome::Verified(true),
            Ok(false) => {
                Progress::bump(&self.progress.verified_false);
                self.held = None;
                LeaseOutcome::Verified(false)
            }
            Err(e) => LeaseOutcome::from_error(&e),
        };
        let kind = LeaseOpKind::Verify {
            token: held.token.clone(),
        };
        self.record(held.room, kind, sent, outcome);
    }

    async fn release(&mut self, held: &Held) {
        let room = &self.rooms[held.room];
        let sent = Instant::now();
        let answer = self
            .directory
            .release_owner(room, &self.name, &held.token)
            .await;
        let outcome = match answer {
            Ok(released) => {
                if released {
                    Progress::bump(&self.progress.releases);
                }
                LeaseOutcome::Released(released)
            }
            Err(e) => LeaseOutcome::from_error(&e),
        };
        // Whatever the answer, the node no longer acts on the room.
        self.held = None;
        let kind = LeaseOpKind::Release {
            token: held.token.clone(),
        };
        self.record(held.room, kind, sent, outcome);
    }

    /// `ensure_owner` on `room`, recorded; the lease when answered.
    async fn ensure(&mut self, room: usize, ttl: Duration) -> Option<Lease> {
        let now = self.now();
        let sent = Instant::now();
        let answer = self
            .directory
            .ensure_owner(&self.rooms[room], &self.name, now, ttl)
            .await;
        let (outcome, lease) = match answer {
            Ok(lease) => (LeaseOutcome::Lease(LeaseSeen::from(&lease)), Some(lease)),
            Err(e) => (LeaseOutcome::from_error(&e), None),
        };
        self.record(room, LeaseOpKind::Ensure { ttl }, sent, outcome);
        lease
    }

    fn record(&mut self, room: usize, kind: LeaseOpKind, sent: Instant, outcome: LeaseOutcome) {
        self.ops.push(LeaseOp {
            id: 0,
            node: self.name.clone(),
            room: self.rooms[room].clone(),
            kind,
            sent,
            arrived: Instant::now(),
            outcome,
        });
    }
}

async fn sleep_until(deadline: Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
}
