//! What a connection is doing, and the watchdog that closes it when a phase lasts too long.
//!
//! hyper 1's own `header_read_timeout` starts its clock when a connection becomes ready for the
//! next request head, so it bounds the keep-alive idle wait and the head together: one timeout
//! cannot be long for idle connections and short for half-sent heads. This module keeps the two
//! apart. A connection is always in one phase:
//!
//! - **head** — since the accept (first request) or since the first byte after an idle wait;
//!   bounded by the header timeout;
//! - **busy** — the service has the request (its body has its own timeout,
//!   [`RequestBody`](crate::RequestBody)); not bounded here;
//! - **idle** — since the service answered; bounded by the idle timeout.
//!
//! The phase is set by the connection's socket wrapper ([`Watched`]: a read of at least one byte
//! while idle starts a head), and by the service wrapper (a call makes it busy, an answer idle),
//! both driven by hyper in the connection's task: one writer. The watchdog runs in a task of its
//! own (so a connection's reads and writes never poll it) and only reads; the phase and its start
//! share one atomic word, so it never sees a new phase with an old start. The watchdog is one
//! timer per connection, re-armed at least every `min(header, idle)` timeout.
//!
//! Relaxed ordering is enough because nothing else is published through the word: the watchdog
//! needs a phase and its start that belong together, which one word gives, and it reads them in
//! the order they were written, which one atomic's coherence gives. The loom model in
//! `activity/loom_models.rs` checks both (so a head after a long idle wait is never timed from the
//! idle wait's start), and is shown to fail on a copy that keeps the phase and its start in two
//! atomics.

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::sync::{AtomicBool, AtomicU64, Instant};

const HEAD: u64 = 0;
const BUSY: u64 = 1;
const IDLE: u64 = 2;
/// The low bits of [`Activity::state`] that hold the phase.
const PHASE_BITS: u64 = 0b11;

/// One connection's phase and when it began.
#[derive(Debug)]
pub(crate) struct Activity {
    origin: Instant,
    /// The phase in the two low bits; above them, the start of the phase in microseconds after
    /// `origin` (busy keeps the start of the head before it, which nobody reads).
    state: AtomicU64,
    body_timed_out: AtomicBool,
    /// A long-lived answer was given and the connection's send buffer is still to shrink.
    long_lived: AtomicBool,
    /// Bytes the connection's writes handed to the socket (or to TLS), for the pacing of a
    /// long-lived body ([`Paced`](crate::service::Paced)).
    written: AtomicU64,
    /// A paced body waits for the next write: `pace_waker` holds its waker.
    pacing: AtomicBool,
    pace_waker: std::sync::Mutex<Option<std::task::Waker>>,
}

/// One load of [`Activity::state`]: a phase and when it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    phase: u64,
    since: Instant,
}

impl Seen {
    /// When this phase expires, and as what; never while busy.
    fn due(self, header: Duration, idle: Duration) -> Option<(Instant, Expired)> {
        match self.phase {
            HEAD => Some((self.since + header, Expired::Header)),
            IDLE => Some((self.since + idle, Expired::Idle)),
            _ => None,
        }
    }
}

/// Why the watchdog closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expired {
    Header,
    Idle,
}

impl Activity {
    /// A connection accepted at `origin`: its first head is due within the header timeout.
    pub(crate) fn new(origin: Instant) -> Self {
        Self {
            origin,
            state: AtomicU64::new(HEAD),
            body_timed_out: AtomicBool::new(false),
            long_lived: AtomicBool::new(false),
            written: AtomicU64::new(0),
            pacing: AtomicBool::new(false),
            pace_waker: std::sync::Mutex::new(None),
        }
    }

