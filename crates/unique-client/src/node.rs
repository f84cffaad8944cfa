//! The node runtime: one [`Node`] wires a [`Claimer`], a [`Heartbeat`] per session, the
//! session table and a [`KickHandler`] (with its `expect_login` / `admit` steps), and
//! reports what happens to sessions as [`NodeEvent`]s.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, timeout};
use unique_core::{
    EvictReason, Key, KickReason, MAX_POOL_PLACES, Owner, PoolRequest, ReleaseReason, UserKey,
    place_slot,
};

use crate::claimer::{Claimer, ClaimerOptions, Login, LoginError, PooledLogin};
use crate::drain::release_all;
use crate::event::{NodeEvent, NodeEvents, NodeLoginError};
use crate::heartbeat::{Heartbeat, HeartbeatHandle, HeartbeatOptions};
use crate::kick::{Admission, KickCause, KickHandler, KickOptions, PendingLogin};
use crate::push::{PushOptions, PushStatus, PushTransport};
use crate::session::{Ending, EndingRx, EndingTx, Session, end};
use crate::transport::Transport;

/// The default [`NodeBuilder::event_capacity`].
const DEFAULT_EVENT_CAPACITY: usize = 1024;
/// The default [`NodeBuilder::shutdown_timeout`].
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

type Sink = Box<dyn Fn(&NodeEvent) + Send + Sync>;
/// Starts a node's kick stream over its handler; stops when the receiver fires or its
/// sender is dropped.
type StartPush = Box<
    dyn FnOnce(KickHandler, oneshot::Receiver<()>) -> watch::Receiver<PushStatus> + Send + Sync,
>;

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
    push: Option<StartPush>,
}

impl<T: Transport + PushTransport + Clone> NodeBuilder<T> {
    /// Takes kicks over a stream this node opens instead of a kick receiver it serves: no
    /// listener, no inbound port (`docs/design.md#client`, push transport).
    ///
    /// Every login's owner names `options.node` (`{"node": …}`) and no endpoint: the
    /// server pushes kicks for this node's sessions over `GET /v1/nodes/{node}/kicks`,
    /// which [`build`](Self::build) starts holding open on a task of its own. Each kick is
    /// checked as the HTTP kick receiver checks one (the signature against
    /// [`PushOptions::signing_keys`] when given, the payload, the key), applied through
    /// the node's [`KickHandler`] exactly as a POSTed kick is (the session ends `Kicked`
    /// with the kick's reason, a kick for a login in flight refuses it, a kick never ends
    /// a session that is not older, I6), and acknowledged with the status that receiver
    /// would have answered. The stream reconnects on any error, when the server closes
    /// it, and when nothing (not even a ping) arrives for three ping intervals, after a
    /// jittered wait from 100 ms doubling to 5 s. [`Node::shutdown`] (or dropping every
    /// clone of the node) closes it; [`Node::push_status`] tells whether it is connected.
    ///
    /// Until the stream is open, the server finds no stream for the node and a takeover's
    /// kick is `connect-error` (the old session is presumed offline, I5b): its heartbeat
    /// ends it.
    #[must_use]
    pub fn push(mut self, options: PushOptions) -> Self {
        self.owner.endpoint.clear();
        self.owner.node.clone_from(&options.node);
        let transport = self.transport.clone();
        self.push = Some(Box::new(move |handler, stopped| {
            crate::push::spawn(transport, options, handler, stopped)
        }));
        self
    }
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
    ///
    /// A node with a [push](Self::push) stream starts it here, so it must be built within a
    /// tokio runtime.
    pub fn build(self) -> (Node<T>, NodeEvents) {
        let (tx, rx) = mpsc::channel(self.event_capacity.max(1));
        let (push_stop, push_stopped) = oneshot::channel();
        let shared = Arc::new(Shared {
            _push_stop: push_stop,
            live: Mutex::default(),
            draining: AtomicBool::new(false),
            report: Mutex::new(tx),
            dropped: AtomicU64::new(0),
            sink: self.sink,
        });
        let kicks = kick_handler(&shared, self.kicks);
        let push = self.push.map(|start| start(kicks.clone(), push_stopped));
        let node = Node {
            push,
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
/// this crate stays free of any HTTP server. A node with no listener takes them over a
/// stream it opens instead ([`NodeBuilder::push`]).
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
    /// The kick stream's status, for a node built with [`NodeBuilder::push`].
    push: Option<watch::Receiver<PushStatus>>,
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
            push: self.push.clone(),
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
    /// advertises `owner` (its endpoint is where this node's kick receiver listens; with
    /// [`NodeBuilder::push`], its node id replaces the endpoint).
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
            push: None,
        }
    }

