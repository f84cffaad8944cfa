//! [`NodeCheck`]: the probes of each clause, sent to one receiver or pushed down one node's
//! kick stream.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::Method;
use unique_core::{KickPayload, KickReason};
use unique_kick_signature::{DEFAULT_WINDOW, MIN_KEY_BYTES, SigningKeys};
use unique_wire::MAX_KICK_BODY_BYTES;

use crate::clause::Clause;
use crate::push::Push;
use crate::report::{ClauseResult, Report};
use crate::send::{Framing, Probe, Target, UrlError, send};

/// The project and env of every kick the check sends, unless told others.
pub const DEFAULT_PROJECT: &str = "node-check";

/// How long one request may take, connect to last byte, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How far beyond the window the stale and future timestamps are: the clocks of the check
/// and of the node may differ by up to this much without changing a verdict.
pub const CLOCK_MARGIN: Duration = Duration::from_mins(1);

/// The gen of every kick: a receiver destroys only a session older than the kick's gen, and
/// gens start at 1, so a kick at gen 1 can never destroy one.
pub const GENERATION: i64 = 1;

/// The largest uid drawn: 2^53 - 1, which a receiver holding JSON numbers as doubles
/// still reads exactly.
const MAX_UID: i64 = (1 << 53) - 1;

/// A conformance check of one node's kick receiver, given its URL and the keys the arbiter
/// signs kicks with; or, in [push mode](Self::push), of a node that has no receiver but opens
/// a kick stream, the check playing the server.
///
/// [`run`](Self::run) sends each [`Clause`]'s kicks, one at a time, and reports what came
/// back: to a receiver, each as a request on a new connection; in push mode, each as a `kick`
/// line down the node's stream, the answer being the status the node acknowledges it with.
/// Every kick names the project and env [`DEFAULT_PROJECT`] (unless
/// [`project`](Self::project) and [`env`](Self::env) say otherwise) and a uid drawn at
/// random for it from 1 to 2^53 − 1, at gen [`GENERATION`]: a node keeping the contract
/// destroys nothing (it holds no session for that key, and a gen of 1 is older than no
/// session), and even a node that ignores the gen has no session for a random uid of a
/// project of its own. Nothing but the given URL is contacted; in push mode, nothing at all.
#[derive(Debug, Clone)]
pub struct NodeCheck {
    mode: Mode,
    kicks: Kicks,
    timeout: Duration,
}

/// Whom a check sends its kicks to.
#[derive(Debug, Clone)]
enum Mode {
    /// The kick receiver at a URL.
    Receiver(Target),
    /// The node that opens a kick stream on the check's listener.
    Push(Push),
}

/// What every mode of the check sends: the kicks of each clause, signed with the node's keys
/// (the first signs), for a random uid of `project` and `env`, with the stale and future
/// timestamps [`CLOCK_MARGIN`] beyond `window`.
#[derive(Debug, Clone)]
pub(crate) struct Kicks {
    keys: SigningKeys,
    project: String,
    env: String,
    window: Duration,
}

impl NodeCheck {
    /// A check of the receiver at `url` (an `http://` URL: the node's owner endpoint), whose
    /// kicks are signed with `keys` (the first key signs, as the arbiter's kicker does).
    ///
    /// Errors: `url` is not an absolute `http` URL with a host.
    pub fn new(url: &str, keys: SigningKeys) -> Result<Self, UrlError> {
        Ok(Self::with_mode(Mode::Receiver(Target::parse(url)?), keys))
    }

