//! Pooled-session histories (issue 45, `docs/design.md#pooled-sessions`): clients race pooled
//! logins of a few users (each with a session limit `k`), with both policies, replays and
//! releases, over the real HTTP wire; every session's node is a real kick receiver, or a
//! real push node holding its kick stream on a server ([`PoolWorkload::push_nodes`], issue
//! 46), so the history holds the kicks each session received with the answers each client
//! saw. [`check_pool`](crate::check_pool) checks them.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use unique_client::Transport;
use unique_client_http::HttpTransport;
use unique_core::{Error, Key, PoolPolicy};
use unique_wire::{ClaimBody, ErrorCode, OwnerBody, PoolBody, PooledClaimAnswer};

use crate::push_nodes::{KickLog, PushNodes};

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolOpKind {
    /// A pooled claim of the user (`replay`: sent again with an earlier claim's claim_id).
    Claim {
        /// The login's claim_id.
        claim_id: String,
        /// What it asked at the limit.
        policy: PoolPolicy,
        /// The `k` it asked for.
        limit: usize,
        /// A retry of an earlier claim.
        replay: bool,
    },
    /// A release (logout) of a session the client was granted.
    Release {
        /// Its place.
        slot: String,
        /// Its gen.
        generation: i64,
    },
}

/// How an operation ended, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolOutcome {
    /// The claim took (or replayed) a place.
    Won {
        /// The place.
        slot: String,
        /// The session's gen.
        generation: i64,
        /// Answered by the replay short-circuit.
        replayed: bool,
        /// It evicted the place's session (`prev_generation`).
        evicted: bool,
        /// The place held a session when the claim was decided (`prev_generation`).
        has_prev: bool,
        /// The place's gen when the claim was decided (0 for a place never used).
        prev_generation: i64,
        /// The old session's kick was confirmed.
        kicked: bool,
        /// Why it was not (`kick_detail`'s wire name: `connect-error`, `timeout`,
        /// `non-2xx`, `self-replace-skipped`, …).
        kick_detail: Option<String>,
        /// The node of the session the place held (`prev_owner`'s `node`): empty when it
        /// had none (a kick receiver's endpoint) or the answer named no owner.
        prev_node: String,
    },
    /// 409 `limit_reached`: the limit and the sessions it named, `(slot, gen)`.
    LimitReached {
        /// The limit the answer names.
        limit: usize,
        /// The sessions it names.
        sessions: Vec<(String, i64)>,
    },
    /// 409 `superseded`: a retry whose login was replaced; nothing happened.
    Superseded,
    /// A release was answered.
    Released {
        /// The place was at the gen released and is now a tombstone.
        released: bool,
    },
    /// A refusal before the store was touched: nothing happened.
    Failed(String),
    /// No telling answer: it may or may not have taken effect.
    Indeterminate(String),
}

/// One operation with its real-time interval, measured from the run's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolOp {
    /// The client that sent it.
    pub client: usize,
    /// The user.
    pub uid: i64,
    /// What it asked for.
    pub kind: PoolOpKind,
    /// When it was sent.
    pub invoked: Duration,
    /// When its outcome was known.
    pub answered: Duration,
    /// How it ended.
    pub outcome: PoolOutcome,
}

impl fmt::Display for PoolOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "client {} uid {} {:?} [{:?}, {:?}] -> {:?}",
            self.client, self.uid, self.kind, self.invoked, self.answered, self.outcome
        )
    }
}

/// A kick a session's node received, when it arrived (before it was answered 200).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KickSeen {
    /// The user.
    pub uid: i64,
    /// The place.
    pub slot: String,
    /// The gen it announced: sessions of the place below it end.
    pub generation: i64,
    /// Its reason's wire name.
    pub reason: String,
    /// When it arrived.
    pub at: Duration,
}

/// A pooled run: the operations and the kicks, each ordered by time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolHistory {
    /// Every operation, by invocation time.
    pub ops: Vec<PoolOp>,
    /// Every kick received, by arrival.
    pub kicks: Vec<KickSeen>,
    /// The run's push nodes ([`PoolWorkload::push_nodes`]) by id, each with the index (in
    /// the stream servers' list) of the server it held its kick stream on; empty when the
    /// sessions' node was a kick receiver.
    pub push_nodes: BTreeMap<String, usize>,
}

impl PoolHistory {
    /// The stream server (its index) of the push node `node`; `None` for a node this run
    /// did not start (an empty one included).
    pub fn stream_server_of(&self, node: &str) -> Option<usize> {
        self.push_nodes.get(node).copied()
    }
}

