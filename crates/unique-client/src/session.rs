//! One login's handle ([`Session`]) and why a session ended ([`Ending`]).

use std::fmt;

use tokio::sync::watch;
use unique_core::{EvictReason, Key, KickReason};

use crate::claimer::{Login, LoginError};
use crate::node::Node;
use crate::notice::EndNotice;
use crate::transport::Transport;

/// Why a session ended: what [`Session::ended`] resolves with, once per session.
///
/// Set at the moment the session leaves the node's table, under the lock that removes it:
/// whatever ends a session first (a kick, a newer login here, the heartbeat, a logout, a
/// drain, the shutdown) is its one ending, and nothing else can end it after that.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ending {
    /// A kick ended it: a newer login elsewhere took the key ([`KickReason::LoginElsewhere`])
    /// or an operator logged the user out ([`KickReason::Admin`], with their message).
    Kicked {
        /// The kick's reason.
        reason: KickReason,
        /// The kick's text for the user, if any (at most
        /// [`MAX_CAUSE_BYTES`](crate::MAX_CAUSE_BYTES) bytes).
        message: Option<String>,
    },
    /// A newer login of the same key on this node replaced it (the server sends no kick to
    /// a node's own endpoint: `self-replace-skipped`). Ended before that login returned.
    Replaced {
        /// The gen of the session that replaced it.
        by: i64,
    },
    /// The heartbeat found that the server's record no longer holds the session.
    Evicted {
        /// What the record said.
        reason: EvictReason,
    },
    /// [`Session::logout`] or [`Node::logout`] ended it.
    LoggedOut,
    /// [`Node::drain`] ended it: the node no longer takes logins, and the user's client
    /// should reconnect (it lands on another node).
    Drained,
    /// [`Node::shutdown`] ended it (or the node was dropped).
    ShutDown,
}

impl Ending {
    /// A stable name: the kick's reason (`login-elsewhere`, `admin`, or an unknown name as
    /// sent), `replaced`, `evicted`, `logged-out`, `node-draining`, `node-shutdown`. It is
    /// [`EndNotice::reason`].
    pub fn reason(&self) -> &str {
        match self {
            Self::Kicked { reason, .. } => reason.as_str(),
            Self::Replaced { .. } => "replaced",
            Self::Evicted { .. } => "evicted",
            Self::LoggedOut => "logged-out",
            Self::Drained => "node-draining",
            Self::ShutDown => "node-shutdown",
        }
    }

    /// Whether the user's client should log in again on its own: `true` only when the node
    /// went away (drained, shut down), so the next login lands on another node. `false`
    /// when another login holds the key or it was ended on purpose: reconnecting then
    /// would take the key back from the user's other device, which would take it back in
    /// turn (a ping-pong between two devices).
    pub fn reconnect(&self) -> bool {
        matches!(self, Self::Drained | Self::ShutDown)
    }
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kicked {
                message: Some(message),
                ..
            } => write!(f, "{}: {message}", self.reason()),
            Self::Replaced { by } => write!(f, "replaced on this node by gen {by}"),
            Self::Evicted { reason } => write!(f, "evicted: {}", reason.as_str()),
            _ => f.write_str(self.reason()),
        }
    }
}

/// The sending side of one session's ending: kept in the node's table beside the session.
pub(crate) type EndingTx = watch::Sender<Option<Ending>>;
/// The receiving side, in every [`Session`] of that session.
pub(crate) type EndingRx = watch::Receiver<Option<Ending>>;

/// Sets the ending unless one is set already; `true` if this call set it.
pub(crate) fn end(tx: &EndingTx, ending: Ending) -> bool {
    tx.send_if_modified(|current| {
        if current.is_some() {
            return false;
        }
        *current = Some(ending);
        true
    })
}

