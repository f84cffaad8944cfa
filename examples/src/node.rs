//! One node holding (at most) one session for one key: the `unique_sessions::node::Node` runtime with
//! its kick receiver, plus what the examples print (each heartbeat answer and each kick's
//! status), all reported as [`Report`]s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use unique_sessions::core::async_trait;
use unique_sessions::node::{
    HeartbeatOptions, HttpTransport, KickReceiver, Login, LoginError, NodeEvent, NodeLoginError,
    SigningKeys, Transport,
};
use unique_sessions::{ClaimInput, ClaimOutcome, CurrentView, Error, Key, Owner};

use crate::events::Report;
use crate::receiver::Observed;

/// Where a node's reports go. Called synchronously, from whichever task saw the event.
pub type EventSink = Arc<dyn Fn(Report) + Send + Sync>;

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
    /// them); `None` accepts unsigned kicks, and then [`kick_listen`](Self::kick_listen)
    /// must be loopback (the receiver refuses to start elsewhere).
    pub kick_signing_keys: Option<SigningKeys>,
}

/// A node: the runtime and its kick receiver, for one key.
///
/// The runtime's events become [`Report::LoggedIn`], [`Report::Destroyed`] (a kick ended the
/// session, or had replaced it before it went online), [`Report::Evicted`] and
/// [`Report::LoggedOut`], reported synchronously as they happen (a `Destroyed` before the
/// kick is answered).
pub struct Node {
    runtime: unique_sessions::node::Node<Reporting>,
    key: Key,
    receiver: Option<KickReceiver>,
    last_login: Option<Login>,
    sink: EventSink,
}

impl Node {
    /// Starts the kick receiver (reporting [`Report::Listening`]); logs nothing in.
    ///
    /// Errors: the server URL is invalid, or the receiver cannot bind.
    pub async fn start(config: NodeConfig, sink: EventSink) -> Result<Self, String> {
        let transport = Reporting {
            inner: HttpTransport::new(&config.server)
                .map_err(|e| format!("cannot reach the server: {e}"))?,
            sink: sink.clone(),
        };
        let cannot_listen =
            |e: std::io::Error| format!("cannot listen for kicks on {}: {e}", config.kick_listen);
        let listener = TcpListener::bind(config.kick_listen)
            .await
            .map_err(cannot_listen)?;
        let addr = listener.local_addr().map_err(cannot_listen)?;
        let endpoint = format!("http://{addr}/kick");
        let owner = Owner::new(&config.region, &config.cluster, &endpoint);
        let (runtime, _events) = unique_sessions::node::Node::builder(transport, owner)
            .heartbeat_options(HeartbeatOptions::default().interval(config.heartbeat_interval))
            .on_event({
                let sink = sink.clone();
                move |event| {
                    if let Some(report) = report(event) {
                        sink(report);
                    }
                }
            })
            .build();
        let mut receiver = KickReceiver::builder(runtime.kick_handler().clone());
        if let Some(keys) = config.kick_signing_keys {
            receiver = receiver.signing_keys(keys);
        }
        // Wrapped to report every kick; the receiver checks the exposure (unsigned kicks on
        // loopback only) before wrapping.
        let receiver = receiver
            .spawn_layered(listener, |kicks| Observed::new(kicks, sink.clone()))
            .map_err(cannot_listen)?;
        sink(Report::Listening { addr, endpoint });
        Ok(Self {
            runtime,
            key: config.key,
            receiver: Some(receiver),
            last_login: None,
            sink,
        })
    }

    /// The owner endpoint it advertises (its kick receiver's URL).
    pub fn endpoint(&self) -> &str {
        &self.runtime.owner().endpoint
    }

    /// The key it logs in.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The gen of its online session, if it has one.
    pub fn local_generation(&self) -> Option<i64> {
        self.runtime.generation(&self.key)
    }

    /// Logs in with a fresh claim_id. Reports [`Report::LoggedIn`] (then
    /// [`Report::Destroyed`] if a newer login had already replaced it) or
    /// [`Report::LoginFailed`].
    pub async fn login(&mut self) -> Result<Login, NodeLoginError> {
        let result = self.runtime.login(self.key.clone()).await;
        self.logged_in(result.map(|session| session.login().clone()))
    }

