//! Push kicks (`docs/design.md#push-kicks`): the hub of the kick streams nodes hold open on
//! this server, and the kicks waiting for their acks.
//!
//! A node opens `GET /v1/nodes/{node}/kicks`; the service registers its stream here (one per
//! node: a newer one replaces it) under the stream's token. A kick for a session whose owner
//! names the node ([`KickDelivery::deliver`], called by the server's kicker) is queued on the
//! stream as a `kick` line and waits, under an id, for `POST /v1/nodes/{node}/kicks/ack`.
//!
//! Bounds: streams in total and per token; each stream's queue holds
//! [`PushConfig::queue_lines`] lines, and a stream whose reader falls that far behind, or whose
//! oldest unsent line has waited [`PushConfig::write_stall`], is closed (`slow-reader`), its
//! kicks failing as `connect-error`. The hub sits behind [`KickDelivery`] so a later version can
//! forward a kick to the server holding the node's stream.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use metrics::{Counter, Gauge};
use tokio::sync::oneshot;
use tokio::time::Instant;
use unique_core::{Key, KickDetail, KickOutcome, KickPayload, async_trait};
use unique_wire::push::DEFAULT_PING_MS;
use unique_wire::{ClosedReason, KickLine, StreamLine};

use crate::auth::Grant;
use crate::peer::StreamDirectory;

/// The gauge of kick streams open on this server.
pub const KICK_STREAMS_OPEN: &str = "unique_kick_streams_open";
/// The counter of kick streams closed as slow readers, by the bound that closed them
/// (`bound="queue"`: a line found [`PushConfig::queue_lines`] queued; `bound="write-stall"`:
/// the oldest queued line waited longer than [`PushConfig::write_stall`]).
pub const KICK_STREAMS_SLOW: &str = "unique_kick_streams_slow_total";

/// Default [`PushConfig::max_streams`].
pub const DEFAULT_MAX_KICK_STREAMS: usize = 10_000;
/// Default [`PushConfig::max_streams_per_token`].
pub const DEFAULT_MAX_KICK_STREAMS_PER_TOKEN: usize = 1_000;
/// Default [`PushConfig::queue_lines`].
pub const DEFAULT_STREAM_QUEUE_LINES: usize = 64;
/// The first wait before a failed stream registration is tried again; it doubles up to
/// [`REGISTER_BACKOFF_MAX`].
const REGISTER_BACKOFF_FIRST: Duration = Duration::from_millis(50);
/// The longest wait between two tries of a stream registration.
const REGISTER_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Default [`PushConfig::write_stall`].
pub const DEFAULT_WRITE_STALL: Duration = Duration::from_secs(10);

/// The bounds of a [`KickHub`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushConfig {
    /// Streams open at once on this server; past it a new stream is refused with 503
    /// `unavailable` and `Retry-After: 1`.
    pub max_streams: usize,
    /// Streams open at once under one token (by its name; every caller is one token without
    /// authentication); past it a new stream is refused with 429 `throttled`.
    pub max_streams_per_token: usize,
    /// The interval of the `ping` lines, announced in the `hello` line.
    pub ping: Duration,
    /// Lines a stream queues for a reader that has not taken them; a line that finds the
    /// queue full closes the stream (`slow-reader`).
    pub queue_lines: usize,
    /// How long the oldest queued line may wait for the reader before the stream is closed
    /// (`slow-reader`), checked whenever a line is queued (a ping at least every `ping`).
    pub write_stall: Duration,
}

impl Default for PushConfig {
    fn default() -> Self {
        Self {
            max_streams: DEFAULT_MAX_KICK_STREAMS,
            max_streams_per_token: DEFAULT_MAX_KICK_STREAMS_PER_TOKEN,
            ping: Duration::from_millis(DEFAULT_PING_MS),
            queue_lines: DEFAULT_STREAM_QUEUE_LINES,
            write_stall: DEFAULT_WRITE_STALL,
        }
    }
}

/// A kick as it is pushed: the exact body an HTTP kick would POST and the
/// `Unique-Signature` value it would carry (`None`: the server does not sign).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedKick {
    /// The kick's JSON text.
    pub body: String,
    /// The signature over `body`, as an HTTP kick's header carries it.
    pub signature: Option<String>,
}