/// A session online on a [`Node`]: what [`Node::login`] returns. It owns its key and gen,
/// tells how the session ended ([`ended`](Self::ended)) and logs it out
/// ([`logout`](Self::logout)). Cheap to clone: clones share the session.
///
/// **Dropping it does not log out.** The session stays online, watched by its heartbeat,
/// until a kick, a newer login, a logout ([`Node::logout`] by key), a drain or the shutdown
/// ends it. A connection task may end while the user's session goes on (the task hands the
/// session to another, the user reconnects to this node and logs in again, which replaces
/// it), and logging out would need the server, which a `Drop` cannot wait for. A handle
/// holds a clone of its node, so the node's heartbeats run while any handle lives.
pub struct Session<T> {
    node: Node<T>,
    key: Key,
    login: Login,
    ending: EndingRx,
    /// `Some(evicted)` for a pooled login.
    pooled: Option<bool>,
}

impl<T: Clone> Clone for Session<T> {
    fn clone(&self) -> Self {
        Self {
            node: self.node.clone(),
            key: self.key.clone(),
            login: self.login.clone(),
            ending: self.ending.clone(),
            pooled: self.pooled,
        }
    }
}

impl<T> fmt::Debug for Session<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("key", &self.key)
            .field("generation", &self.login.generation())
            .field("ending", &*self.ending.borrow())
            .finish_non_exhaustive()
    }
}

impl<T> Session<T> {
    pub(crate) fn new(
        node: Node<T>,
        key: Key,
        login: Login,
        ending: EndingRx,
        pooled: Option<bool>,
    ) -> Self {
        Self {
            node,
            key,
            login,
            ending,
            pooled,
        }
    }

    /// The key it holds.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The slot it holds: for a pooled login ([`Node::login_pooled`]) the place the server
    /// chose (`#0`, `#1`, …), which its heartbeat, kicks, logout and a drain name; for any
    /// other login the key's slot (`""` for the default slot).
    pub fn slot(&self) -> &str {
        &self.key.slot
    }

    /// It came from [`Node::login_pooled`].
    pub fn is_pooled(&self) -> bool {
        self.pooled.is_some()
    }

    /// A pooled login that took the place of the user's oldest online session
    /// (`evict-oldest` at the limit; [`login`](Self::login)'s outcome describes that
    /// session). `false` for any other login.
    pub fn evicted_oldest(&self) -> bool {
        self.pooled == Some(true)
    }

    /// Its fencing gen.
    pub fn generation(&self) -> i64 {
        self.login.generation()
    }

    /// The login that brought it online: the server's answer (gen, previous session, kick
    /// report, replay flag), the claim_id and the attempts it took.
    pub fn login(&self) -> &Login {
        &self.login
    }

    /// Resolves with why the session ended, once it has (at once if it already has). Every
    /// call, on every clone, sees the same [`Ending`]. Takes `&self` and is cancel-safe: a
    /// connection task can `select!` on it beside its socket.
    pub async fn ended(&self) -> Ending {
        let mut ending = self.ending.clone();
        match ending.wait_for(Option::is_some).await {
            Ok(ended) => ended.clone().unwrap_or(Ending::ShutDown),
            // The node's table dropped the session without an ending: the node is gone.
            Err(_) => Ending::ShutDown,
        }
    }

    /// Why the session ended, if it has; never waits.
    pub fn ending(&self) -> Option<Ending> {
        self.ending.borrow().clone()
    }

    /// The notice to pass on to the user's client for `ending` (see [`EndNotice`]).
    pub fn notice(&self, ending: &Ending) -> EndNotice {
        EndNotice::new(ending, self.generation())
    }

    /// The node it is online on.
    pub fn node(&self) -> &Node<T> {
        &self.node
    }
}

impl<T: Transport + Clone> Session<T> {
    /// Ends this session here ([`Ending::LoggedOut`]) and releases it on the server, as
    /// [`Node::logout`] does, but only this gen: `Ok(false)` without calling the server when
    /// it has ended already (a newer session of the key on this node is left alone).
    ///
    /// Errors: the release failed within the retry budget; the session is ended here all the
    /// same, and the record stays until the next login of the key replaces it.
    pub async fn logout(&self) -> Result<bool, LoginError> {
        self.node
            .end_and_release(&self.key, Some(self.generation()))
            .await
    }
}