    /// Logs `key` in with a fresh claim_id (kicking its session elsewhere first), brings
    /// the session online here, starts its heartbeat and returns its [`Session`] handle.
    /// Reports `LoggedIn`. A session of `key` already online here at an older gen ends
    /// first ([`Ending::Replaced`], reported `Replaced`), before this returns.
    ///
    /// Errors: [`NodeLoginError::Claim`] when the claim failed within the retry budget, or
    /// at once when the server answered it `Superseded` (an earlier attempt won a gen whose
    /// answer was lost, and a newer login took the key since: nothing goes online and nothing
    /// is reported); [`NodeLoginError::Replaced`] when a newer login already kicked it (then
    /// `LoggedIn` and `Kicked` are reported); [`NodeLoginError::ShutDown`] once
    /// [`shutdown`](Self::shutdown) has begun; [`NodeLoginError::Draining`] once
    /// [`drain`](Self::drain) has begun.
    pub async fn login(&self, key: Key) -> Result<Session<T>, NodeLoginError> {
        // Announced before the claim is sent, so a kick that beats the answer is seen.
        let pending = self.expect_login(&key)?;
        let login = self.claimer.login(key.clone(), self.owner.clone()).await;
        self.go_online(key, pending, login.map_err(NodeLoginError::Claim)?, None)
            .await
    }

    /// Logs a session of `user` in on a place of the user's pool with a fresh claim_id
    /// (`docs/design.md#pooled-sessions`): the server picks the lowest free place below the
    /// pool's limit `k`, or at the limit, by `pool.policy`, the oldest login's place
    /// (`evict-oldest`: that session is kicked first, `login-elsewhere` with the message
    /// "session limit k reached") or nothing (`deny-new`). The session goes online here on
    /// its place's key, so [`Session::slot`] is the place (`#0`, `#1`, …) and its heartbeat,
    /// kicks, logout and a drain all name it. Reports `LoggedIn` with that key.
    ///
    /// An evicted session held by this node ends [`Ending::Replaced`] before this returns
    /// (the server does not kick a node's own endpoint); one held by another node ends there
    /// with the kick's [`Ending::Kicked`]. A kick for a place that comes while the claim is
    /// in flight refuses the login as for [`login`](Self::login) when `pool.limit` is given
    /// (every place below it is expected); with the project's limit (`None`) the places are
    /// unknown here and such a session is left to its heartbeat (I5b).
    ///
    /// Errors: [`NodeLoginError::LimitReached`] when `deny-new` finds every place online
    /// (the places, gens and login times; nothing kicked or written, nothing reported); the
    /// others as [`login`](Self::login).
    pub async fn login_pooled(
        &self,
        user: &UserKey,
        pool: PoolRequest,
    ) -> Result<Session<T>, NodeLoginError> {
        self.login_pooled_with_claim_id(user, pool, crate::claimer::new_claim_id())
            .await
    }