/// Delivers a kick to a node over the kick stream it opened, and waits for its ack.
///
/// # Contract
///
/// The outcome maps as an HTTP kick's does: an ack with a 2xx status is
/// [`KickOutcome::Confirmed`], any other status `Failed(Non2xx)`, no ack within `timeout`
/// `Failed(Timeout)`; no stream for `node` whose token covers the payload's key, or a stream
/// that closes before the ack, `Failed(ConnectError)`. Never takes longer than `timeout`.
#[async_trait]
pub trait KickDelivery: Send + Sync + 'static {
    /// Pushes `kick` (for `payload`'s key) to `node`, waiting at most `timeout` for the ack.
    async fn deliver(
        &self,
        node: &str,
        payload: &KickPayload,
        kick: PushedKick,
        timeout: Duration,
    ) -> KickOutcome;
}

/// Why a stream was not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenRefused {
    /// [`PushConfig::max_streams`] are open, or the server is shutting down: 503.
    Full,
    /// The token holds [`PushConfig::max_streams_per_token`]: 429.
    TokenFull,
}

/// The kick streams open on this server and the kicks waiting for acks. Clones share it.
#[derive(Clone)]
pub struct KickHub {
    hub: Arc<Hub>,
}

impl fmt::Debug for KickHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.hub.lock();
        f.debug_struct("KickHub")
            .field("config", &self.hub.config)
            .field("streams", &state.streams.len())
            .field("pending", &state.pending.len())
            .finish()
    }
}

struct Hub {
    config: PushConfig,
    state: Mutex<HubState>,
    serials: AtomicU64,
    open: Gauge,
    slow_queue: Counter,
    slow_stall: Counter,
    /// Where the streams held here are registered for the other servers, once attached.
    directory: OnceLock<Arc<dyn StreamDirectory>>,
}

#[derive(Default)]
struct HubState {
    streams: HashMap<String, Arc<StreamHandle>>,
    per_token: HashMap<String, usize>,
    pending: HashMap<String, Pending>,
    shutting_down: bool,
}

/// A kick pushed and not yet answered.
struct Pending {
    node: String,
    key: Key,
    stream: u64,
    answer: oneshot::Sender<u16>,
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `handle` out of the hub if it is still the node's stream, and drops the kicks
    /// waiting on it (their senders dropped: `connect-error`).
    fn remove(&self, handle: &StreamHandle) {
        let mut state = self.lock();
        let current = state
            .streams
            .get(&handle.node)
            .is_some_and(|s| s.serial == handle.serial);
        if current {
            state.streams.remove(&handle.node);
            Self::release_slot(&mut state, &handle.token);
            self.open.set(gauge_value(state.streams.len()));
        }
        state.pending.retain(|_, p| p.stream != handle.serial);
    }

    fn release_slot(state: &mut HubState, token: &str) {
        if let Some(n) = state.per_token.get_mut(token) {
            *n -= 1;
            if *n == 0 {
                state.per_token.remove(token);
            }
        }
    }
}

/// A count as a gauge's value (exact below 2^32, far above any stream cap).
fn gauge_value(n: usize) -> f64 {
    f64::from(u32::try_from(n).unwrap_or(u32::MAX))
}

impl KickHub {
    /// A hub with these bounds. Registers the [`KICK_STREAMS_OPEN`] gauge (install a metrics
    /// recorder first for it to be exported).
    pub fn new(config: PushConfig) -> Self {
        metrics::describe_gauge!(
            KICK_STREAMS_OPEN,
            "Kick streams open on this server (GET /v1/nodes/{node}/kicks)."
        );
        let open = metrics::gauge!(KICK_STREAMS_OPEN);
        open.set(0.0);
        metrics::describe_counter!(
            KICK_STREAMS_SLOW,
            "Kick streams closed as slow readers, by the bound that closed them."
        );
        let slow_queue = metrics::counter!(KICK_STREAMS_SLOW, "bound" => "queue");
        let slow_stall = metrics::counter!(KICK_STREAMS_SLOW, "bound" => "write-stall");
        slow_queue.absolute(0);
        slow_stall.absolute(0);
        Self {
            hub: Arc::new(Hub {
                config,
                state: Mutex::new(HubState::default()),
                serials: AtomicU64::new(1),
                open,
                slow_queue,
                slow_stall,
                directory: OnceLock::new(),
            }),
        }
    }

    /// The hub's bounds.
    pub fn config(&self) -> &PushConfig {
        &self.hub.config
    }

    /// Streams open now.
    pub fn streams_open(&self) -> usize {
        self.hub.lock().streams.len()
    }

    /// Whether a stream of `node` is open on this server now (its `hello` sent or not).
    pub fn holds(&self, node: &str) -> bool {
        self.hub.lock().streams.contains_key(node)
    }

