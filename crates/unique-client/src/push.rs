//! Kicks pushed over a stream the node opens (`docs/design.md#client`, push transport): no
//! kick receiver and no listening port on the node. The node holds
//! `GET /v1/nodes/{node}/kicks` open, reads one JSON object per line, checks each kick as
//! the HTTP kick receiver does, hands it to the node's [`KickHandler`] and acknowledges it
//! with the status that receiver would have answered.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::time::{Instant, timeout, timeout_at};
use unique_core::{Error, ValidationLimits};
use unique_kick_signature::{DEFAULT_WINDOW, SigningKeys};
use unique_wire::push::{ClosedReason, DEFAULT_PING_MS, KickLine, StreamLine};

use crate::jitter::Jitter;
use crate::kick::KickHandler;

/// The longest line the node reads from a kick stream. A kick line carries a payload of at
/// most [`unique_wire::MAX_KICK_BODY_BYTES`] as a JSON string (at most 6 bytes a byte when
/// escaped) and a signature header; a longer line is a broken stream, and the node
/// reconnects.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The ping interval assumed until the stream's `hello` names the server's.
pub const DEFAULT_PING: Duration = Duration::from_millis(DEFAULT_PING_MS);

/// The status that acknowledges a kick the node applied (what the HTTP receiver answers 200).
pub const ACK_OK: u16 = 200;

/// The kick stream's side of a transport: open a node's stream, acknowledge a kick.
///
/// # Contract
///
/// - [`open_kick_stream`](Self::open_kick_stream) resolves once the server accepted the
///   stream (its answer's status and headers), bounded by the transport's own timeout; the
///   body is then read through [`KickStream::next_chunk`] for as long as the stream lasts.
/// - Errors are [`unique_core::Error`]: `Unauthenticated` / `Forbidden` for refused
///   credentials, `Throttled` past the server's per-token cap, `InvalidParams` for a server
///   that has no such route or refuses the node id, `Unavailable` for everything else.
///   The node reconnects after any of them, with backoff.
/// - [`ack_kick`](Self::ack_kick) answers whether the server was waiting for that kick
///   (`{"accepted": …}`); a late ack is `Ok(false)`, never an error.
#[async_trait]
pub trait PushTransport: Send + Sync + 'static {
    /// Opens `GET /v1/nodes/{node}/kicks` with the transport's credentials.
    async fn open_kick_stream(&self, node: &str) -> Result<Box<dyn KickStream>, Error>;

    /// `POST /v1/nodes/{node}/kicks/ack` with `{"id": id, "status": status}`.
    async fn ack_kick(&self, node: &str, id: &str, status: u16) -> Result<bool, Error>;
}

/// The body of an open kick stream.
#[async_trait]
pub trait KickStream: Send {
    /// The next bytes of the stream as they arrive (any split: lines are cut by the node),
    /// `Ok(None)` when the server ended it. Cancel-safe: the node drops the call when it
    /// stops waiting.
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, Error>;
}

#[async_trait]
impl<T: PushTransport + ?Sized> PushTransport for Arc<T> {
    async fn open_kick_stream(&self, node: &str) -> Result<Box<dyn KickStream>, Error> {
        (**self).open_kick_stream(node).await
    }
    async fn ack_kick(&self, node: &str, id: &str, status: u16) -> Result<bool, Error> {
        (**self).ack_kick(node, id, status).await
    }
}

#[async_trait]
impl<T: PushTransport + ?Sized> PushTransport for Box<T> {
    async fn open_kick_stream(&self, node: &str) -> Result<Box<dyn KickStream>, Error> {
        (**self).open_kick_stream(node).await
    }
    async fn ack_kick(&self, node: &str, id: &str, status: u16) -> Result<bool, Error> {
        (**self).ack_kick(node, id, status).await
    }
}

