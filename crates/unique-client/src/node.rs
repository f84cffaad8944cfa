//! The node runtime: one [`Node`] wires a [`Claimer`], a [`Heartbeat`] per session, the
//! session table and a [`KickHandler`] (with its `expect_login` / `admit` steps), and
//! reports what happens to sessions as [`NodeEvent`]s.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout, timeout_at};
use unique_core::{EvictReason, Key, KickReason, Owner};

use crate::claimer::{Claimer, ClaimerOptions, Login, LoginError};
use crate::heartbeat::{Heartbeat, HeartbeatHandle, HeartbeatOptions};
use crate::kick::{Admission, KickCause, KickHandler, KickOptions, PendingLogin};
use crate::transport::Transport;

/// The default [`NodeBuilder::event_capacity`].
const DEFAULT_EVENT_CAPACITY: usize = 1024;
/// The default [`NodeBuilder::shutdown_timeout`].
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Something that happened to one of a [`Node`]'s sessions.
///
/// Every `LoggedIn` is followed by exactly one ending event for the same key and gen
/// (`Kicked`, `Evicted` or `LoggedOut`; [`Node::shutdown`] reports `LoggedOut` for every
/// session it ends), except when a later login of the same key on this node replaces the
/// session (the server skips that kick: `self-replace-skipped`), or when it repeats a
/// session already online here (a replayed login, `replayed = true`).
///
/// The synchronous sink ([`NodeBuilder::on_event`]) sees every event. The channel
/// ([`NodeEvents`]) is bounded and drops an event when it is full
/// ([`Node::dropped_events`]), so a reader that falls that far behind can miss any event,
/// an ending one included.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// A login succeeded on the server. Unless a `Kicked` for the same gen follows at once
    /// (it was replaced while its claim was in flight), the session is online here.
    LoggedIn {
        /// The key logged in.
        key: Key,
        /// The server's answer, the claim_id and the attempts it took.
        login: Login,
    },
    /// A kick ended the session: a newer login took the key, or an operator logged the
    /// user out. The session is gone from this node. Reported before the kick is answered,
    /// so a new session is written only after it.
    Kicked {
        /// The key.
        key: Key,
        /// The gen of the session that ended.
        generation: i64,
        /// Why: [`KickReason::LoginElsewhere`] for a takeover (also for a kick from a server
        /// that names no reason, and for a newer login of the key on this node),
        /// [`KickReason::Admin`] for an admin logout.
        reason: KickReason,
        /// The kick's text for the user (an admin logout's reason), if any; at most
        /// [`MAX_CAUSE_BYTES`](crate::MAX_CAUSE_BYTES) bytes.
        message: Option<String>,
    },
    /// The heartbeat found the session no longer holds the key (a kick that never arrived,
    /// a release by someone else, or another owner at its gen after a gen rollback) and
    /// removed it.
    Evicted {
        /// The key.
        key: Key,
        /// The gen of the session that ended.
        generation: i64,
        /// What the server's record said.
        reason: EvictReason,
    },
    /// [`Node::logout`] or [`Node::shutdown`] ended the session.
    LoggedOut {
        /// The key.
        key: Key,
        /// The gen of the session that ended.
        generation: i64,
        /// The server tombstoned the record. `false` when a newer session already held
        /// it, or when the release failed (then `logout` returned the error) or, at
        /// shutdown, did not finish within [`NodeBuilder::shutdown_timeout`].
        released: bool,
    },
}

impl NodeEvent {
    /// The key the event is about.
    pub fn key(&self) -> &Key {
        match self {
            Self::LoggedIn { key, .. }
            | Self::Kicked { key, .. }
            | Self::Evicted { key, .. }
            | Self::LoggedOut { key, .. } => key,
        }
    }

    /// The gen of the session the event is about.
    pub fn generation(&self) -> i64 {
        match self {
            Self::LoggedIn { login, .. } => login.generation(),
            Self::Kicked { generation, .. }
            | Self::Evicted { generation, .. }
            | Self::LoggedOut { generation, .. } => *generation,
        }
    }
}