    /// A check in push mode, listening on `addr` (plain HTTP/1.1; e.g. `127.0.0.1:0` for a
    /// free port, see [`local_addr`](Self::local_addr)): point the node's server URL at it.
    /// Its kicks are signed with `keys` (the first key signs). It runs only the clauses of
    /// [`Clause::PUSHED`].
    ///
    /// [`run`](Self::run) serves `GET /v1/nodes/{node}/kicks` and
    /// `POST /v1/nodes/{node}/kicks/ack` as a server does (`docs/design.md#push-kicks`),
    /// accepting any bearer token or none: it waits (at most [`wait`](Self::wait)) for a node
    /// to open its stream (any node's unless [`node`](Self::node) names one), answers it
    /// `hello` and a `ping` every [`ping`](Self::ping) interval, pushes each clause's kicks as
    /// `kick` lines with fresh ids, one at a time, and takes the status the node acks each
    /// with as its answer (an ack for a kick it waits on is answered `{"accepted":true}`,
    /// any other `false`). A second stream (the node reconnected) replaces the first
    /// (`closed` `replaced`), as on a server. At the end the stream gets `closed`
    /// `shutdown`. Until `run`, a node that connects waits in the listen queue.
    ///
    /// # Errors
    ///
    /// `addr` does not resolve or cannot be bound.
    pub fn push(addr: impl ToSocketAddrs, keys: SigningKeys) -> io::Result<Self> {
        Ok(Self::with_mode(Mode::Push(Push::bind(addr)?), keys))
    }

    fn with_mode(mode: Mode, keys: SigningKeys) -> Self {
        Self {
            mode,
            kicks: Kicks::new(keys),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// In push mode, the address the check listens on; `None` for a receiver's check.
    ///
    /// # Errors
    ///
    /// The socket's address cannot be read.
    pub fn local_addr(&self) -> io::Result<Option<SocketAddr>> {
        match &self.mode {
            Mode::Receiver(_) => Ok(None),
            Mode::Push(push) => push.local_addr().map(Some),
        }
    }

    /// The project of every kick (default [`DEFAULT_PROJECT`]), for a receiver that only
    /// accepts its own.
    #[must_use]
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.kicks.project = project.into();
        self
    }

    /// The env of every kick (default [`DEFAULT_PROJECT`]).
    #[must_use]
    pub fn env(mut self, env: impl Into<String>) -> Self {
        self.kicks.env = env.into();
        self
    }

    /// The receiver's signature window (default [`DEFAULT_WINDOW`], 5 minutes): the stale
    /// and future timestamps lie [`CLOCK_MARGIN`] beyond it.
    #[must_use]
    pub fn window(mut self, window: Duration) -> Self {
        self.kicks.window = window;
        self
    }

    /// How long one request may take (default [`DEFAULT_TIMEOUT`]); in push mode, how long
    /// one kick waits for its ack (including, when the node's stream dropped, for the node to
    /// open another). Past it the clause fails with no answer.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// In push mode, take only the stream of node `node` (default: any node's); another
    /// node's is answered 404. Nothing for a receiver's check.
    ///
    /// # Errors
    ///
    /// `InvalidParams` when `node` is not 1 to 64 characters of `A-Z a-z 0-9 . _ -` (the
    /// server's rule, [`unique_core::check_node_id`]).
    pub fn node(mut self, node: impl Into<String>) -> Result<Self, unique_core::Error> {
        let node = node.into();
        unique_core::check_node_id(&node)?;
        if let Mode::Push(push) = &mut self.mode {
            push.node = Some(node);
        }
        Ok(self)
    }

    /// In push mode, how long a run waits for the node to open its stream (default
    /// [`DEFAULT_WAIT`](crate::DEFAULT_WAIT), 30 s); past it every clause fails with no answer. Nothing for a
    /// receiver's check.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        if let Mode::Push(push) = &mut self.mode {
            push.wait = wait;
        }
        self
    }

    /// In push mode, the ping interval announced in `hello` and kept (default
    /// [`DEFAULT_PING`](crate::DEFAULT_PING), the server's 15 s; at least a millisecond). Nothing for a receiver's
    /// check.
    #[must_use]
    pub fn ping(mut self, ping: Duration) -> Self {
        if let Mode::Push(push) = &mut self.mode {
            push.ping = ping.max(Duration::from_millis(1));
        }
        self
    }

    /// The clauses [`run`](Self::run) checks, in order: [`Clause::ALL`] for a receiver,
    /// [`Clause::PUSHED`] in push mode.
    pub fn clauses(&self) -> &'static [Clause] {
        match self.mode {
            Mode::Receiver(_) => &Clause::ALL,
            Mode::Push(_) => &Clause::PUSHED,
        }
    }

    /// Checks every clause of [`clauses`](Self::clauses), in order.
    pub async fn run(&self) -> Report {
        Report::new(self.check_all(self.clauses()).await)
    }

    /// Checks one clause. In push mode that is a whole run of one clause (waiting for the
    /// node's stream again); a clause not in [`Clause::PUSHED`] fails there with no answer.
    pub async fn check(&self, clause: Clause) -> ClauseResult {
        let mut results = self.check_all(&[clause]).await;
        results
            .pop()
            .unwrap_or_else(|| ClauseResult::new(clause, Vec::new()))
    }

    async fn check_all(&self, clauses: &[Clause]) -> Vec<ClauseResult> {
        match &self.mode {
            Mode::Receiver(target) => {
                let mut results = Vec::with_capacity(clauses.len());
                for &clause in clauses {
                    let mut answers = Vec::new();
                    for (variant, probe) in self.kicks.probes(clause) {
                        answers.push((variant, send(target, probe, self.timeout).await));
                    }
                    results.push(ClauseResult::new(clause, answers));
                }
                results
            }
            Mode::Push(push) => {
                if clauses.iter().any(|c| !Clause::PUSHED.contains(c)) {
                    let why = "not checked in push mode: a pushed kick has no method or framing";
                    return self.kicks.unanswered(clauses, why);
                }
                push.run(&self.kicks, self.timeout, clauses).await
            }
        }
    }
}