    /// The nodes whose streams are open on this server now.
    pub fn nodes(&self) -> Vec<String> {
        self.hub.lock().streams.keys().cloned().collect()
    }

    /// Registers every stream opened from now on in `directory` before its `hello` line
    /// (`docs/design.md#push-kicks-across-servers`), trying again (50 ms, doubling to 2 s)
    /// until the registration lands or the stream ends; no kick is pushed to a stream before
    /// its `hello`. Only
    /// the first directory attached is kept: returns `false` for any later one.
    pub fn attach_directory(&self, directory: Arc<dyn StreamDirectory>) -> bool {
        self.hub.directory.set(directory).is_ok()
    }

    /// Ends every stream with a `closed` line, reason `shutdown`, and refuses new ones: call
    /// it when the server starts shutting down, so the streams end and their connections can
    /// drain. Kicks waiting for acks fail as `connect-error`.
    pub fn shutdown(&self) {
        let streams: Vec<Arc<StreamHandle>> = {
            let mut state = self.hub.lock();
            state.shutting_down = true;
            state.streams.values().cloned().collect()
        };
        for stream in streams {
            stream.close(Some(ClosedReason::Shutdown));
        }
    }

    /// Opens the stream of `node` for a caller holding `grant` (`None`: no authentication),
    /// replacing the node's stream on this server if it has one (that one ends with
    /// `closed`, reason `replaced`). The `hello` line is queued first; a task queues a
    /// `ping` every [`PushConfig::ping`] until the stream closes.
    pub(crate) fn open(
        &self,
        node: &str,
        grant: Option<&Grant>,
    ) -> Result<Arc<StreamHandle>, OpenRefused> {
        let config = &self.hub.config;
        let token = grant.map_or_else(String::new, |g| g.name().to_owned());
        let serial = self.hub.serials.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(StreamHandle {
            hub: Arc::downgrade(&self.hub),
            node: node.to_owned(),
            serial,
            token: token.clone(),
            grant: grant.cloned(),
            queue_lines: config.queue_lines,
            write_stall: config.write_stall,
            lines: Mutex::new(Lines::default()),
            announced: AtomicBool::new(false),
        });
        let replaced = {
            let mut state = self.hub.lock();
            if state.shutting_down {
                return Err(OpenRefused::Full);
            }
            let old = state.streams.get(node).cloned();
            // The stream this one replaces frees its places first.
            let same_token = old.as_ref().is_some_and(|o| o.token == token);
            let total = state.streams.len() - usize::from(old.is_some());
            let mine = state.per_token.get(&token).copied().unwrap_or(0) - usize::from(same_token);
            if total >= config.max_streams {
                return Err(OpenRefused::Full);
            }
            if mine >= config.max_streams_per_token {
                return Err(OpenRefused::TokenFull);
            }
            if let Some(old) = &old {
                state.streams.remove(node);
                Hub::release_slot(&mut state, &old.token);
                state.pending.retain(|_, p| p.stream != old.serial);
            }
            state.streams.insert(node.to_owned(), Arc::clone(&handle));
            *state.per_token.entry(token).or_insert(0) += 1;
            self.hub.open.set(gauge_value(state.streams.len()));
            old
        };
        if let Some(old) = replaced {
            old.close(Some(ClosedReason::Replaced));
        }
        let hello = StreamLine::Hello {
            node: node.to_owned(),
            ping_ms: u64::try_from(config.ping.as_millis()).unwrap_or(u64::MAX),
        };
        let hello: Bytes = hello.to_line().into();
        let ping = config.ping;
        match self.hub.directory.get().cloned() {
            None => {
                handle.announce(hello);
                tokio::spawn(pings(Arc::downgrade(&handle), ping));
            }
            // The hello tells the node that every server can reach it: it waits for the
            // registration, retried until it lands or the stream ends.
            Some(directory) => {
                let stream = Arc::downgrade(&handle);
                let node = node.to_owned();
                tokio::spawn(async move {
                    let mut backoff = REGISTER_BACKOFF_FIRST;
                    while !directory.register(&node).await {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(REGISTER_BACKOFF_MAX);
                        if stream.upgrade().is_none_or(|s| s.lines().closed) {
                            return;
                        }
                    }
                    if let Some(stream) = stream.upgrade() {
                        stream.announce(hello);
                    }
                    pings(stream, ping).await;
                });
            }
        }
        Ok(handle)
    }