    /// Like [`login_pooled`](Self::login_pooled) with a caller-chosen claim_id: resumes a
    /// pooled login that gave up ([`LoginError::claim_id`]); the server answers it with the
    /// place it took, without a second kick or a second place.
    pub async fn login_pooled_with_claim_id(
        &self,
        user: &UserKey,
        pool: PoolRequest,
        claim_id: String,
    ) -> Result<Session<T>, NodeLoginError> {
        // The place is the server's choice: expect a login on every place it may pick, so
        // that a kick beating the answer is seen whichever place it names.
        let places = pool.limit.unwrap_or(0).min(MAX_POOL_PLACES);
        let mut pending = Vec::with_capacity(places);
        for index in 0..places {
            pending.push(self.expect_login(&user.key(place_slot(index)))?);
        }
        let login = self
            .claimer
            .login_pooled_with_claim_id(user, self.owner.clone(), pool, claim_id)
            .await
            .map_err(NodeLoginError::from_claim)?;
        let PooledLogin {
            key,
            login,
            evicted,
        } = login;
        let pending = match pending.into_iter().find(|p| *p.key() == key) {
            Some(expected) => expected,
            // A place not expected (the project's limit): admitted on the closed and
            // draining checks alone.
            None => self.expect_login(&key)?,
        };
        self.go_online(key, pending, login, Some(evicted)).await
    }

    /// Like [`login`](Self::login) with a caller-chosen claim_id: resumes a login that
    /// gave up ([`LoginError::claim_id`]) or repeats one whose answer was lost; the server
    /// answers it from its replay short-circuit, without a second kick. A replay of the
    /// session online here returns another handle of that session.
    pub async fn login_with_claim_id(
        &self,
        key: Key,
        claim_id: String,
    ) -> Result<Session<T>, NodeLoginError> {
        let pending = self.expect_login(&key)?;
        let login = self
            .claimer
            .login_with_claim_id(key.clone(), self.owner.clone(), claim_id)
            .await;
        self.go_online(key, pending, login.map_err(NodeLoginError::Claim)?, None)
            .await
    }

    /// Ends the session of `key` here ([`Ending::LoggedOut`]: its heartbeat stops and kicks
    /// find nothing), then releases it on the server with the claimer's retry policy, and
    /// reports `LoggedOut`. Returns whether the server tombstoned the record; `Ok(false)`
    /// without calling the server when no session of `key` is online here.
    /// [`Session::logout`] does the same for one gen.
    ///
    /// Errors: the release failed within the retry budget; the session is gone here all
    /// the same (reported as `LoggedOut` with `released = false`), and the record stays
    /// until the next login of the key replaces it.
    pub async fn logout(&self, key: &Key) -> Result<bool, LoginError> {
        self.end_and_release(key, None).await
    }