/// The pooled workload: clients spread over servers, racing pooled logins of a few users.
#[derive(Debug, Clone)]
pub struct PoolWorkload {
    servers: Vec<String>,
    /// Push nodes' stream servers; empty: every session's node is the kick receiver.
    stream_servers: Option<Vec<String>>,
    clients: usize,
    users: i64,
    duration: Duration,
    project: String,
    request_timeout: Duration,
    seed: u64,
}

impl PoolWorkload {
    /// How many push nodes each client has ([`push_nodes`](Self::push_nodes)): one more
    /// than the largest limit ([`limit_of`](Self::limit_of)), so that a client holding `k`
    /// sessions of a user still has a node holding none of them.
    pub const NODES_PER_CLIENT: usize = 4;

    /// How long [`run`](Self::run) waits for every push node's stream to say `hello`.
    pub const STREAM_PATIENCE: Duration = Duration::from_secs(30);

    /// 12 clients over 3 users (uid `u` with limit 2 when odd, 3 when even) for 3 s.
    pub fn new<S: Into<String>>(servers: impl IntoIterator<Item = S>) -> Self {
        Self {
            servers: servers.into_iter().map(Into::into).collect(),
            stream_servers: None,
            clients: 12,
            users: 3,
            duration: Duration::from_secs(3),
            project: "pool".to_owned(),
            request_timeout: Duration::from_secs(5),
            seed: fastrand::u64(..),
        }
    }

    /// The session limit `k` of user `uid`: 2 or 3 (at most the server's default of 5).
    pub fn limit_of(uid: i64) -> usize {
        if uid % 2 == 1 { 2 } else { 3 }
    }

    /// Concurrent clients (at least 1).
    #[must_use]
    pub fn clients(mut self, clients: usize) -> Self {
        self.clients = clients.max(1);
        self
    }

    /// Users they share (at least 1): uids `1..=users`.
    #[must_use]
    pub fn users(mut self, users: i64) -> Self {
        self.users = users.max(1);
        self
    }

    /// How long clients keep starting operations.
    #[must_use]
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// The users' project (the env is always `run`).
    #[must_use]
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.project = project.into();
        self
    }

    /// The seed of the clients' choices (random by default).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Makes every session's node a push node (`docs/design.md#push-kicks`) instead of the
    /// kick receiver: each client gets [`NODES_PER_CLIENT`](Self::NODES_PER_CLIENT) real
    /// `unique-client` nodes (`NodeBuilder::push` over `unique-client-http`), each holding
    /// `GET /v1/nodes/{node}/kicks` open on one of `stream_servers`, given out round-robin
    /// over every node of the run (node `n` on `stream_servers[n mod len]`), while the
    /// claims still go to the workload's servers (client `i` to server `i mod n`). A claim's
    /// owner is `{"node": id}`; node ids are unique per run. Each node records every kick
    /// line as it arrives, before the node applies and acknowledges it (a node holds no
    /// session, so it acknowledges every kick 200). The run starts once every stream said
    /// `hello`.
    ///
    /// A client never claims a user from a node that may still hold one of that user's
    /// sessions (one it was granted and has not logged out, or its latest claim): that
    /// claim could evict the node's own session, a same-node replacement the server does
    /// not kick (`self-replace-skipped`). When all its nodes may, it logs one of those
    /// sessions out instead.
    #[must_use]
    pub fn push_nodes<S: Into<String>>(
        mut self,
        stream_servers: impl IntoIterator<Item = S>,
    ) -> Self {
        self.stream_servers = Some(stream_servers.into_iter().map(Into::into).collect());
        self
    }

    /// Runs the clients for the duration and returns what they saw and the kicks received.
    ///
    /// # Errors
    ///
    /// `InvalidParams` when there is no server (or push nodes with no stream server) or a
    /// base URL is not a valid one; `Unavailable` when the kick receiver cannot listen on
    /// loopback, or a push node's stream is not up within
    /// [`STREAM_PATIENCE`](Self::STREAM_PATIENCE).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, or when a client task panics.
    pub async fn run(&self) -> Result<PoolHistory, Error> {
        if self.servers.is_empty() {
            return Err(Error::invalid("a workload needs at least one server"));
        }
        let epoch = Instant::now();
        let kicks = Arc::new(Mutex::new(Vec::new()));
        let (receiver, nodes) = match &self.stream_servers {
            None => {
                let receiver =
                    KickReceiver::start(epoch, self.project.clone(), Arc::clone(&kicks)).await?;
                (Some(receiver), None)
            }
            Some(stream_servers) => {
                let log = KickLog::new(epoch, self.project.clone(), Arc::clone(&kicks));
                let nodes = PushNodes::start(
                    stream_servers,
                    self.clients * Self::NODES_PER_CLIENT,
                    self.request_timeout,
                    log,
                )
                .await?;
                (None, Some(nodes))
            }
        };
        let ops = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let http = HyperClient::builder(TokioExecutor::new()).build(HttpConnector::new());
        let mut tasks = Vec::with_capacity(self.clients);
        for id in 0..self.clients {
            let base = self.servers[id % self.servers.len()].trim_end_matches('/');
            let client = PoolClient {
                id,
                epoch,
                claim_uri: format!("{base}/v1/claim"),
                http: http.clone(),
                transport: HttpTransport::builder(base)
                    .timeout(self.request_timeout)
                    .build()?,
                timeout: self.request_timeout,
                project: self.project.clone(),
                users: self.users,
                target: match (&receiver, &nodes) {
                    (_, Some(nodes)) => Target::Nodes(
                        nodes.ids()[id * Self::NODES_PER_CLIENT..(id + 1) * Self::NODES_PER_CLIENT]
                            .to_vec(),
                    ),
                    (Some(receiver), None) => {
                        Target::Endpoint(format!("http://{}/kick", receiver.addr))
                    }
                    (None, None) => unreachable!("a kick receiver or push nodes"),
                },
                rng: fastrand::Rng::with_seed(self.seed.wrapping_add(id as u64)),
                held: Vec::new(),
                releasing: None,
                last: None,
                retry_due: false,
                claims: 0,
                ops: Arc::clone(&ops),
            };
            tasks.push(tokio::spawn(client.run(Arc::clone(&stop))));
        }
        tokio::time::sleep(self.duration).await;
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            if let Err(e) = task.await {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        if let Some(receiver) = receiver {
            receiver.task.abort();
        }
        let push_nodes = match nodes {
            None => BTreeMap::new(),
            Some(nodes) => nodes.shutdown().await,
        };
        let mut ops = std::mem::take(&mut *ops.lock().unwrap_or_else(PoisonError::into_inner));
        ops.sort_by_key(|op| op.invoked);
        let mut kicks = std::mem::take(&mut *kicks.lock().unwrap_or_else(PoisonError::into_inner));
        kicks.sort_by_key(|kick| kick.at);
        Ok(PoolHistory {
            ops,
            kicks,
            push_nodes,
        })
    }
}