/// The events of a [`Node`], in the order they happened: a bounded channel
/// ([`NodeBuilder::event_capacity`], 1024 by default). When it is full a new event is
/// dropped, never waited for, and counted in [`Node::dropped_events`]; the
/// [`on_event`](NodeBuilder::on_event) sink still sees it. See [`NodeBuilder::build`].
pub type NodeEvents = mpsc::Receiver<NodeEvent>;

/// A login through a [`Node`] that did not bring a session online.
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeLoginError {
    /// The claim failed (see [`LoginError`]; it keeps the claim_id to resume with). Among
    /// the failures, `Superseded` ([`LoginError::is_superseded`]) says the login was replaced
    /// (or logged out) while its claim was in flight: an attempt whose answer was lost won a
    /// gen, another login took the key since, and the retry was refused without a kick.
    /// Nothing went online and no event is reported.
    Claim(LoginError),
    /// The claim succeeded, but a newer login of the key had already kicked this node
    /// while the claim was in flight (or a newer login of the key is already online
    /// here): the session never went online. Reported as `LoggedIn` then `Kicked`.
    Replaced(Box<Login>),
    /// The node is shut down ([`Node::shutdown`]): nothing goes online here any more. A
    /// login started after the shutdown sends no claim; one whose claim was in flight when
    /// it began releases the gen it won (bounded by [`NodeBuilder::shutdown_timeout`]).
    /// Nothing is reported.
    ShutDown,
}

impl NodeLoginError {
    /// The login was replaced (or logged out) while its claim was in flight, whether the
    /// server said so (`Superseded`, a [`Claim`](Self::Claim) error) or a newer login's kick
    /// reached this node first ([`Replaced`](Self::Replaced)). Either way the session never
    /// went online here, and logging in again would take the key from the newer session.
    pub fn was_replaced(&self) -> bool {
        match self {
            Self::Claim(e) => e.is_superseded(),
            Self::Replaced(_) => true,
            Self::ShutDown => false,
        }
    }
}

impl fmt::Display for NodeLoginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Claim(e) => e.fmt(f),
            Self::Replaced(login) => write!(
                f,
                "session gen {} was replaced by a newer login before it went online",
                login.generation()
            ),
            Self::ShutDown => f.write_str("the node is shut down"),
        }
    }
}

impl std::error::Error for NodeLoginError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Claim(e) => Some(e),
            Self::Replaced(_) | Self::ShutDown => None,
        }
    }
}

type Sink = Box<dyn Fn(&NodeEvent) + Send + Sync>;

/// Builds a [`Node`]: the transport to the arbitration, the owner it advertises, and
/// optionally the claimer, heartbeat and kick settings and a synchronous event sink.
pub struct NodeBuilder<T> {
    transport: T,
    owner: Owner,
    claimer: ClaimerOptions,
    heartbeat: HeartbeatOptions,
    kicks: KickOptions,
    sink: Option<Sink>,
    event_capacity: usize,
    shutdown_timeout: Duration,
}

impl<T: Transport + Clone> NodeBuilder<T> {
    /// Sets the login and logout retry policy (default [`ClaimerOptions::default`]).
    #[must_use]
    pub fn claimer_options(mut self, options: ClaimerOptions) -> Self {
        self.claimer = options;
        self
    }

    /// Sets the heartbeat timing (default [`HeartbeatOptions::default`]).
    #[must_use]
    pub fn heartbeat_options(mut self, options: HeartbeatOptions) -> Self {
        self.heartbeat = options;
        self
    }

    /// Sets the kick handling (default [`KickOptions::default`]).
    #[must_use]
    pub fn kick_options(mut self, options: KickOptions) -> Self {
        self.kicks = options;
        self
    }

    /// Also hands every event to `sink`, synchronously, at the moment it happens (before
    /// it is sent on the channel): a `Kicked` reaches it before the kick is answered, so
    /// closing the user's connection here keeps the old and new sessions from ever
    /// overlapping (I5a). It sees every event, those the bounded channel drops included.
    ///
    /// It runs on the node's internal paths, some under a lock: keep it quick (send on a
    /// channel, cancel a token), and never block in it.
    #[must_use]
    pub fn on_event(mut self, sink: impl Fn(&NodeEvent) + Send + Sync + 'static) -> Self {
        self.sink = Some(Box::new(sink));
        self
    }