impl Kicks {
    pub(crate) fn new(keys: SigningKeys) -> Self {
        Self {
            keys,
            project: DEFAULT_PROJECT.to_owned(),
            env: DEFAULT_PROJECT.to_owned(),
            window: DEFAULT_WINDOW,
        }
    }

    /// The requests of `clause`, each named for the report (the name of a clause's only
    /// request is empty).
    pub(crate) fn probes(&self, clause: Clause) -> Vec<(&'static str, Probe)> {
        let now = SystemTime::now();
        let one = |probe| vec![("", probe)];
        match clause {
            Clause::SignedKick => one(self.signed(self.kick())),
            Clause::UnknownFieldsIgnored => {
                let mut kick = self.kick_value();
                kick["node_check"] = "an unknown field".into();
                kick["reason"] = serde_json::json!({ "nested": [1, 2, 3] });
                one(self.signed(kick.to_string().into_bytes()))
            }
            Clause::BodyAtLimit => one(self.signed(padded(self.kick(), MAX_KICK_BODY_BYTES))),
            Clause::Unsigned => one(unsigned(self.kick())),
            Clause::Forged => {
                let body = self.kick();
                let signature = other_key().sign(&body, now);
                one(with_signature(signature, body))
            }
            Clause::TamperedBody => {
                let body = self.kick();
                let signature = self.keys.sign(&body, now);
                let mut spaced = body.clone();
                spaced.push(b' ');
                vec![
                    ("other-uid", with_signature(signature.clone(), self.kick())),
                    ("trailing-space", with_signature(signature, spaced)),
                ]
            }
            Clause::StaleTimestamp => {
                let body = self.kick();
                let at = now - self.window - CLOCK_MARGIN;
                one(with_signature(self.keys.sign(&body, at), body))
            }
            Clause::FutureTimestamp => {
                let body = self.kick();
                let at = now + self.window + CLOCK_MARGIN;
                one(with_signature(self.keys.sign(&body, at), body))
            }
            Clause::MalformedSignature => {
                let body = self.kick();
                let genuine = self.keys.sign(&body, now);
                let (t, v1) = genuine.split_once(',').expect("t=…,v1=…");
                let hex = v1.strip_prefix("v1=").expect("v1=…");
                vec![
                    ("garbage", with_signature("garbage".into(), body.clone())),
                    ("no-v1", with_signature(t.to_owned(), body.clone())),
                    ("no-t", with_signature(v1.to_owned(), body.clone())),
                    (
                        "short-v1",
                        with_signature(format!("{t},v1={}", &hex[2..]), body.clone()),
                    ),
                    ("semicolons", with_signature(format!("{t};{v1}"), body)),
                ]
            }
            Clause::MalformedPayload => {
                let mut mistyped = self.kick_value();
                mistyped["uid"] = mistyped["uid"].to_string().into();
                vec![
                    ("not-json", self.signed(b"kick".to_vec())),
                    ("cut-short", self.signed(b"{\"project\":".to_vec())),
                    ("array", self.signed(b"[]".to_vec())),
                    (
                        "uid-as-string",
                        self.signed(mistyped.to_string().into_bytes()),
                    ),
                ]
            }
            Clause::IncompletePayload => ["project", "env", "uid", "gen"]
                .into_iter()
                .map(|field| {
                    let mut kick = self.kick_value();
                    kick.as_object_mut().expect("an object").remove(field);
                    let variant = match field {
                        "project" => "no-project",
                        "env" => "no-env",
                        "uid" => "no-uid",
                        _ => "no-gen",
                    };
                    (variant, self.signed(kick.to_string().into_bytes()))
                })
                .collect(),
            Clause::OtherMethod => [Method::GET, Method::PUT]
                .into_iter()
                .map(|method| {
                    let variant = if method == Method::GET { "GET" } else { "PUT" };
                    let mut probe = self.signed(self.kick());
                    probe.method = method;
                    (variant, probe)
                })
                .collect(),
            Clause::OversizedBody => one(self.signed(padded(self.kick(), MAX_KICK_BODY_BYTES + 1))),
            Clause::OversizedChunkedBody => {
                let mut probe = self.signed(padded(self.kick(), MAX_KICK_BODY_BYTES + 1));
                probe.framing = Framing::Chunked;
                one(probe)
            }
        }
    }