/// How a node takes its kicks over a push stream ([`NodeBuilder::push`](crate::NodeBuilder::push)).
///
/// Defaults: no signing keys (unsigned kicks accepted, as a kick receiver without keys
/// does), the signature window [`DEFAULT_WINDOW`] (5 minutes), the default
/// [`ValidationLimits`], reconnect backoff from 100 ms doubling to 5 s with full jitter,
/// 45 s for the stream's first line, 64 kicks applied at once.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PushOptions {
    /// The node id: the owner's `node` on every login, and the `{node}` of the stream.
    pub node: String,
    /// Kicks are verified against these (any of them), as a kick receiver with
    /// `signing_keys` verifies them: a kick without a valid signature is acknowledged 401
    /// and destroys nothing. `None`: kicks are not checked.
    pub signing_keys: Option<SigningKeys>,
    /// How far a signature's timestamp may be from this node's clock, either way.
    pub signature_window: Duration,
    /// The key limits a kick's key is checked with (match the server's).
    pub validation_limits: ValidationLimits,
    /// The first wait before reconnecting.
    pub initial_backoff: Duration,
    /// The longest wait before reconnecting.
    pub max_backoff: Duration,
    /// How each wait is randomised (default full jitter: a thousand nodes that lost their
    /// server at once do not come back at once).
    pub jitter: Jitter,
    /// How long opening the stream may take, up to and including its `hello` line.
    pub hello_timeout: Duration,
    /// How many kicks are applied at once; past it the node stops reading the stream
    /// until one is acknowledged.
    pub max_kicks_in_flight: usize,
}

impl PushOptions {
    /// Options for node `node`, which must be 1 to 64 characters of `A-Z a-z 0-9 . _ -`
    /// (the server's rule, [`unique_core::check_node_id`]).
    ///
    /// # Errors
    ///
    /// `InvalidParams` naming the rule.
    pub fn new(node: impl Into<String>) -> Result<Self, Error> {
        let node = node.into();
        unique_core::check_node_id(&node)?;
        Ok(Self {
            node,
            signing_keys: None,
            signature_window: DEFAULT_WINDOW,
            validation_limits: ValidationLimits::default(),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            jitter: Jitter::full(),
            hello_timeout: 3 * DEFAULT_PING,
            max_kicks_in_flight: 64,
        })
    }

    /// Sets [`signing_keys`](Self::signing_keys).
    #[must_use]
    pub fn signing_keys(mut self, keys: SigningKeys) -> Self {
        self.signing_keys = Some(keys);
        self
    }

    /// Sets [`signature_window`](Self::signature_window).
    #[must_use]
    pub fn signature_window(mut self, window: Duration) -> Self {
        self.signature_window = window;
        self
    }

    /// Sets [`validation_limits`](Self::validation_limits).
    #[must_use]
    pub fn validation_limits(mut self, limits: ValidationLimits) -> Self {
        self.validation_limits = limits;
        self
    }

    /// Sets [`initial_backoff`](Self::initial_backoff) and
    /// [`max_backoff`](Self::max_backoff).
    #[must_use]
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// Sets [`jitter`](Self::jitter).
    #[must_use]
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Sets [`hello_timeout`](Self::hello_timeout).
    #[must_use]
    pub fn hello_timeout(mut self, wait: Duration) -> Self {
        self.hello_timeout = wait;
        self
    }

    /// Sets [`max_kicks_in_flight`](Self::max_kicks_in_flight) (at least 1).
    #[must_use]
    pub fn max_kicks_in_flight(mut self, max: usize) -> Self {
        self.max_kicks_in_flight = max;
        self
    }
}

/// The state of a node's kick stream, for tests and operators
/// ([`Node::push_status`](crate::Node::push_status)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushStatus {
    /// The stream is open and its `hello` was read: kicks for this node reach it.
    pub connected: bool,
    /// How many streams were opened so far (each `hello` read counts one).
    pub connections: u64,
    /// How many kicks were acknowledged (the ack reached the server, accepted or not).
    pub acked: u64,
    /// Why the last stream ended, or the last attempt failed.
    pub last_error: Option<String>,
    /// The stream stopped for good: the node shut down or was dropped.
    pub stopped: bool,
}

/// A name for why the server closed a stream, for [`PushStatus::last_error`].
fn closed_name(reason: &ClosedReason) -> &'static str {
    match reason {
        ClosedReason::Replaced => "replaced",
        ClosedReason::SlowReader => "slow-reader",
        ClosedReason::Shutdown => "shutdown",
        ClosedReason::Other => "a reason this node does not know",
    }
}

/// Cuts a byte stream into lines: `\n`-terminated, a trailing `\r` dropped, empty lines
/// skipped, each at most [`MAX_LINE_BYTES`].
#[derive(Debug, Default)]
pub(crate) struct LineReader {
    buffer: Vec<u8>,
}

/// A line over [`MAX_LINE_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LineTooLong;