    /// Sets how many events the channel holds unread (default 1024; at least 1). See
    /// [`build`](Self::build) for what happens when it is full.
    #[must_use]
    pub fn event_capacity(mut self, capacity: usize) -> Self {
        self.event_capacity = capacity;
        self
    }

    /// Sets how long [`Node::shutdown`] waits for the server to release the sessions
    /// (default 5 s). Sessions not released by then are left to the server, where a newer
    /// login replaces them.
    #[must_use]
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// The node, and the channel its events arrive on, in the order they happened.
    ///
    /// The channel is bounded ([`event_capacity`](Self::event_capacity), 1024 by default).
    /// Events are emitted on the node's internal paths, some under a lock and one (a
    /// `Kicked`) before a kick is answered, so emitting never waits for the reader: **when
    /// the channel is full the event is dropped**, counted in [`Node::dropped_events`] and
    /// logged (a warning at the first drop and at every power of two after). The
    /// [`on_event`](Self::on_event) sink still sees every event, so an application that must
    /// not miss one uses the sink. Drop the channel and the events are discarded (not
    /// counted).
    pub fn build(self) -> (Node<T>, NodeEvents) {
        let (tx, rx) = mpsc::channel(self.event_capacity.max(1));
        let shared = Arc::new(Shared {
            live: Mutex::default(),
            report: Mutex::new(tx),
            dropped: AtomicU64::new(0),
            sink: self.sink,
        });
        let kicks = kick_handler(&shared, self.kicks);
        let node = Node {
            claimer: Claimer::with_options(self.transport.clone(), self.claimer),
            heartbeat: Heartbeat::with_options(self.transport, self.heartbeat),
            owner: self.owner,
            kicks,
            shared,
            shutdown_timeout: self.shutdown_timeout,
        };
        (node, rx)
    }
}

/// A node that holds sessions: logs them in, watches them with a heartbeat, ends them
/// when a kick or the heartbeat says so, and logs them out. Cheap to clone (shared).
///
/// Kicks reach it through [`kick_handler`](Self::kick_handler): serve that handler at the
/// owner's endpoint (`unique-kickrecv`'s `KickReceiver::builder` does it in one call, or
/// mount `KickService` in your own server). How kicks arrive is left to the caller so that
/// this crate stays free of any HTTP server.
///
/// [`shutdown`](Self::shutdown) releases every session and closes the kick handler.
/// Dropping every clone instead stops the heartbeats without releasing anything; the kick
/// handler (still mounted somewhere) then finds no session and answers every kick
/// `no-session`.
pub struct Node<T> {
    claimer: Claimer<T>,
    heartbeat: Heartbeat<T>,
    owner: Owner,
    kicks: KickHandler,
    shared: Arc<Shared>,
    shutdown_timeout: Duration,
}

impl<T: Clone> Clone for Node<T> {
    fn clone(&self) -> Self {
        Self {
            claimer: self.claimer.clone(),
            heartbeat: self.heartbeat.clone(),
            owner: self.owner.clone(),
            kicks: self.kicks.clone(),
            shared: Arc::clone(&self.shared),
            shutdown_timeout: self.shutdown_timeout,
        }
    }
}

impl<T> fmt::Debug for Node<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("owner", &self.owner)
            .field("sessions", &self.shared.live().len())
            .finish_non_exhaustive()
    }
}

impl<T: Transport + Clone> Node<T> {
    /// A builder for a node that reaches the arbitration through `transport` and
    /// advertises `owner` (its endpoint is where this node's kick receiver listens).
    pub fn builder(transport: T, owner: Owner) -> NodeBuilder<T> {
        NodeBuilder {
            transport,
            owner,
            claimer: ClaimerOptions::default(),
            heartbeat: HeartbeatOptions::default(),
            kicks: KickOptions::default(),
            sink: None,
            event_capacity: DEFAULT_EVENT_CAPACITY,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        }
    }