    /// Logs in again with the last login's claim_id, as a client does when a claim's
    /// response was lost: the server answers from its replay short-circuit.
    pub async fn relogin_same_claim_id(&mut self) -> Result<Login, NodeLoginError> {
        let Some(claim_id) = self.last_login.as_ref().map(|l| l.claim_id.clone()) else {
            let error = LoginError {
                error: Error::invalid("no previous login to replay"),
                claim_id: String::new(),
                attempts: 0,
            };
            return self.logged_in(Err(NodeLoginError::Claim(error)));
        };
        let result = self
            .runtime
            .login_with_claim_id(self.key.clone(), claim_id)
            .await;
        self.logged_in(result.map(|session| session.login().clone()))
    }

    /// Logs the session out (its heartbeat stops, then the gen is released). Reports
    /// [`Report::LoggedOut`], and [`Report::LogoutFailed`] when the release gave up.
    pub async fn logout(&mut self) -> Result<bool, LoginError> {
        let result = self.runtime.logout(&self.key).await;
        if let Err(e) = &result {
            (self.sink)(Report::LogoutFailed {
                error: e.to_string(),
            });
        }
        result
    }

    /// Closes the kick receiver (kicks now fail to connect) while the session and its
    /// heartbeat stay: the node is reachable by the server but not by kicks.
    pub async fn close_receiver(&mut self) {
        if let Some(receiver) = self.receiver.take() {
            receiver.close().await;
        }
        (self.sink)(Report::ReceiverClosed);
    }

    /// Stops the heartbeat and the receiver.
    pub async fn shutdown(mut self) {
        self.runtime.shutdown().await;
        if let Some(receiver) = self.receiver.take() {
            receiver.close().await;
        }
    }

    /// Remembers the login to replay and reports a failed claim (the runtime reports the
    /// rest).
    fn logged_in(
        &mut self,
        result: Result<Login, NodeLoginError>,
    ) -> Result<Login, NodeLoginError> {
        match &result {
            Ok(login) => self.last_login = Some(login.clone()),
            Err(NodeLoginError::Replaced(login)) => self.last_login = Some((**login).clone()),
            Err(NodeLoginError::Claim(e)) => (self.sink)(Report::LoginFailed {
                claim_id: e.claim_id.clone(),
                error: e.to_string(),
            }),
            // No claim of its own to name (the node is shut down, or a later kind).
            Err(other) => (self.sink)(Report::LoginFailed {
                claim_id: String::new(),
                error: other.to_string(),
            }),
        }
        result
    }
}

/// The report for one of the runtime's events.
fn report(event: &NodeEvent) -> Option<Report> {
    let report = match event {
        NodeEvent::LoggedIn { login, .. } => {
            let o = &login.outcome;
            Report::LoggedIn {
                generation: o.generation,
                prev_generation: o.prev_generation,
                has_prev: o.has_prev,
                kicked: o.kicked,
                kick_detail: o.kick_detail,
                replayed: o.replayed,
                claim_id: login.claim_id.clone(),
                attempts: login.attempts,
            }
        }
        NodeEvent::Kicked { generation, .. } => Report::Destroyed {
            local_generation: *generation,
        },
        NodeEvent::Evicted {
            generation, reason, ..
        } => Report::Evicted {
            local_generation: *generation,
            reason: *reason,
        },
        NodeEvent::LoggedOut {
            generation,
            released,
            ..
        } => Report::LoggedOut {
            generation: *generation,
            released: *released,
        },
        // Events added to the runtime later have no line yet.
        _ => return None,
    };
    Some(report)
}

/// The node's transport: the HTTP one, reporting each heartbeat answer.
#[derive(Clone)]
struct Reporting {
    inner: HttpTransport,
    sink: EventSink,
}

#[async_trait]
impl Transport for Reporting {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        self.inner.claim(request).await
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        let view = self.inner.current(key).await;
        (self.sink)(Report::Check {
            view: view.as_ref().map(Clone::clone).map_err(ToString::to_string),
        });
        view
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.inner.release(key, generation).await
    }
}