    /// The ack of kick `id` by `node` with `status`, from a caller holding `grant`: `true`
    /// when that kick was waiting on this server for this node (and the grant covers its
    /// key); it is answered now. `false` when not (late, unknown, already answered).
    pub(crate) fn ack(&self, node: &str, id: &str, status: u16, grant: Option<&Grant>) -> bool {
        let waiting = {
            let mut state = self.hub.lock();
            let matches = state
                .pending
                .get(id)
                .is_some_and(|p| p.node == node && grant.is_none_or(|g| g.permits(&p.key)));
            if matches {
                state.pending.remove(id)
            } else {
                None
            }
        };
        // A kick whose claim stopped waiting has dropped its receiver: still answered.
        waiting.is_some_and(|p| {
            let _ = p.answer.send(status);
            true
        })
    }
}

/// Queues a ping every `every` while the stream lives; a ping that finds the reader stalled
/// closes the stream.
async fn pings(stream: Weak<StreamHandle>, every: Duration) {
    let ping: Bytes = StreamLine::Ping.to_line().into();
    loop {
        tokio::time::sleep(every).await;
        let Some(stream) = stream.upgrade() else {
            return;
        };
        match stream.enqueue(ping.clone()) {
            Ok(()) => {}
            Err(Refused::Closed) => return,
            Err(Refused::Slow(bound)) => {
                stream.close_slow(bound);
                return;
            }
        }
    }
}

/// Why a line was not queued.
enum Refused {
    /// The stream is closing or closed.
    Closed,
    /// The queue is full, or its oldest line waited longer than the write stall.
    Slow(SlowBound),
}

/// Which bound found a reader slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlowBound {
    /// [`PushConfig::queue_lines`] were queued.
    Queue,
    /// The oldest queued line waited longer than [`PushConfig::write_stall`].
    WriteStall,
}

/// One open kick stream: its queue of lines, read by its [`ResponseBody`](crate::ResponseBody).
pub(crate) struct StreamHandle {
    hub: Weak<Hub>,
    node: String,
    serial: u64,
    /// The per-token bucket: the grant's name, `""` without authentication.
    token: String,
    grant: Option<Grant>,
    queue_lines: usize,
    write_stall: Duration,
    lines: Mutex<Lines>,
    /// The `hello` line is queued: kicks may follow it. Until then the stream is no stream
    /// for a kick (its registration for the other servers has not landed yet).
    announced: AtomicBool,
}

#[derive(Default)]
struct Lines {
    queue: VecDeque<Bytes>,
    /// When the reader last took a line, or the queue last became non-empty.
    progress: Option<Instant>,
    waker: Option<Waker>,
    /// The stream is closing: nothing more is queued.
    closed: bool,
    /// The `closed` line still to send, if any, once the queue is empty.
    closed_line: Option<ClosedReason>,
}

impl StreamHandle {
    fn lines(&self) -> MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn permits(&self, key: &Key) -> bool {
        self.grant.as_ref().is_none_or(|g| g.permits(key))
    }

    fn is_announced(&self) -> bool {
        self.announced.load(Ordering::Acquire)
    }

    /// Queues the `hello` line (a new queue has room for it); kicks may follow.
    fn announce(&self, hello: Bytes) {
        let _ = self.enqueue(hello);
        self.announced.store(true, Ordering::Release);
    }

    fn enqueue(&self, line: Bytes) -> Result<(), Refused> {
        let mut lines = self.lines();
        if lines.closed {
            return Err(Refused::Closed);
        }
        let now = Instant::now();
        if lines.queue.is_empty() {
            lines.progress = Some(now);
        } else {
            let stalled = lines
                .progress
                .is_some_and(|p| now.duration_since(p) > self.write_stall);
            if stalled {
                return Err(Refused::Slow(SlowBound::WriteStall));
            }
            if lines.queue.len() >= self.queue_lines {
                return Err(Refused::Slow(SlowBound::Queue));
            }
        }
        lines.queue.push_back(line);
        if let Some(waker) = lines.waker.take() {
            waker.wake();
        }
        Ok(())
    }

    /// Ends the stream: it leaves the hub, its waiting kicks fail, and its reader gets the
    /// `closed` line (when `reason` is given; a slow reader's queued lines are dropped first)
    /// and then the end of the body.
    pub(crate) fn close(&self, reason: Option<ClosedReason>) {
        if let Some(hub) = self.hub.upgrade() {
            hub.remove(self);
        }
        let mut lines = self.lines();
        if lines.closed {
            return;
        }
        if reason == Some(ClosedReason::SlowReader) {
            lines.queue.clear();
        }
        lines.closed = true;
        lines.closed_line = reason;
        if let Some(waker) = lines.waker.take() {
            waker.wake();
        }
    }

