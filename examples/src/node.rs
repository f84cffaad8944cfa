//! One node holding (at most) one session for one key, wired the way an application would
//! wire it: a kick receiver, a claimer, a heartbeat and a session table, all reporting
//! what happens as [`NodeEvent`]s.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use unique_client::{
    ClaimRequest, ClaimResponse, Claimer, Heartbeat, HeartbeatHandle, HeartbeatOptions,
    KickHandler, KickOptions, Login, LoginError, Sessions, Transport, async_trait,
};
use unique_client_http::HttpTransport;
use unique_core::{CurrentView, Error, Key, Owner};
use unique_kick_signature::SigningKeys;

use crate::events::NodeEvent;
use crate::receiver::Receiver;

/// Where a node's events go. Called synchronously, from whichever task saw the event.
pub type EventSink = Arc<dyn Fn(NodeEvent) + Send + Sync>;

/// How to start a [`Node`].
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Base URL of the `unique-server`, e.g. `http://127.0.0.1:7420`.
    pub server: String,
    /// The key this node logs in.
    pub key: Key,
    /// Region and cluster the node advertises in its owner.
    pub region: String,
    /// See [`region`](Self::region).
    pub cluster: String,
    /// Address of its kick receiver (port 0 picks a free one).
    pub kick_listen: SocketAddr,
    /// Heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Keys its kick receiver verifies kicks with (401 for a kick not signed with one of
    /// them); `None` accepts unsigned kicks.
    pub kick_signing_keys: Option<SigningKeys>,
}

/// The heartbeat slot: the gen it watches and its handle. Dropping the handle stops it.
type HeartbeatSlot = Arc<Mutex<Option<(i64, HeartbeatHandle)>>>;

/// A node: kick receiver, claimer, heartbeat, session table.
///
/// - A kick whose gen is above the local session's destroys it: the session leaves the
///   table and its heartbeat is stopped, before the receiver answers 200.
/// - A login goes online through [`KickHandler::admit`]: if a newer gen's kick came while
///   its claim was in flight, it never goes online (reported as
///   [`NodeEvent::Destroyed`] right after its `LoggedIn`).
/// - A heartbeat eviction removes the session from the table.
/// - [`logout`](Self::logout) releases but leaves the heartbeat running, so it can be seen
///   evicting on the tombstone (`owner-empty`); an application would stop it instead.
pub struct Node {
    config: NodeConfig,
    transport: HttpTransport,
    claimer: Claimer<HttpTransport>,
    sessions: Sessions,
    kicks: KickHandler,
    heartbeat: HeartbeatSlot,
    receiver: Option<Receiver>,
    endpoint: String,
    last_login: Option<Login>,
    sink: EventSink,
}

impl Node {
    /// Starts the kick receiver (reporting [`NodeEvent::Listening`]); logs nothing in.
    ///
    /// Errors: the server URL is invalid, or the receiver cannot bind.
    pub async fn start(config: NodeConfig, sink: EventSink) -> Result<Self, String> {
        let transport = HttpTransport::new(&config.server)
            .map_err(|e| format!("cannot reach the server: {e}"))?;
        let sessions = Sessions::new();
        let heartbeat: HeartbeatSlot = Arc::default();
        let handler = kick_handler(&sessions, &heartbeat, &sink);
        let receiver = Receiver::bind(
            config.kick_listen,
            handler.clone(),
            config.kick_signing_keys.clone(),
            sink.clone(),
        )
        .await
        .map_err(|e| format!("cannot listen for kicks on {}: {e}", config.kick_listen))?;
        let endpoint = format!("http://{}/kick", receiver.addr());
        sink(NodeEvent::Listening {
            addr: receiver.addr(),
            endpoint: endpoint.clone(),
        });
        Ok(Self {
            claimer: Claimer::new(transport.clone()),
            config,
            transport,
            sessions,
            kicks: handler,
            heartbeat,
            receiver: Some(receiver),
            endpoint,
            last_login: None,
            sink,
        })
    }

    /// The owner endpoint it advertises (its kick receiver's URL).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The key it logs in.
    pub fn key(&self) -> &Key {
        &self.config.key
    }

    /// The gen of its online session, if it has one.
    pub fn local_generation(&self) -> Option<i64> {
        self.sessions.generation(&self.config.key)
    }

    /// Logs in with a fresh claim_id; on success the session goes online here and its
    /// heartbeat starts. Reports [`NodeEvent::LoggedIn`] or [`NodeEvent::LoginFailed`].
    pub async fn login(&mut self) -> Result<Login, LoginError> {
        let result = self
            .claimer
            .login(self.config.key.clone(), self.owner())
            .await;
        self.logged_in(result)
    }

    /// Logs in again with the last login's claim_id, as a client does when a claim's
    /// response was lost: the server answers from its replay short-circuit.
    pub async fn relogin_same_claim_id(&mut self) -> Result<Login, LoginError> {
        let Some(claim_id) = self.last_login.as_ref().map(|l| l.claim_id.clone()) else {
            let error = LoginError {
                error: Error::invalid("no previous login to replay"),
                claim_id: String::new(),
                attempts: 0,
            };
            return self.logged_in(Err(error));
        };
        let result = self
            .claimer
            .login_with_claim_id(self.config.key.clone(), self.owner(), claim_id)
            .await;
        self.logged_in(result)
    }