    /// Logs `key` in with a fresh claim_id (kicking its session elsewhere first), brings
    /// the session online here and starts its heartbeat. Reports `LoggedIn`.
    ///
    /// Errors: [`NodeLoginError::Claim`] when the claim failed within the retry budget, or
    /// at once when the server answered it `Superseded` (an earlier attempt won a gen whose
    /// answer was lost, and a newer login took the key since: nothing goes online and nothing
    /// is reported); [`NodeLoginError::Replaced`] when a newer login already kicked it (then
    /// `LoggedIn` and `Kicked` are reported); [`NodeLoginError::ShutDown`] once
    /// [`shutdown`](Self::shutdown) has begun.
    pub async fn login(&self, key: Key) -> Result<Login, NodeLoginError> {
        // Announced before the claim is sent, so a kick that beats the answer is seen.
        let pending = self.expect_login(&key)?;
        let login = self.claimer.login(key.clone(), self.owner.clone()).await;
        self.go_online(key, pending, login.map_err(NodeLoginError::Claim)?)
            .await
    }

    /// Like [`login`](Self::login) with a caller-chosen claim_id: resumes a login that
    /// gave up ([`LoginError::claim_id`]) or repeats one whose answer was lost; the server
    /// answers it from its replay short-circuit, without a second kick.
    pub async fn login_with_claim_id(
        &self,
        key: Key,
        claim_id: String,
    ) -> Result<Login, NodeLoginError> {
        let pending = self.expect_login(&key)?;
        let login = self
            .claimer
            .login_with_claim_id(key.clone(), self.owner.clone(), claim_id)
            .await;
        self.go_online(key, pending, login.map_err(NodeLoginError::Claim)?)
            .await
    }

    /// Ends the session of `key` here (its heartbeat stops and kicks find nothing), then
    /// releases it on the server with the claimer's retry policy, and reports
    /// `LoggedOut`. Returns whether the server tombstoned the record; `Ok(false)` without
    /// calling the server when no session of `key` is online here.
    ///
    /// Errors: the release failed within the retry budget; the session is gone here all
    /// the same (reported as `LoggedOut` with `released = false`), and the record stays
    /// until the next login of the key replaces it.
    pub async fn logout(&self, key: &Key) -> Result<bool, LoginError> {
        let Some(live) = self.shared.take(key, None) else {
            return Ok(false);
        };
        let generation = live.generation;
        // Awaited, so that no heartbeat check of the ended session runs after this.
        live.heartbeat.stop().await;
        let released = self.claimer.logout(key, generation).await;
        self.shared.emit(NodeEvent::LoggedOut {
            key: key.clone(),
            generation,
            released: released.as_ref().is_ok_and(|r| *r),
        });
        released
    }

    /// Ends every session here and releases them on the server, within
    /// [`NodeBuilder::shutdown_timeout`] (5 s by default).
    ///
    /// In order: the kick handler closes ([`KickHandler::close`]: kicks now answer
    /// `no-session`, and logins in flight return [`NodeLoginError::ShutDown`] instead of
    /// going online) and, under the same lock, every session leaves the table; then every
    /// heartbeat stops; then all sessions are released concurrently, each with the claimer's
    /// retry policy, and each is reported `LoggedOut` as its release ends. Releases still
    /// running at the timeout are abandoned and reported `LoggedOut` with
    /// `released = false`: those records stay on the server until a newer login replaces
    /// them (its kick finds nothing here, or cannot connect). Idempotent: a second call
    /// finds nothing to end.
    pub async fn shutdown(&self) -> Shutdown {
        let deadline = Instant::now() + self.shutdown_timeout;
        let ended: Vec<(Key, Live)> = self
            .kicks
            .close_with(|| self.shared.live().drain().collect());

        // Local only (a heartbeat polls its stop signal first), so this cannot wait on the
        // server; bounded all the same, and a heartbeat whose stop was abandoned still ends
        // when its handle is dropped.
        let mut stopping = JoinSet::new();
        let mut unfinished = HashMap::with_capacity(ended.len());
        for (key, live) in ended {
            unfinished.insert(key, live.generation);
            stopping.spawn(live.heartbeat.stop());
        }
        let _ = timeout_at(deadline, async {
            while stopping.join_next().await.is_some() {}
        })
        .await;
        drop(stopping);

        let mut releasing = JoinSet::new();
        for (key, &generation) in &unfinished {
            let (claimer, key) = (self.claimer.clone(), key.clone());
            releasing.spawn(async move {
                let released = claimer.logout(&key, generation).await;
                (key, generation, released)
            });
        }
        let mut report = Shutdown::default();
        while let Ok(Some(done)) = timeout_at(deadline, releasing.join_next()).await {
            // A panicking transport leaves its session in `unfinished`: unreleased.
            let Ok((key, generation, released)) = done else {
                continue;
            };
            unfinished.remove(&key);
            let released = released.is_ok_and(|released| released);
            report.count(released);
            self.shared.emit(NodeEvent::LoggedOut {
                key,
                generation,
                released,
            });
        }
        // Aborts the releases still running: those sessions are left to the server.
        drop(releasing);
        if !unfinished.is_empty() {
            tracing::warn!(
                unreleased = unfinished.len(),
                timeout = ?self.shutdown_timeout,
                "shutdown: releases unfinished at the timeout, left to the server"
            );
        }
        for (key, generation) in unfinished {
            report.count(false);
            self.shared.emit(NodeEvent::LoggedOut {
                key,
                generation,
                released: false,
            });
        }
        report
    }