    fn enter(&self, phase: u64) {
        let micros = u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX >> 2);
        self.state.store((micros << 2) | phase, Relaxed);
    }

    fn phase(&self) -> u64 {
        self.state.load(Relaxed) & PHASE_BITS
    }

    /// The phase and its start, from one load.
    fn seen(&self) -> Seen {
        let state = self.state.load(Relaxed);
        Seen {
            phase: state & PHASE_BITS,
            since: self.origin + Duration::from_micros(state >> 2),
        }
    }

    /// Bytes arrived: if the connection was idle, a request head has begun.
    fn read_bytes(&self) {
        if self.phase() == IDLE {
            self.enter(HEAD);
        }
    }

    /// The service got a request.
    pub(crate) fn request_started(&self) {
        self.body_timed_out.store(false, Relaxed);
        // One writer (the connection's task): a load and a store cannot interleave with another.
        let state = self.state.load(Relaxed);
        self.state.store((state & !PHASE_BITS) | BUSY, Relaxed);
    }

    /// The service answered; the connection waits for the next request.
    pub(crate) fn request_finished(&self) {
        self.enter(IDLE);
    }

    /// The current request's body passed its deadline.
    pub(crate) fn body_timed_out(&self) {
        self.body_timed_out.store(true, Relaxed);
    }

    /// The answer is long-lived ([`LongLived`](crate::LongLived)): the connection's next
    /// write shrinks its send buffer first.
    pub(crate) fn answered_long_lived(&self) {
        self.long_lived.store(true, Relaxed);
    }

    /// Whether a long-lived answer asks for the send buffer to shrink, once.
    fn take_long_lived(&self) -> bool {
        self.long_lived.load(Relaxed) && self.long_lived.swap(false, Relaxed)
    }

    /// `n` bytes were written: wakes a paced body waiting for room.
    fn wrote(&self, n: usize) {
        self.written.fetch_add(n as u64, SeqCst);
        if self.pacing.load(SeqCst) {
            let waker = self
                .pace_waker
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            self.pacing.store(false, SeqCst);
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// Bytes written on the connection so far.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(SeqCst)
    }

    /// Wakes `cx`'s task at the connection's next write. Read [`written`](Self::written)
    /// again after it: a write between the caller's read and this call has not woken it.
    pub(crate) fn wake_at_next_write(&self, cx: &Context<'_>) {
        let mut slot = self
            .pace_waker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Some(cx.waker().clone());
        self.pacing.store(true, SeqCst);
    }

    /// Whether the current request's body passed its deadline.
    pub(crate) fn did_body_time_out(&self) -> bool {
        self.body_timed_out.load(Relaxed)
    }

    /// Resolves once a head has lasted `header` or an idle wait `idle`; never while busy.
    #[cfg(not(loom))]
    pub(crate) async fn expired(&self, header: Duration, idle: Duration) -> Expired {
        // The phase changes without waking the watchdog (that would cost every read), so it
        // never sleeps longer than the shorter timeout: a phase that began while it slept
        // started after it fell asleep, so its deadline is not before the wake-up, and is then
        // kept exactly.
        let longest_sleep = header.min(idle);
        let sleep = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(sleep);
        loop {
            let now = Instant::now();
            let wake = match self.seen().due(header, idle) {
                Some((deadline, expired)) if deadline <= now => return expired,
                Some((deadline, _)) => deadline.min(now + longest_sleep),
                None => now + longest_sleep,
            };
            sleep.as_mut().reset(wake);
            sleep.as_mut().await;
        }
    }
}

/// A connection's socket, reporting reads to its [`Activity`] and deferring the first write
/// after each read by one turn of the scheduler.
///
/// Why the deferral: without it each connection task reads a request, answers and writes at
/// once, so under load the server alternates read, write, read, write, and every answer lands
/// while its client has just gone back to sleep: one wake-up of the client (on a VM, an
/// inter-processor interrupt) per answer, paid inside the server's `send`. Deferred, the
/// scheduler first runs every other ready connection (their reads and answers), then the
/// writes go out together, as Redis does (it answers in `beforeSleep`); the client, woken by
/// the first, is still busy when the others arrive. Measured with `unique-bench` on the memory
/// store (64 connections, one worker): server CPU per claim 11.5 → 10.7 µs, the client's
/// 8.7 → 7.0 µs. The cost is one extra poll of the connection task per answer, and an answer
/// waits at most for the other connections that were ready with it.
#[derive(Debug)]
pub(crate) struct Watched<T> {
    io: T,
    activity: std::sync::Arc<Activity>,
    /// Whether the next write goes out now: false after a read brought bytes.
    write_ready: bool,
    /// Called on the first write after a long-lived answer: shrinks the socket's send buffer.
    shrink: fn(&T),
}

impl<T> Watched<T> {
    /// `shrink` runs on the first write after a long-lived answer, before it.
    pub(crate) fn new(io: T, activity: std::sync::Arc<Activity>, shrink: fn(&T)) -> Self {
        Self {
            io,
            activity,
            write_ready: true,
            shrink,
        }
    }

    /// True when this write is to be deferred: the task is woken (so it runs again after the
    /// tasks already queued) and the write returns `Pending` this once.
    fn defer_write(&mut self, cx: &mut Context<'_>) -> bool {
        if self.activity.take_long_lived() {
            (self.shrink)(&self.io);
        }
        if self.write_ready {
            return false;
        }
        self.write_ready = true;
        cx.waker().wake_by_ref();
        true
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read_bytes();
            self.write_ready = false;
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.defer_write(cx) {
            return Poll::Pending;
        }
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.activity.wrote(n);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.defer_write(cx) {
            return Poll::Pending;
        }
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            self.activity.wrote(n);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(all(test, loom))]
mod loom_models;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const HEADER: Duration = Duration::from_secs(10);
    const IDLE_FOR: Duration = Duration::from_mins(1);