    /// Releases the last login's gen (tombstone). The heartbeat keeps running and sees the
    /// tombstone. Reports [`NodeEvent::LoggedOut`] or [`NodeEvent::LogoutFailed`].
    pub async fn logout(&mut self) -> Result<bool, String> {
        let Some(generation) = self.last_login.as_ref().map(Login::generation) else {
            let error = "no login to release".to_owned();
            (self.sink)(NodeEvent::LogoutFailed {
                error: error.clone(),
            });
            return Err(error);
        };
        match self.claimer.logout(&self.config.key, generation).await {
            Ok(released) => {
                (self.sink)(NodeEvent::LoggedOut {
                    generation,
                    released,
                });
                Ok(released)
            }
            Err(e) => {
                let error = e.to_string();
                (self.sink)(NodeEvent::LogoutFailed {
                    error: error.clone(),
                });
                Err(error)
            }
        }
    }

    /// Closes the kick receiver (kicks now fail to connect) while the session and its
    /// heartbeat stay: the node is reachable by the server but not by kicks.
    pub async fn close_receiver(&mut self) {
        if let Some(receiver) = self.receiver.take() {
            receiver.close().await;
        }
        (self.sink)(NodeEvent::ReceiverClosed);
    }

    /// Stops the heartbeat and the receiver.
    pub async fn shutdown(mut self) {
        let running = take_heartbeat(&self.heartbeat, None);
        if let Some(handle) = running {
            handle.stop().await;
        }
        if let Some(receiver) = self.receiver.take() {
            receiver.close().await;
        }
    }

    fn owner(&self) -> Owner {
        Owner::new(&self.config.region, &self.config.cluster, &self.endpoint)
    }

    /// Puts a successful login's session online and reports the outcome.
    fn logged_in(&mut self, result: Result<Login, LoginError>) -> Result<Login, LoginError> {
        match &result {
            Ok(login) => {
                let generation = login.generation();
                // A kick for a newer gen may already have come while the claim was in
                // flight and found no session: then this one was replaced before it
                // started, and never goes online.
                let (key, sessions) = (&self.config.key, &self.sessions);
                let online = self.kicks.admit(key, generation, || {
                    sessions.insert(key.clone(), generation);
                });
                if online {
                    self.watch(generation);
                }
                let o = &login.outcome;
                (self.sink)(NodeEvent::LoggedIn {
                    generation,
                    prev_generation: o.prev_generation,
                    has_prev: o.has_prev,
                    kicked: o.kicked,
                    kick_detail: o.kick_detail,
                    replayed: o.replayed,
                    claim_id: login.claim_id.clone(),
                    attempts: login.attempts,
                });
                self.last_login = Some(login.clone());
                if !online {
                    (self.sink)(NodeEvent::Destroyed {
                        local_generation: generation,
                    });
                }
            }
            Err(e) => (self.sink)(NodeEvent::LoginFailed {
                claim_id: e.claim_id.clone(),
                error: e.to_string(),
            }),
        }
        result
    }

    /// Starts the heartbeat for `generation`, unless it already watches that gen.
    fn watch(&self, generation: i64) {
        let mut slot = self
            .heartbeat
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if matches!(&*slot, Some((g, h)) if *g == generation && !h.is_finished()) {
            return;
        }
        let reporting = Reporting {
            inner: self.transport.clone(),
            local_generation: generation,
            sink: self.sink.clone(),
        };
        let options = HeartbeatOptions::default().interval(self.config.heartbeat_interval);
        let (sessions, key, sink) = (
            self.sessions.clone(),
            self.config.key.clone(),
            self.sink.clone(),
        );
        let handle = Heartbeat::with_options(reporting, options).spawn(
            self.config.key.clone(),
            generation,
            move |reason| {
                sessions.remove_if(&key, generation);
                sink(NodeEvent::Evicted {
                    local_generation: generation,
                    reason,
                });
            },
        );
        // Replacing the slot drops the previous handle, which stops that heartbeat.
        *slot = Some((generation, handle));
    }
}

/// The kick handler over the node's session table: destroying a session removes it and
/// stops its heartbeat, then reports [`NodeEvent::Destroyed`].
fn kick_handler(sessions: &Sessions, heartbeat: &HeartbeatSlot, sink: &EventSink) -> KickHandler {
    let get = {
        let sessions = sessions.clone();
        move |key: &Key| sessions.generation(key)
    };
    let destroy = {
        let (sessions, heartbeat, sink) = (sessions.clone(), heartbeat.clone(), sink.clone());
        move |key: Key, local_generation: i64| {
            if sessions.remove_if(&key, local_generation) {
                // Dropping the handle stops the heartbeat of the destroyed session.
                drop(take_heartbeat(&heartbeat, Some(local_generation)));
                sink(NodeEvent::Destroyed { local_generation });
            }
            std::future::ready(())
        }
    };
    KickHandler::new(get, destroy, KickOptions::default())
}

/// Takes the heartbeat out of its slot if it watches `generation` (any gen for `None`).
fn take_heartbeat(slot: &HeartbeatSlot, generation: Option<i64>) -> Option<HeartbeatHandle> {
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    match &*slot {
        Some((g, _)) if generation.is_none_or(|wanted| wanted == *g) => {
            slot.take().map(|(_, handle)| handle)
        }
        _ => None,
    }
}

/// The heartbeat's transport: the HTTP one, reporting each `current` answer.
#[derive(Clone)]
struct Reporting {
    inner: HttpTransport,
    local_generation: i64,
    sink: EventSink,
}

#[async_trait]
impl Transport for Reporting {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimResponse, Error> {
        self.inner.claim(request).await
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        let view = self.inner.current(key).await;
        (self.sink)(NodeEvent::Check {
            local_generation: self.local_generation,
            view: view.as_ref().map(Clone::clone).map_err(ToString::to_string),
        });
        view
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.inner.release(key, generation).await
    }
}