    /// How many events the channel dropped because it was full (the
    /// [`on_event`](NodeBuilder::on_event) sink saw them all).
    pub fn dropped_events(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// The gen of the session of `key` online here, if any.
    pub fn generation(&self, key: &Key) -> Option<i64> {
        self.shared.generation(key)
    }

    /// How many sessions are online here.
    pub fn sessions(&self) -> usize {
        self.shared.live().len()
    }

    /// The handler kicks for this node's sessions go through: serve it at the owner's
    /// endpoint.
    pub fn kick_handler(&self) -> &KickHandler {
        &self.kicks
    }

    /// The owner this node advertises on every login.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The transport it reaches the arbitration through.
    pub fn transport(&self) -> &T {
        self.claimer.transport()
    }

    /// Announces a login of `key` to the kick handler, unless the node is shut down.
    fn expect_login(&self, key: &Key) -> Result<PendingLogin, NodeLoginError> {
        if self.kicks.is_closed() {
            return Err(NodeLoginError::ShutDown);
        }
        // A shutdown from here on is caught by `admit`.
        Ok(self.kicks.expect_login(key))
    }

    /// Brings a successful login online through [`PendingLogin::admit`].
    async fn go_online(
        &self,
        key: Key,
        pending: PendingLogin,
        login: Login,
    ) -> Result<Login, NodeLoginError> {
        let generation = login.generation();
        let mut online = false;
        let admission = pending.try_admit(generation, || {
            // Under the kick handler's lock: a kick for this session is decided after this,
            // so `LoggedIn` is always reported before its `Kicked`.
            online = self.shared.insert(&key, generation, || {
                let shared = Arc::downgrade(&self.shared);
                let evicted_key = key.clone();
                self.heartbeat
                    .spawn(key.clone(), generation, self.owner.clone(), move |reason| {
                        evicted(&shared, evicted_key, generation, reason);
                    })
            });
            if online {
                self.shared.emit(NodeEvent::LoggedIn {
                    key: key.clone(),
                    login: login.clone(),
                });
            }
        });
        if online {
            return Ok(login);
        }
        let admitted = admission == Admission::Admitted;
        if !admitted && self.kicks.is_closed() {
            // Shut down while the claim was in flight: the gen it won is held by nobody
            // here, so release it as the shutdown released the others.
            let released =
                timeout(self.shutdown_timeout, self.claimer.logout(&key, generation)).await;
            if !matches!(released, Ok(Ok(_))) {
                tracing::warn!(
                    %key,
                    generation,
                    "login after shutdown: release failed, left to the server"
                );
            }
            return Err(NodeLoginError::ShutDown);
        }
        self.shared.emit(NodeEvent::LoggedIn {
            key: key.clone(),
            login: login.clone(),
        });
        let cause = match admission {
            Admission::Replaced(cause) => cause,
            // Admitted, but a newer login of the key is online here already.
            _ => KickCause::new(KickReason::LoginElsewhere),
        };
        self.shared.emit(kicked(key, generation, cause));
        Err(NodeLoginError::Replaced(Box::new(login)))
    }
}

/// The kick handler over the node's table: destroying a session removes it, stops its
/// heartbeat and reports `Kicked`. Holds the table weakly, so that the handler (mounted in
/// a server) does not keep a dropped node's heartbeats running.
fn kick_handler(shared: &Arc<Shared>, options: KickOptions) -> KickHandler {
    let read = Arc::downgrade(shared);
    let destroy = Arc::downgrade(shared);
    KickHandler::with_cause(
        move |key: &Key| read.upgrade()?.generation(key),
        move |key: Key, generation: i64, cause: KickCause| {
            if let Some(shared) = destroy.upgrade()
                && let Some(live) = shared.take(&key, Some(generation))
            {
                // Dropping the handle stops the heartbeat.
                drop(live);
                shared.emit(kicked(key, generation, cause));
            }
            std::future::ready(())
        },
        options,
    )
}

fn kicked(key: Key, generation: i64, cause: KickCause) -> NodeEvent {
    let KickCause { reason, message } = cause;
    NodeEvent::Kicked {
        key,
        generation,
        reason,
        message,
    }
}

/// The heartbeat's `on_evict`: removes the session if it is still that gen, and reports it.
fn evicted(shared: &Weak<Shared>, key: Key, generation: i64, reason: EvictReason) {
    if let Some(shared) = shared.upgrade()
        && shared.take(&key, Some(generation)).is_some()
    {
        shared.emit(NodeEvent::Evicted {
            key,
            generation,
            reason,
        });
    }
}

/// One online session: its gen and its heartbeat (dropping the handle stops it).
struct Live {
    generation: i64,
    heartbeat: HeartbeatHandle,
}

/// What the node, its kick handler and its heartbeats share.
struct Shared {
    live: Mutex<HashMap<Key, Live>>,
    /// Held while reporting, so that the sink and the channel see one order.
    report: Mutex<mpsc::Sender<NodeEvent>>,
    /// Events the channel was too full to take.
    dropped: AtomicU64,
    sink: Option<Sink>,
}

impl Shared {
    fn live(&self) -> MutexGuard<'_, HashMap<Key, Live>> {
        // Every update is a single map operation, so a poisoned map is still consistent.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn generation(&self, key: &Key) -> Option<i64> {
        self.live().get(key).map(|live| live.generation)
    }