    /// Ends the session of `key` (only at `generation`, if given) and releases it.
    pub(crate) async fn end_and_release(
        &self,
        key: &Key,
        generation: Option<i64>,
    ) -> Result<bool, LoginError> {
        let Some(live) = self.shared.take(key, generation, Ending::LoggedOut) else {
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
    /// going online) and, under the same lock, every session leaves the table (its handle
    /// ends with [`Ending::ShutDown`]); then every heartbeat stops; then all sessions are
    /// released concurrently, each with the claimer's retry policy, and each is reported
    /// `LoggedOut` as its release ends. Releases still running at the timeout are abandoned
    /// and reported `LoggedOut` with `released = false`: those records stay on the server
    /// until a newer login replaces them (its kick finds nothing here, or cannot connect).
    /// Idempotent: a second call finds nothing to end.
    pub async fn shutdown(&self) -> Shutdown {
        let deadline = Instant::now() + self.shutdown_timeout;
        let ended = self
            .kicks
            .close_with(|| self.shared.take_all(&Ending::ShutDown));
        let (released, unreleased) =
            release_all(self, ended, deadline, None, |key, generation, released| {
                NodeEvent::LoggedOut {
                    key,
                    generation,
                    released,
                }
            })
            .await;
        Shutdown {
            released,
            unreleased,
        }
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

    /// The state of the kick stream of a node built with [`NodeBuilder::push`] (`None`
    /// for a node whose kicks come through a receiver): whether it is connected, how many
    /// times it connected, how many kicks it acknowledged, why it last ended. A
    /// `watch` receiver, so a caller can wait for a change
    /// (`status.wait_for(|s| s.connected)`).
    pub fn push_status(&self) -> Option<watch::Receiver<PushStatus>> {
        self.push.clone()
    }

    /// The owner this node advertises on every login.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The transport it reaches the arbitration through.
    pub fn transport(&self) -> &T {
        self.claimer.transport()
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    pub(crate) fn claimer(&self) -> &Claimer<T> {
        &self.claimer
    }

    /// Announces a login of `key` to the kick handler, unless the node is shut down or
    /// draining.
    fn expect_login(&self, key: &Key) -> Result<PendingLogin, NodeLoginError> {
        if self.kicks.is_closed() {
            return Err(NodeLoginError::ShutDown);
        }
        if self.shared.is_draining() {
            return Err(NodeLoginError::Draining);
        }
        // A shutdown or a drain from here on is caught by `admit`.
        Ok(self.kicks.expect_login(key))
    }

    /// Brings a successful login online through [`PendingLogin::admit`]; `pooled` is
    /// `Some(evicted)` for a pooled login.
    async fn go_online(
        &self,
        key: Key,
        pending: PendingLogin,
        login: Login,
        pooled: Option<bool>,
    ) -> Result<Session<T>, NodeLoginError> {
        let generation = login.generation();
        let mut inserted = Inserted::Newer;
        let admission = pending.try_admit(generation, || {
            // Under the kick handler's lock: a kick for this session is decided after this,
            // so `LoggedIn` is always reported before its `Kicked`.
            inserted = self.shared.insert(&key, generation, || {
                let shared = Arc::downgrade(&self.shared);
                let evicted_key = key.clone();
                self.heartbeat
                    .spawn(key.clone(), generation, self.owner.clone(), move |reason| {
                        evicted(&shared, evicted_key, generation, reason);
                    })
            });
            if let Inserted::Online { replaced, .. } = &inserted {
                if let Some(old) = *replaced {
                    self.shared.emit(NodeEvent::Replaced {
                        key: key.clone(),
                        generation: old,
                        by: generation,
                    });
                }
                self.shared.emit(NodeEvent::LoggedIn {
                    key: key.clone(),
                    login: login.clone(),
                });
            }
        });
        let refused = match inserted {
            Inserted::Online { ending, .. } => {
                return Ok(Session::new(self.clone(), key, login, ending, pooled));
            }
            Inserted::Draining => Some(NodeLoginError::Draining),
            Inserted::Newer if admission == Admission::Closed => Some(NodeLoginError::ShutDown),
            Inserted::Newer => None,
        };
        if let Some(refused) = refused {
            // Shut down or draining while the claim was in flight: the gen it won is held
            // by nobody here, so release it as the shutdown or the drain released the others.
            let reason =
                matches!(refused, NodeLoginError::Draining).then_some(ReleaseReason::NodeDraining);
            let release = self.claimer.logout_with_reason(&key, generation, reason);
            let released = timeout(self.shutdown_timeout, release).await;
            if !matches!(released, Ok(Ok(_))) {
                tracing::warn!(
                    %key,
                    generation,
                    "login refused by a shutdown or a drain: release failed, left to the server"
                );
            }
            return Err(refused);
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
                && let Some(live) = shared.take(
                    &key,
                    Some(generation),
                    Ending::Kicked {
                        reason: cause.reason.clone(),
                        message: cause.message.clone(),
                    },
                )
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
        && shared
            .take(&key, Some(generation), Ending::Evicted { reason })
            .is_some()
    {
        shared.emit(NodeEvent::Evicted {
            key,
            generation,
            reason,
        });
    }
}

/// One online session: its gen, its heartbeat (dropping the handle stops it) and its
/// ending, set when it leaves the table.
pub(crate) struct Live {
    pub(crate) generation: i64,
    pub(crate) heartbeat: HeartbeatHandle,
    ending: EndingTx,
}

/// What [`Shared::insert`] did.
enum Inserted {
    /// The session is online here (put online now, or already: a replay).
    Online {
        /// Its handles' side of its ending.
        ending: EndingRx,
        /// The gen of an older session of the key it replaced here.
        replaced: Option<i64>,
    },
    /// A newer session of the key is online here: it stays, this one does not go online.
    Newer,
    /// The node is draining: nothing goes online.
    Draining,
}

/// What the node, its kick handler and its heartbeats share.
pub(crate) struct Shared {
    live: Mutex<HashMap<Key, Live>>,
    /// Set under the `live` lock when a drain begins: no session goes online after it.
    draining: AtomicBool,
    /// Held while reporting, so that the sink and the channel see one order.
    report: Mutex<mpsc::Sender<NodeEvent>>,
    /// Events the channel was too full to take.
    dropped: AtomicU64,
    sink: Option<Sink>,
    /// Dropped with the last clone of the node: a push stream's task then stops.
    _push_stop: oneshot::Sender<()>,
}

impl Shared {
    fn live(&self) -> MutexGuard<'_, HashMap<Key, Live>> {
        // Every update is a single map operation, so a poisoned map is still consistent.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn generation(&self, key: &Key) -> Option<i64> {
        self.live().get(key).map(|live| live.generation)
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Puts the session `generation` of `key` online, watched by the heartbeat `watch`
    /// starts, unless a newer session of `key` is already online here or the node is
    /// draining. A replay of the session already online keeps its heartbeat and ending; an
    /// older session of the key ends, [`Ending::Replaced`], under the same lock.
    fn insert(
        &self,
        key: &Key,
        generation: i64,
        watch: impl FnOnce() -> HeartbeatHandle,
    ) -> Inserted {
        let mut live = self.live();
        if self.is_draining() {
            return Inserted::Draining;
        }
        let replaced = match live.get(key) {
            Some(current) if current.generation > generation => return Inserted::Newer,
            Some(current) if current.generation == generation => {
                return Inserted::Online {
                    ending: current.ending.subscribe(),
                    replaced: None,
                };
            }
            _ => {
                let (tx, rx) = watch::channel(None);
                let replaced = live.insert(
                    key.clone(),
                    Live {
                        generation,
                        heartbeat: watch(),
                        ending: tx,
                    },
                );
                if let Some(old) = &replaced {
                    end(&old.ending, Ending::Replaced { by: generation });
                }
                (rx, replaced)
            }
        };
        drop(live);
        let (ending, replaced) = replaced;
        // An older session of this node (it logged the key in again): its heartbeat stops.
        Inserted::Online {
            ending,
            replaced: replaced.map(|old| old.generation),
        }
    }

    /// Removes the session of `key` if it is at `generation` (any gen for `None`), ending
    /// it with `ending` under the same lock.
    fn take(&self, key: &Key, generation: Option<i64>, ending: Ending) -> Option<Live> {
        let mut live = self.live();
        let current = live.get(key)?.generation;
        if generation.is_some_and(|wanted| wanted != current) {
            return None;
        }
        let taken = live.remove(key)?;
        end(&taken.ending, ending);
        Some(taken)
    }

    /// Removes every session, ending each with `ending` under the same lock; a drain's
    /// [`Ending::Drained`] also makes every later [`insert`](Self::insert) refuse.
    pub(crate) fn take_all(&self, ending: &Ending) -> Vec<(Key, Live)> {
        let mut live = self.live();
        if *ending == Ending::Drained {
            self.draining.store(true, Ordering::Release);
        }
        live.drain()
            .inspect(|(_, session)| {
                end(&session.ending, ending.clone());
            })
            .collect()
    }

    pub(crate) fn emit(&self, event: NodeEvent) {
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
