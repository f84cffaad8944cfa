//! What a [`Node`] reports: [`NodeEvent`]s on [`NodeEvents`], and why a login did not
//! bring a session online ([`NodeLoginError`]).

use std::fmt;

use tokio::sync::mpsc;
use unique_core::{Error, EvictReason, Key, KickReason, PooledSession};

use crate::claimer::{Login, LoginError};
#[cfg(doc)]
use crate::{Node, NodeBuilder, Session};

/// Something that happened to one of a [`Node`]'s sessions.
///
/// Every `LoggedIn` is followed by exactly one ending event for the same key and gen
/// (`Kicked`, `Replaced`, `Evicted`, `LoggedOut` or `Drained`; [`Node::shutdown`] reports
/// `LoggedOut` for every session it ends), except when it repeats a session already online
/// here (a replayed login, `replayed = true`). The same ending reaches the session's own
/// handle ([`Session::ended`]) without going through this stream.
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
    /// A newer login of the same key on this node replaced the session (the server skips
    /// the kick to a node's own endpoint: `self-replace-skipped`). Reported, and the old
    /// session's handle ended, before the newer login's `LoggedIn`.
    Replaced {
        /// The key.
        key: Key,
        /// The gen of the session that ended.
        generation: i64,
        /// The gen of the session that replaced it.
        by: i64,
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
    /// [`Node::drain`] ended the session (reported once its release ended).
    Drained {
        /// The key.
        key: Key,
        /// The gen of the session that ended.
        generation: i64,
        /// The server tombstoned the record. `false` when a newer session already held it
        /// (a takeover raced the drain), or when the release failed or did not finish
        /// within the drain's deadline.
        released: bool,
    },
}

impl NodeEvent {
    /// The key the event is about.
    pub fn key(&self) -> &Key {
        match self {
            Self::LoggedIn { key, .. }
            | Self::Kicked { key, .. }
            | Self::Replaced { key, .. }
            | Self::Evicted { key, .. }
            | Self::LoggedOut { key, .. }
            | Self::Drained { key, .. } => key,
        }
    }

    /// The gen of the session the event is about.
    pub fn generation(&self) -> i64 {
        match self {
            Self::LoggedIn { login, .. } => login.generation(),
            Self::Kicked { generation, .. }
            | Self::Replaced { generation, .. }
            | Self::Evicted { generation, .. }
            | Self::LoggedOut { generation, .. }
            | Self::Drained { generation, .. } => *generation,
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
    /// The node is draining ([`Node::drain`]): log in on another node. A login started
    /// after the drain began sends no claim; one whose claim was in flight releases the gen
    /// it won (bounded by [`NodeBuilder::shutdown_timeout`]). Nothing is reported.
    Draining,
    /// A pooled `deny-new` login ([`Node::login_pooled`]) found every place of the user's
    /// pool online: nothing was kicked or written, nothing went online and nothing is
    /// reported. Not retried: one of `sessions` must end first (a logout, an admin logout,
    /// a kick). Never a replaced login.
    LimitReached {
        /// The pool's limit `k`.
        limit: usize,
        /// The sessions online, by place: slot (`#0`, `#1`, …), gen and login time.
        sessions: Vec<PooledSession>,
        /// The claim_id the login used.
        claim_id: String,
    },
}

impl NodeLoginError {
    /// A failed claim: [`LimitReached`](Self::LimitReached) for a full pool, else
    /// [`Claim`](Self::Claim).
    pub(crate) fn from_claim(failed: LoginError) -> Self {
        match failed.error {
            Error::LimitReached { limit, sessions } => Self::LimitReached {
                limit,
                sessions,
                claim_id: failed.claim_id,
            },
            error => Self::Claim(LoginError { error, ..failed }),
        }
    }

    /// The login was replaced (or logged out) while its claim was in flight, whether the
    /// server said so (`Superseded`, a [`Claim`](Self::Claim) error) or a newer login's kick
    /// reached this node first ([`Replaced`](Self::Replaced)). Either way the session never
    /// went online here, and logging in again would take the key from the newer session.
    pub fn was_replaced(&self) -> bool {
        match self {
            Self::Claim(e) => e.is_superseded(),
            Self::Replaced(_) => true,
            Self::ShutDown | Self::Draining | Self::LimitReached { .. } => false,
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
            Self::Draining => f.write_str("the node is draining: log in on another node"),
            Self::LimitReached {
                limit, sessions, ..
            } => write!(
                f,
                "session limit {limit} reached: {} session(s) online in the pool",
                sessions.len()
            ),
        }
    }
}

impl std::error::Error for NodeLoginError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Claim(e) => Some(e),
            Self::Replaced(_) | Self::ShutDown | Self::Draining | Self::LimitReached { .. } => None,
        }
    }
}