    /// Puts the session `generation` of `key` online, watched by the heartbeat `watch`
    /// starts, unless a newer session of `key` is already online here (`false`). A
    /// replay of the session already online keeps its heartbeat.
    fn insert(&self, key: &Key, generation: i64, watch: impl FnOnce() -> HeartbeatHandle) -> bool {
        let mut live = self.live();
        let replaced = match live.get(key) {
            Some(current) if current.generation > generation => return false,
            Some(current) if current.generation == generation => return true,
            _ => live.insert(
                key.clone(),
                Live {
                    generation,
                    heartbeat: watch(),
                },
            ),
        };
        drop(live);
        // An older session of this node (it logged the key in again): its heartbeat stops.
        drop(replaced);
        true
    }

    /// Removes the session of `key` if it is at `generation` (any gen for `None`).
    fn take(&self, key: &Key, generation: Option<i64>) -> Option<Live> {
        let mut live = self.live();
        let current = live.get(key)?.generation;
        if generation.is_some_and(|wanted| wanted != current) {
            return None;
        }
        live.remove(key)
    }

    fn emit(&self, event: NodeEvent) {
        let tx = self.report.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sink) = &self.sink {
            sink(&event);
        }
        match tx.try_send(event) {
            // A dropped receiver only means nobody reads the channel.
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            // Never wait for the reader: this may run under a lock, or before a kick is
            // answered.
            Err(mpsc::error::TrySendError::Full(event)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(
                        dropped,
                        key = %event.key(),
                        "node event channel full: event dropped (the on_event sink saw it)"
                    );
                }
            }
        }
    }
}

/// What [`Node::shutdown`] came to: how many sessions it ended, by whether the server
/// released them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shutdown {
    /// Sessions the server tombstoned.
    pub released: usize,
    /// Sessions it did not: a newer session already held the key, the release failed, or
    /// it did not finish within [`NodeBuilder::shutdown_timeout`] (left to the server).
    pub unreleased: usize,
}

impl Shutdown {
    fn count(&mut self, released: bool) {
        if released {
            self.released += 1;
        } else {
            self.unreleased += 1;
        }
    }
}