impl LineReader {
    /// Adds `chunk`; returns the complete lines it finished.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, LineTooLong> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        while let Some(at) = rest.iter().position(|b| *b == b'\n') {
            if self.buffer.len() + at > MAX_LINE_BYTES {
                return Err(LineTooLong);
            }
            let mut line = std::mem::take(&mut self.buffer);
            line.extend_from_slice(&rest[..at]);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if !line.is_empty() {
                lines.push(line);
            }
            rest = &rest[at + 1..];
        }
        if self.buffer.len() + rest.len() > MAX_LINE_BYTES {
            return Err(LineTooLong);
        }
        self.buffer.extend_from_slice(rest);
        Ok(lines)
    }
}

/// Reconnect waits: `initial` doubling to `max`, each jittered; reset once a stream opened.
#[derive(Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: Jitter,
    nominal: Duration,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration, jitter: Jitter) -> Self {
        let initial = initial.min(max);
        Self {
            initial,
            max,
            jitter,
            nominal: initial,
        }
    }

    /// The wait before the next attempt; the one after is twice as long, up to `max`.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.jitter.apply(self.nominal);
        self.nominal = self.nominal.saturating_mul(2).min(self.max);
        wait
    }

    /// A stream opened: the next failure waits `initial` again.
    pub(crate) fn reset(&mut self) {
        self.nominal = self.initial;
    }
}

/// Checks one pushed kick as the HTTP kick receiver (`unique-kickrecv`'s `KickService`)
/// checks a POSTed one, applies it, and returns the status that receiver would answer:
/// 413 over [`unique_wire::MAX_KICK_BODY_BYTES`], 401 for a signature that does not check
/// out (only with keys; unsigned kicks are accepted without), 400 for a payload that does
/// not read or a key the limits refuse, then 200 once no older session remains here and
/// 503 when the destroy timed out or failed.
pub(crate) async fn apply_kick(
    handler: &KickHandler,
    options: &PushOptions,
    body: &str,
    signature: Option<&str>,
) -> u16 {
    if body.len() > unique_wire::MAX_KICK_BODY_BYTES {
        return 413;
    }
    if let Some(keys) = &options.signing_keys {
        let checked = keys.verify(
            signature,
            body.as_bytes(),
            SystemTime::now(),
            options.signature_window,
        );
        if let Err(rejection) = checked {
            tracing::debug!(
                reason = rejection.as_str(),
                "pushed kick refused: signature"
            );
            return 401;
        }
    }
    let Ok(payload) = unique_wire::decode_kick(body.as_bytes()) else {
        tracing::debug!("pushed kick refused: malformed payload");
        return 400;
    };
    if options.validation_limits.check_key(&payload.key()).is_err() {
        return 400;
    }
    let ack = handler.handle(&payload).await;
    tracing::debug!(key = %payload.key(), generation = payload.generation, %ack, "pushed kick handled");
    if ack.no_older_session() { ACK_OK } else { 503 }
}

/// Starts the stream task on the current tokio runtime: it runs until `handler` closes
/// (the node's shutdown) or `stopped` fires or loses its sender (the node was dropped).
/// Returns the stream's status.
pub(crate) fn spawn<P: PushTransport + Clone>(
    transport: P,
    options: PushOptions,
    handler: KickHandler,
    stopped: oneshot::Receiver<()>,
) -> watch::Receiver<PushStatus> {
    let (status_tx, status) = watch::channel(PushStatus::default());
    tokio::spawn(run(transport, options, handler, status_tx, stopped));
    status
}

async fn run<P: PushTransport + Clone>(
    transport: P,
    options: PushOptions,
    handler: KickHandler,
    status: watch::Sender<PushStatus>,
    mut stopped: oneshot::Receiver<()>,
) {
    let options = Arc::new(options);
    let in_flight = Arc::new(Semaphore::new(options.max_kicks_in_flight.max(1)));
    let mut backoff = Backoff::new(
        options.initial_backoff,
        options.max_backoff,
        options.jitter.clone(),
    );
    let stream = Stream {
        transport: &transport,
        options: &options,
        handler: &handler,
        status: &status,
        in_flight: &in_flight,
    };
    loop {
        let ended = tokio::select! {
            biased;
            _ = &mut stopped => break,
            () = handler.closed() => break,
            ended = stream.serve(&mut backoff) => ended,
        };
        tracing::info!(node = %options.node, reason = %ended, "kick stream ended: reconnecting");
        status.send_modify(|s| {
            s.connected = false;
            s.last_error = Some(ended);
        });
        let wait = backoff.next_wait();
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            () = handler.closed() => break,
            () = tokio::time::sleep(wait) => {}
        }
    }
    status.send_modify(|s| {
        s.connected = false;
        s.stopped = true;
    });
}