    /// A kick payload for a fresh random uid.
    fn payload(&self) -> KickPayload {
        KickPayload {
            project: self.project.clone(),
            env: self.env.clone(),
            uid: fastrand::i64(1..=MAX_UID),
            slot: String::new(),
            generation: GENERATION,
            reason: KickReason::LoginElsewhere,
            message: None,
        }
    }

    /// A kick payload for a fresh random uid, as JSON to change.
    fn kick_value(&self) -> serde_json::Value {
        serde_json::from_slice(&self.kick()).expect("a kick body is JSON")
    }

    /// A kick payload for a fresh random uid, in the bytes the arbiter's kicker sends.
    fn kick(&self) -> Vec<u8> {
        unique_wire::encode_kick(&self.payload())
    }

    /// A POST of `body` signed with the node's key, now.
    fn signed(&self, body: Vec<u8>) -> Probe {
        let signature = self.keys.sign(&body, SystemTime::now());
        with_signature(signature, body)
    }
}

fn unsigned(body: Vec<u8>) -> Probe {
    Probe {
        method: Method::POST,
        signature: None,
        body: Bytes::from(body),
        framing: Framing::Sized,
    }
}

fn with_signature(signature: String, body: Vec<u8>) -> Probe {
    Probe {
        signature: Some(signature),
        ..unsigned(body)
    }
}

/// `body` with spaces after it up to `len` bytes: still the same JSON payload.
fn padded(mut body: Vec<u8>, len: usize) -> Vec<u8> {
    body.resize(len.max(body.len()), b' ');
    body
}

/// A key no node holds: 64 random hex digits, drawn for this probe.
fn other_key() -> SigningKeys {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let key: String = (0..2 * MIN_KEY_BYTES)
        .map(|_| char::from(HEX[fastrand::usize(..HEX.len())]))
        .collect();
    SigningKeys::new([key]).expect("a key of 64 bytes")
}