    /// Closes a slow reader's stream (`slow-reader`), counted by the bound that found it.
    fn close_slow(&self, bound: SlowBound) {
        if let Some(hub) = self.hub.upgrade() {
            match bound {
                SlowBound::Queue => hub.slow_queue.increment(1),
                SlowBound::WriteStall => hub.slow_stall.increment(1),
            }
        }
        tracing::info!(node = %self.node, ?bound, "kick stream closed: slow reader");
        self.close(Some(ClosedReason::SlowReader));
    }

    /// The body is gone: the connection closed. Nothing more can be sent.
    pub(crate) fn body_dropped(&self) {
        self.close(None);
    }

    /// The next line for the body: `Ready(None)` once the stream has ended.
    pub(crate) fn poll_line(&self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut lines = self.lines();
        if let Some(line) = lines.queue.pop_front() {
            lines.progress = Some(Instant::now());
            return Poll::Ready(Some(line));
        }
        if lines.closed {
            let last = lines.closed_line.take();
            return Poll::Ready(last.map(|reason| StreamLine::Closed { reason }.to_line().into()));
        }
        lines.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Removes a pushed kick from the hub when its delivery ends, whatever ended it (an ack,
/// the timeout, the claim dropping the future).
struct PendingGuard<'a> {
    hub: &'a Hub,
    id: String,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.hub.lock().pending.remove(&self.id);
    }
}

#[async_trait]
impl KickDelivery for KickHub {
    async fn deliver(
        &self,
        node: &str,
        payload: &KickPayload,
        kick: PushedKick,
        timeout: Duration,
    ) -> KickOutcome {
        let key = Key::new(payload.project.clone(), payload.env.clone(), payload.uid)
            .with_slot(payload.slot.clone());
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (answer, answered) = oneshot::channel();
        let stream = {
            let mut state = self.hub.lock();
            let stream = state.streams.get(node);
            let Some(stream) = stream
                .filter(|s| s.is_announced() && s.permits(&key))
                .cloned()
            else {
                return KickOutcome::Failed(KickDetail::ConnectError);
            };
            state.pending.insert(
                id.clone(),
                Pending {
                    node: node.to_owned(),
                    key,
                    stream: stream.serial,
                    answer,
                },
            );
            stream
        };
        let _guard = PendingGuard {
            hub: &self.hub,
            id: id.clone(),
        };
        let line = StreamLine::Kick(KickLine {
            id,
            body: kick.body,
            signature: kick.signature,
        });
        match stream.enqueue(line.to_line().into()) {
            Ok(()) => {}
            Err(Refused::Closed) => return KickOutcome::Failed(KickDetail::ConnectError),
            Err(Refused::Slow(bound)) => {
                stream.close_slow(bound);
                return KickOutcome::Failed(KickDetail::ConnectError);
            }
        }
        match tokio::time::timeout(timeout, answered).await {
            Ok(Ok(status)) if (200..300).contains(&status) => KickOutcome::Confirmed,
            Ok(Ok(_)) => KickOutcome::Failed(KickDetail::Non2xx),
            // The stream closed before the ack: its pending kicks were dropped.
            Ok(Err(_)) => KickOutcome::Failed(KickDetail::ConnectError),
            Err(_) => KickOutcome::Failed(KickDetail::Timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use unique_core::KickReason;

    use super::*;

    fn payload(uid: i64) -> KickPayload {
        KickPayload::new(
            &Key::new("game", "prod", uid),
            2,
            KickReason::LoginElsewhere,
        )
    }

    fn kick() -> PushedKick {
        PushedKick {
            body: "{}".into(),
            signature: None,
        }
    }

    /// The lines the body would send now, without waiting.
    fn ready_lines(stream: &StreamHandle) -> Vec<StreamLine> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut lines = Vec::new();
        while let Poll::Ready(Some(line)) = stream.poll_line(&mut cx) {
            lines.push(StreamLine::from_line(&line).unwrap());
        }
        lines
    }

    /// A reader that takes nothing: the queue fills with kicks (each waiting for an ack
    /// that never comes), and the kick that finds it full closes the stream as a slow
    /// reader and fails as connect-error, as do the kicks still waiting on it; the body
    /// then sends only the closed line.
    #[tokio::test]
    async fn a_full_queue_closes_the_stream_as_a_slow_reader() {
        let hub = KickHub::new(PushConfig {
            queue_lines: 4,
            ping: Duration::from_hours(1),
            ..PushConfig::default()
        });
        let stream = hub.open("n1", None).unwrap();
        // The hello and three kicks fill the queue of four.
        let waiting: Vec<_> = (1..=3)
            .map(|uid| {
                let hub = hub.clone();
                tokio::spawn(async move {
                    hub.deliver("n1", &payload(uid), kick(), Duration::from_hours(1))
                        .await
                })
            })
            .collect();
        poll_fn(|cx| {
            if stream.lines().queue.len() == 4 {
                Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await;
        // Refused at once; the short timeout only bounds a broken hub.
        let overflow = hub
            .deliver("n1", &payload(4), kick(), Duration::from_millis(500))
            .await;
        assert_eq!(overflow, KickOutcome::Failed(KickDetail::ConnectError));
        for waiting in waiting {
            assert_eq!(
                waiting.await.unwrap(),
                KickOutcome::Failed(KickDetail::ConnectError)
            );
        }
        assert_eq!(hub.streams_open(), 0);
        assert_eq!(
            ready_lines(&stream),
            vec![StreamLine::Closed {
                reason: ClosedReason::SlowReader
            }]
        );
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(stream.poll_line(&mut cx), Poll::Ready(None));
        let later = hub
            .deliver("n1", &payload(5), kick(), Duration::from_hours(1))
            .await;
        assert_eq!(later, KickOutcome::Failed(KickDetail::ConnectError));
    }

    /// A directory whose first `failures` registrations fail.
    struct Flaky {
        failures: AtomicU64,
        tries: AtomicU64,
    }

    #[async_trait]
    impl StreamDirectory for Flaky {
        async fn register(&self, _node: &str) -> bool {
            self.tries.fetch_add(1, Ordering::SeqCst);
            self.failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_err()
        }

        async fn forward_ack(&self, _node: &str, _id: &str, _status: u16) -> bool {
            false
        }
    }

    /// With a directory, the hello waits for the stream's registration, tried again until it
    /// lands; until then a kick finds no stream (connect-error) and nothing is queued.
    #[tokio::test(start_paused = true)]
    async fn the_hello_waits_for_the_registration_and_kicks_wait_for_the_hello() {
        let hub = KickHub::new(PushConfig {
            ping: Duration::from_hours(1),
            ..PushConfig::default()
        });
        let directory = Arc::new(Flaky {
            failures: AtomicU64::new(3),
            tries: AtomicU64::new(0),
        });
        assert!(hub.attach_directory(directory.clone()));
        let stream = hub.open("n1", None).unwrap();
        tokio::task::yield_now().await;
        assert_eq!(ready_lines(&stream), vec![]);
        let early = hub
            .deliver("n1", &payload(1), kick(), Duration::from_millis(10))
            .await;
        assert_eq!(early, KickOutcome::Failed(KickDetail::ConnectError));
        // 50 + 100 + 200 ms of backoff, then the fourth try lands.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(directory.tries.load(Ordering::SeqCst), 4);
        let hello = StreamLine::Hello {
            node: "n1".into(),
            ping_ms: 3_600_000,
        };
        assert_eq!(ready_lines(&stream), vec![hello]);
        let delivered = {
            let hub = hub.clone();
            tokio::spawn(async move {
                hub.deliver("n1", &payload(2), kick(), Duration::from_secs(5))
                    .await
            })
        };
        tokio::task::yield_now().await;
        let id = match ready_lines(&stream).as_slice() {
            [StreamLine::Kick(line)] => line.id.clone(),
            other => panic!("expected one kick line, got {other:?}"),
        };
        assert!(hub.ack("n1", &id, 200, None));
        assert_eq!(delivered.await.unwrap(), KickOutcome::Confirmed);
    }

    #[tokio::test]
    async fn a_dropped_body_leaves_the_hub_and_frees_its_places() {
        let hub = KickHub::new(PushConfig {
            max_streams: 1,
            ..PushConfig::default()
        });
        let stream = hub.open("n1", None).unwrap();
        assert_eq!(hub.open("n2", None).err(), Some(OpenRefused::Full));
        stream.body_dropped();
        assert_eq!(hub.streams_open(), 0);
        assert!(hub.open("n2", None).is_ok());
    }
}