/// Every session's node: one loopback HTTP server that records each kick's payload and arrival
/// and answers 200 (a confirmed kick). Each session's endpoint is `/kick/<claim_id>`, so no
/// two sessions share one and no kick is skipped as a self-replace.
struct KickReceiver {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl KickReceiver {
    async fn start(
        epoch: Instant,
        project: String,
        kicks: Arc<Mutex<Vec<KickSeen>>>,
    ) -> Result<Self, Error> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Error::unavailable_with("kick receiver: bind 127.0.0.1:0", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::unavailable_with("kick receiver: local address", e))?;
        let project = Arc::new(project);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kicks = Arc::clone(&kicks);
                let project = Arc::clone(&project);
                let service = hyper::service::service_fn(move |request| {
                    let kicks = Arc::clone(&kicks);
                    let project = Arc::clone(&project);
                    async move { Ok::<_, Infallible>(receive(request, epoch, &project, &kicks).await) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        Ok(Self { addr, task })
    }
}

/// Records one kick (its arrival first) and answers 200; a body that is no kick is 400.
async fn receive(
    request: Request<hyper::body::Incoming>,
    epoch: Instant,
    project: &str,
    kicks: &Mutex<Vec<KickSeen>>,
) -> Response<Full<Bytes>> {
    let at = epoch.elapsed();
    let Ok(body) = request.into_body().collect().await else {
        return status(StatusCode::BAD_REQUEST);
    };
    let Ok(kick) = unique_wire::decode_kick(&body.to_bytes()) else {
        return status(StatusCode::BAD_REQUEST);
    };
    if kick.project == project {
        kicks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(KickSeen {
                uid: kick.uid,
                slot: kick.slot,
                generation: kick.generation,
                reason: kick.reason.as_str().to_owned(),
                at,
            });
    }
    status(StatusCode::OK)
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}

/// A client's latest claim, for its retry.
#[derive(Debug, Clone)]
struct LastClaim {
    uid: i64,
    claim_id: String,
    policy: PoolPolicy,
    /// The index of its node among the client's (0 with the kick receiver).
    node: usize,
}

/// A session a client was granted and has not logged out.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    uid: i64,
    slot: String,
    generation: i64,
    /// The index of its node among the client's.
    node: usize,
}

/// Where a client's sessions take their kicks.
#[derive(Debug, Clone)]
enum Target {
    /// The kick receiver: each session's endpoint is `<base>/<claim_id>`.
    Endpoint(String),
    /// The client's own push nodes, by id.
    Nodes(Vec<String>),
}

struct PoolClient {
    id: usize,
    epoch: Instant,
    claim_uri: String,
    http: HyperClient<HttpConnector, Full<Bytes>>,
    transport: HttpTransport,
    timeout: Duration,
    project: String,
    users: i64,
    target: Target,
    rng: fastrand::Rng,
    /// Sessions it was granted and has not released.
    held: Vec<Held>,
    /// The session whose release is in flight: held again when the release has no answer.
    releasing: Option<Held>,
    last: Option<LastClaim>,
    /// The latest claim has no answer: retry it next.
    retry_due: bool,
    claims: u64,
    ops: Arc<Mutex<Vec<PoolOp>>>,
}

impl PoolClient {
    async fn run(mut self, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            let (uid, kind) = self.pick();
            let invoked = self.epoch.elapsed();
            let outcome = match &kind {
                PoolOpKind::Claim {
                    claim_id,
                    policy,
                    limit,
                    ..
                } => {
                    let node = self.last.as_ref().map_or(0, |last| last.node);
                    self.claim(uid, claim_id, *policy, *limit, node).await
                }
                PoolOpKind::Release { slot, generation } => {
                    let key = Key::new(self.project.as_str(), "run", uid).with_slot(slot);
                    match self.transport.release(&key, *generation).await {
                        Ok(released) => PoolOutcome::Released { released },
                        Err(e) if e.is_invalid_params() => PoolOutcome::Failed(e.to_string()),
                        Err(e) => PoolOutcome::Indeterminate(e.to_string()),
                    }
                }
            };
            self.remember(uid, &kind, &outcome);
            let indeterminate = matches!(outcome, PoolOutcome::Indeterminate(_));
            let op = PoolOp {
                client: self.id,
                uid,
                kind,
                invoked,
                answered: self.epoch.elapsed(),
                outcome,
            };
            self.ops
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(op);
            if indeterminate {
                let pause = Duration::from_millis(self.rng.u64(5..=30));
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// A retry first when the latest claim had no answer; then 60 % fresh claims (either
    /// policy), 10 % replays of the latest claim, 30 % releases of a held session.
    fn pick(&mut self) -> (i64, PoolOpKind) {
        let roll = self.rng.u32(..100);
        let retry = self.retry_due || (roll < 10 && self.last.is_some());
        if let (true, Some(last)) = (retry, &self.last) {
            self.retry_due = false;
            let kind = PoolOpKind::Claim {
                claim_id: last.claim_id.clone(),
                policy: last.policy,
                limit: PoolWorkload::limit_of(last.uid),
                replay: true,
            };
            return (last.uid, kind);
        }
        if roll >= 70 && !self.held.is_empty() {
            let index = self.rng.usize(..self.held.len());
            return self.release(index);
        }
        let uid = self.rng.i64(1..=self.users);
        let Some(node) = self.free_node(uid) else {
            // Every node of this client may hold a session of the user: log one out. (Its
            // latest claim busies at most one node, so the user's held sessions busy the
            // others and one is held.)
            let mine: Vec<usize> = (0..self.held.len())
                .filter(|i| self.held[*i].uid == uid)
                .collect();
            let index = self.rng.choice(mine).expect("a held session of the user");
            return self.release(index);
        };
        self.claims += 1;
        let policy = if self.rng.bool() {
            PoolPolicy::EvictOldest
        } else {
            PoolPolicy::DenyNew
        };
        let claim_id = format!("p{}-{}", self.id, self.claims);
        self.last = Some(LastClaim {
            uid,
            claim_id: claim_id.clone(),
            policy,
            node,
        });
        let kind = PoolOpKind::Claim {
            claim_id,
            policy,
            limit: PoolWorkload::limit_of(uid),
            replay: false,
        };
        (uid, kind)
    }

    /// Logs out `self.held[index]`.
    fn release(&mut self, index: usize) -> (i64, PoolOpKind) {
        let held = self.held.swap_remove(index);
        let kind = PoolOpKind::Release {
            slot: held.slot.clone(),
            generation: held.generation,
        };
        let uid = held.uid;
        self.releasing = Some(held);
        (uid, kind)
    }

    /// A node of this client for a new claim of `uid`, one that holds none of its sessions
    /// as far as this client knows: not the node of a session it holds, nor of its latest
    /// claim (a replay of which may take a place again). `None` when there is none. With
    /// the kick receiver, every session has an endpoint of its own: always node 0.
    fn free_node(&mut self, uid: i64) -> Option<usize> {
        let Target::Nodes(nodes) = &self.target else {
            return Some(0);
        };
        let busy = |node: usize| {
            self.held.iter().any(|h| h.uid == uid && h.node == node)
                || self
                    .last
                    .as_ref()
                    .is_some_and(|last| last.uid == uid && last.node == node)
        };
        let free: Vec<usize> = (0..nodes.len()).filter(|node| !busy(*node)).collect();
        self.rng.choice(free)
    }

    fn remember(&mut self, uid: i64, kind: &PoolOpKind, outcome: &PoolOutcome) {
        match kind {
            PoolOpKind::Claim { .. } => {
                self.retry_due = matches!(outcome, PoolOutcome::Indeterminate(_));
            }
            PoolOpKind::Release { .. } => {
                // A logout without an answer may not have happened: the session may still
                // be online on its node, so it is held (and logged out again later).
                let released = self.releasing.take();
                if let (PoolOutcome::Indeterminate(_), Some(held)) = (outcome, released) {
                    self.held.push(held);
                }
            }
        }
        if let PoolOutcome::Won {
            slot, generation, ..
        } = outcome
        {
            let node = self.last.as_ref().map_or(0, |last| last.node);
            let session = Held {
                uid,
                slot: slot.clone(),
                generation: *generation,
                node,
            };
            if !self.held.contains(&session) {
                self.held.push(session);
            }
        }
    }

    /// One pooled claim over HTTP: `POST /v1/claim` with `pool`.
    async fn claim(
        &self,
        uid: i64,
        claim_id: &str,
        policy: PoolPolicy,
        limit: usize,
        node: usize,
    ) -> PoolOutcome {
        let (endpoint, node) = match &self.target {
            Target::Endpoint(base) => (format!("{base}/{claim_id}"), String::new()),
            Target::Nodes(nodes) => (String::new(), nodes[node].clone()),
        };
        let body = ClaimBody {
            project: self.project.as_str().into(),
            env: "run".into(),
            uid,
            slot: "".into(),
            owner: OwnerBody {
                region: "history".into(),
                cluster: claim_id.into(),
                endpoint: endpoint.into(),
                node: node.into(),
            },
            claim_id: claim_id.into(),
            pool: Some(PoolBody {
                policy: Some(policy.as_str().into()),
                limit: Some(limit as u64),
            }),
        };
        let json = serde_json::to_vec(&body).expect("a claim body serialises");
        let request = Request::builder()
            .method(Method::POST)
            .uri(&self.claim_uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(json)))
            .expect("a well-formed request");
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| e.to_string())?;
            let code = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((code, body))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => PoolOutcome::Indeterminate(format!("no answer within {:?}", self.timeout)),
            Ok(Err(e)) => PoolOutcome::Indeterminate(e),
            Ok(Ok((code, body))) => claim_outcome(code, &body),
        }
    }
}

/// What a claim's answer says.
fn claim_outcome(code: StatusCode, body: &[u8]) -> PoolOutcome {
    if code == StatusCode::OK {
        return match serde_json::from_slice::<PooledClaimAnswer>(body) {
            Ok(answer) => PoolOutcome::Won {
                slot: answer.slot,
                generation: answer.claim.generation,
                replayed: answer.claim.replayed,
                evicted: answer.evicted,
                has_prev: answer.claim.has_prev,
                prev_generation: answer.claim.prev_generation,
                kicked: answer.claim.kicked,
                kick_detail: answer.claim.kick_detail.map(|d| d.as_str().to_owned()),
                prev_node: answer.claim.prev_owner.map(|o| o.node).unwrap_or_default(),
            },
            Err(e) => PoolOutcome::Indeterminate(format!("unreadable pooled answer: {e}")),
        };
    }
    if let Some((limit, sessions)) = unique_wire::limit_reached(body) {
        let sessions = sessions
            .into_iter()
            .map(|s| (s.slot, s.generation))
            .collect();
        return PoolOutcome::LimitReached { limit, sessions };
    }
    let text = String::from_utf8_lossy(body).into_owned();
    match unique_wire::error_code(body) {
        Some(ErrorCode::Superseded) => PoolOutcome::Superseded,
        // Refused before the store was touched, or decided with nothing written.
        Some(ErrorCode::InvalidParams | ErrorCode::TooManySlots) => PoolOutcome::Failed(text),
        _ => PoolOutcome::Indeterminate(format!("{code}: {text}")),
    }
}