    /// What expired, checking (on the paused clock) that it did so `after` from now, up to the
    /// timer wheel's millisecond rounding.
    async fn expires(activity: &Activity, after: Duration) -> Expired {
        let started = Instant::now();
        let expired = activity.expired(HEADER, IDLE_FOR).await;
        assert_about(started.elapsed(), after);
        expired
    }

    fn assert_about(elapsed: Duration, expected: Duration) {
        assert!(
            elapsed >= expected && elapsed <= expected + Duration::from_millis(2),
            "{elapsed:?} is not {expected:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_head_gets_the_header_timeout_from_the_accept() {
        let activity = Activity::new(Instant::now());
        assert_eq!(expires(&activity, HEADER).await, Expired::Header);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_starts_the_idle_wait_and_a_byte_ends_it() {
        let activity = Activity::new(Instant::now());
        activity.request_started();
        activity.request_finished();
        assert_eq!(expires(&activity, IDLE_FOR).await, Expired::Idle);

        activity.request_finished();
        tokio::time::advance(Duration::from_secs(50)).await;
        activity.read_bytes();
        // The head's clock starts at its first byte, not at the start of the idle wait.
        assert_eq!(expires(&activity, HEADER).await, Expired::Header);
    }

    #[tokio::test(start_paused = true)]
    async fn a_phase_that_begins_while_the_watchdog_sleeps_keeps_its_own_deadline() {
        let activity = std::sync::Arc::new(Activity::new(Instant::now()));
        let short = Duration::from_secs(1);
        let watch = {
            let activity = std::sync::Arc::clone(&activity);
            // A long header timeout: the watchdog first sleeps towards the head's deadline.
            tokio::spawn(async move { activity.expired(HEADER, short).await })
        };
        tokio::task::yield_now().await;
        activity.request_started();
        activity.request_finished();
        let finished = Instant::now();
        assert_eq!(watch.await.unwrap(), Expired::Idle);
        assert_about(finished.elapsed(), short);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_is_never_expired() {
        let activity = std::sync::Arc::new(Activity::new(Instant::now()));
        activity.request_started();
        let watch = {
            let activity = std::sync::Arc::clone(&activity);
            tokio::spawn(async move { activity.expired(HEADER, IDLE_FOR).await })
        };
        for _ in 0..100 {
            // Each step wakes the watchdog's recheck and lets it run.
            tokio::time::advance(HEADER).await;
            activity.read_bytes(); // a body arriving: still busy
            tokio::task::yield_now().await;
        }
        assert!(!watch.is_finished());
        activity.request_finished();
        let finished = Instant::now();
        assert_eq!(watch.await.unwrap(), Expired::Idle);
        assert_about(finished.elapsed(), IDLE_FOR);
    }

    /// Counts how often it is woken.
    struct CountingWaker(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for CountingWaker {
        fn wake(self: std::sync::Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[tokio::test]
    async fn the_first_write_after_a_read_waits_one_turn_and_wakes_its_task() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (ours, mut peer) = tokio::io::duplex(64);
        let activity = std::sync::Arc::new(Activity::new(Instant::now()));
        let mut watched = Watched::new(ours, activity, |_| {});
        let counter = std::sync::Arc::new(CountingWaker(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(std::sync::Arc::clone(&counter));
        let mut cx = Context::from_waker(&waker);
        let wake_count = || counter.0.load(std::sync::atomic::Ordering::Relaxed);

        // Nothing read yet: a write goes out at once.
        let polled = Pin::new(&mut watched).poll_write(&mut cx, b"a");
        assert!(matches!(polled, Poll::Ready(Ok(1))), "{polled:?}");

        peer.write_all(b"request").await.unwrap();
        let mut buf = [0; 16];
        assert_eq!(watched.read(&mut buf).await.unwrap(), 7);

        // After the read: deferred once, with the task woken to come back...
        let polled = Pin::new(&mut watched).poll_write(&mut cx, b"b");
        assert!(polled.is_pending(), "{polled:?}");
        assert_eq!(wake_count(), 1);
        // ...and written on the next poll, vectored writes alike.
        let polled = Pin::new(&mut watched).poll_write(&mut cx, b"c");
        assert!(matches!(polled, Poll::Ready(Ok(1))), "{polled:?}");
        let polled = Pin::new(&mut watched).poll_write_vectored(&mut cx, &[io::IoSlice::new(b"d")]);
        assert!(matches!(polled, Poll::Ready(Ok(1))), "{polled:?}");
        assert_eq!(wake_count(), 1);

        let mut written = [0; 3];
        peer.read_exact(&mut written).await.unwrap();
        assert_eq!(&written, b"acd");
    }
}
