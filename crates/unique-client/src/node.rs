//! The node runtime: one [`Node`] wires a [`Claimer`], a [`Heartbeat`] per session, the
//! session table and a [`KickHandler`] (with its `admit` step), and reports what happens to
//! sessions as [`NodeEvent`]s.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::mpsc;
use unique_core::{EvictReason, Key, Owner};

use crate::claimer::{Claimer, ClaimerOptions, Login, LoginError};
use crate::heartbeat::{Heartbeat, HeartbeatHandle, HeartbeatOptions};
use crate::kick::{KickHandler, KickOptions};
use crate::transport::Transport;

/// Something that happened to one of a [`Node`]'s sessions.
///
/// Every `LoggedIn` is followed by exactly one ending event for the same key and gen
/// (`Kicked`, `Evicted` or `LoggedOut`), except when the node shuts down first, when a later
/// login of the same key on this node replaces the session (the server skips that kick:
/// `self-replace-skipped`), or when it repeats a session already online here (a replayed
/// login, `replayed = true`).
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
    /// A newer login took the key: the session is gone from this node. Reported before the
    /// kick is answered, so the new session is written only after it.
    Kicked {
        /// The key.
        key: Key,
        /// The gen of the session that ended.
        generation: i64,
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
    /// [`Node::logout`] ended the session.
    LoggedOut {
        /// The key.
        key: Key,
        /// The gen of the session that ended.
        generation: i64,
        /// The server tombstoned the record. `false` when a newer session already held
        /// it, or when the release failed (then `logout` returned the error).
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

/// The events of a [`Node`], in the order they happened (see [`NodeBuilder::build`]).
pub type NodeEvents = mpsc::UnboundedReceiver<NodeEvent>;

/// A login through a [`Node`] that did not bring a session online.
#[derive(Debug)]
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
        }
    }
}

impl std::error::Error for NodeLoginError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Claim(e) => Some(e),
            Self::Replaced(_) => None,
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
    /// overlapping (I5a).
    ///
    /// It runs on the node's internal paths, some under a lock: keep it quick (send on a
    /// channel, cancel a token), and never block in it.
    #[must_use]
    pub fn on_event(mut self, sink: impl Fn(&NodeEvent) + Send + Sync + 'static) -> Self {
        self.sink = Some(Box::new(sink));
        self
    }

    /// The node, and the channel its events arrive on, in the order they happened.
    ///
    /// The channel is unbounded (events are few: at most a handful per session): read it,
    /// or drop it and the events are discarded.
    pub fn build(self) -> (Node<T>, NodeEvents) {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            live: Mutex::default(),
            report: Mutex::new(tx),
            sink: self.sink,
        });
        let kicks = kick_handler(&shared, self.kicks);
        let node = Node {
            claimer: Claimer::with_options(self.transport.clone(), self.claimer),
            heartbeat: Heartbeat::with_options(self.transport, self.heartbeat),
            owner: self.owner,
            kicks,
            shared,
        };
        (node, rx)
    }
}

/// A node that holds sessions: logs them in, watches them with a heartbeat, ends them
/// when a kick or the heartbeat says so, and logs them out. Cheap to clone (shared).
///
/// Kicks reach it through [`kick_handler`](Self::kick_handler): serve that handler at the
/// owner's endpoint (`unique-kickrecv`'s `KickReceiver::spawn` does it in one call, or
/// mount `KickService` in your own server). How kicks arrive is left to the caller so that
/// this crate stays free of any HTTP server.
///
/// Dropping every clone stops the heartbeats; the kick handler (still mounted somewhere)
/// then finds no session and answers every kick `no-session`.
pub struct Node<T> {
    claimer: Claimer<T>,
    heartbeat: Heartbeat<T>,
    owner: Owner,
    kicks: KickHandler,
    shared: Arc<Shared>,
}

impl<T: Clone> Clone for Node<T> {
    fn clone(&self) -> Self {
        Self {
            claimer: self.claimer.clone(),
            heartbeat: self.heartbeat.clone(),
            owner: self.owner.clone(),
            kicks: self.kicks.clone(),
            shared: Arc::clone(&self.shared),
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
        }
    }

    /// Logs `key` in with a fresh claim_id (kicking its session elsewhere first), brings
    /// the session online here and starts its heartbeat. Reports `LoggedIn`.
    ///
    /// Errors: [`NodeLoginError::Claim`] when the claim failed within the retry budget, or
    /// at once when the server answered it `Superseded` (an earlier attempt won a gen whose
    /// answer was lost, and a newer login took the key since: nothing goes online and nothing
    /// is reported); [`NodeLoginError::Replaced`] when a newer login already kicked it (then
    /// `LoggedIn` and `Kicked` are reported).
    pub async fn login(&self, key: Key) -> Result<Login, NodeLoginError> {
        let login = self.claimer.login(key.clone(), self.owner.clone()).await;
        self.go_online(key, login.map_err(NodeLoginError::Claim)?)
    }

    /// Like [`login`](Self::login) with a caller-chosen claim_id: resumes a login that
    /// gave up ([`LoginError::claim_id`]) or repeats one whose answer was lost; the server
    /// answers it from its replay short-circuit, without a second kick.
    pub async fn login_with_claim_id(
        &self,
        key: Key,
        claim_id: String,
    ) -> Result<Login, NodeLoginError> {
        let login = self
            .claimer
            .login_with_claim_id(key.clone(), self.owner.clone(), claim_id)
            .await;
        self.go_online(key, login.map_err(NodeLoginError::Claim)?)
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

    /// Stops every heartbeat and forgets every session, without releasing them: the
    /// server keeps them until a newer login replaces them (its kick then finds nothing
    /// here, or cannot connect). Log sessions out first to release them. Reports nothing.
    pub async fn shutdown(&self) {
        let all: Vec<Live> = self.shared.live().drain().map(|(_, live)| live).collect();
        for live in all {
            live.heartbeat.stop().await;
        }
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

    /// Brings a successful login online through [`KickHandler::admit`].
    fn go_online(&self, key: Key, login: Login) -> Result<Login, NodeLoginError> {
        let generation = login.generation();
        let mut online = false;
        self.kicks.admit(&key, generation, || {
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
        self.shared.emit(NodeEvent::LoggedIn {
            key: key.clone(),
            login: login.clone(),
        });
        self.shared.emit(NodeEvent::Kicked { key, generation });
        Err(NodeLoginError::Replaced(Box::new(login)))
    }
}

/// The kick handler over the node's table: destroying a session removes it, stops its
/// heartbeat and reports `Kicked`. Holds the table weakly, so that the handler (mounted in
/// a server) does not keep a dropped node's heartbeats running.
fn kick_handler(shared: &Arc<Shared>, options: KickOptions) -> KickHandler {
    let read = Arc::downgrade(shared);
    let destroy = Arc::downgrade(shared);
    KickHandler::new(
        move |key: &Key| read.upgrade()?.generation(key),
        move |key: Key, generation: i64| {
            if let Some(shared) = destroy.upgrade()
                && let Some(live) = shared.take(&key, Some(generation))
            {
                // Dropping the handle stops the heartbeat.
                drop(live);
                shared.emit(NodeEvent::Kicked { key, generation });
            }
            std::future::ready(())
        },
        options,
    )
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
    report: Mutex<mpsc::UnboundedSender<NodeEvent>>,
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
        // A dropped receiver only means nobody reads the channel.
        let _ = tx.send(event);
    }
}