/// One node's stream: what each connection needs.
struct Stream<'a, P> {
    transport: &'a P,
    options: &'a Arc<PushOptions>,
    handler: &'a KickHandler,
    status: &'a watch::Sender<PushStatus>,
    in_flight: &'a Arc<Semaphore>,
}

impl<P: PushTransport + Clone> Stream<'_, P> {
    /// Opens one stream and serves it until it ends; returns why it ended.
    async fn serve(&self, backoff: &mut Backoff) -> String {
        let node = &self.options.node;
        // The answer and the `hello` line both come within the hello timeout.
        let wait = self.options.hello_timeout;
        let hello_by = Instant::now() + wait;
        let opened = timeout_at(hello_by, self.transport.open_kick_stream(node)).await;
        let mut body = match opened {
            Ok(Ok(body)) => body,
            Ok(Err(error)) => return format!("open: {error}"),
            Err(_) => return format!("open: no answer within {wait:?}"),
        };
        let mut lines = LineReader::default();
        let mut pending = VecDeque::new();
        // Three of the server's ping intervals, once `hello` named it.
        let mut idle = None;
        loop {
            let Some(line) = pending.pop_front() else {
                let read = match idle {
                    Some(idle) => timeout(idle, body.next_chunk()).await,
                    None => timeout_at(hello_by, body.next_chunk()).await,
                };
                match read {
                    Err(_) => {
                        return match idle {
                            Some(idle) => format!("nothing received for {idle:?}"),
                            None => format!("no hello within {wait:?}"),
                        };
                    }
                    Ok(Err(error)) => return format!("read: {error}"),
                    Ok(Ok(None)) => return "the server ended the stream".to_owned(),
                    Ok(Ok(Some(chunk))) => match lines.push(&chunk) {
                        Ok(new) => pending.extend(new),
                        Err(LineTooLong) => {
                            return format!("a line over {MAX_LINE_BYTES} bytes");
                        }
                    },
                }
                continue;
            };
            let parsed = match StreamLine::from_line(&line) {
                Ok(parsed) => parsed,
                Err(error) => return format!("a line that does not read: {error}"),
            };
            match parsed {
                StreamLine::Hello {
                    node: named,
                    ping_ms,
                } => {
                    if named != *node {
                        return format!("the stream serves node {named:?}, not {node:?}");
                    }
                    let ping = if ping_ms == 0 {
                        DEFAULT_PING
                    } else {
                        Duration::from_millis(ping_ms)
                    };
                    idle = Some(ping.saturating_mul(3));
                    backoff.reset();
                    self.status.send_modify(|s| {
                        s.connected = true;
                        s.connections += 1;
                    });
                    tracing::debug!(%node, ?ping, "kick stream open");
                }
                _ if idle.is_none() => return "the stream did not begin with hello".to_owned(),
                StreamLine::Ping | StreamLine::Unknown => {}
                StreamLine::Kick(kick) => self.kick(kick).await,
                StreamLine::Closed { reason } => {
                    return format!("closed by the server: {}", closed_name(&reason));
                }
            }
        }
    }

    /// Applies one kick and acknowledges it on a task of its own, so that the stream keeps
    /// being read (pings included) while a destroy runs. Waits only for a free place among
    /// [`PushOptions::max_kicks_in_flight`].
    async fn kick(&self, kick: KickLine) {
        let KickLine {
            id,
            body,
            signature,
        } = kick;
        let Ok(permit) = Arc::clone(self.in_flight).acquire_owned().await else {
            return;
        };
        let transport = self.transport.clone();
        let options = Arc::clone(self.options);
        let handler = self.handler.clone();
        let status = self.status.clone();
        tokio::spawn(async move {
            let answer = apply_kick(&handler, &options, &body, signature.as_deref()).await;
            match transport.ack_kick(&options.node, &id, answer).await {
                Ok(accepted) => {
                    status.send_modify(|s| s.acked += 1);
                    if !accepted {
                        tracing::debug!(%id, "kick ack not accepted: the server stopped waiting");
                    }
                }
                Err(error) => {
                    tracing::warn!(%id, status = answer, %error, "kick ack failed");
                }
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
#[path = "push_tests.rs"]
mod tests;
