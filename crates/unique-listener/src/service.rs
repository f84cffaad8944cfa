//! The service wrapper every connection serves through: phases for the watchdog, the body
//! timeout, and the 408 answer when it fires.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::header::{CONNECTION, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use metrics::Gauge;
use tokio::time::Instant;

use crate::activity::Activity;
use crate::body::RequestBody;
use crate::telemetry::InFlight;

/// The address a request's connection came from, in every request's extensions
/// (`request.extensions().get::<PeerAddr>()`): the TCP peer, so a proxy's address behind one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

impl PeerAddr {
    /// The peer's IP address.
    pub const fn ip(self) -> IpAddr {
        self.0.ip()
    }
}

/// A response extension that marks an answer whose body lasts (a stream of lines, such as
/// a node's kick stream): the connection stays busy, out of the idle timeout, until the
/// connection closes, where any other answer starts the idle wait. Send such an answer with
/// `Connection: close`, so the connection ends with its body instead of waiting, busy, for a
/// request that would never be timed.
///
/// The connection's send buffer shrinks to [`LONG_LIVED_SEND_BUFFER`] before the answer's
/// first byte, and the body is polled for its next frame only while at most
/// [`LONG_LIVED_UNSENT`] of its bytes wait in the connection's own buffer: a reader that stops
/// reading is felt by the body (its frames stop being taken) within about those two amounts,
/// not within the megabytes a kernel lets a busy socket grow to, nor hyper's buffer, which
/// grows without bound when pipelined answers are flushed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LongLived;

/// The send buffer (`SO_SNDBUF`) of a connection once it answered [`LongLived`]: 32 KiB
/// asked (Linux doubles it for its bookkeeping), and no more automatic growth.
pub const LONG_LIVED_SEND_BUFFER: usize = 32 * 1024;

/// Bytes of a [`LongLived`] answer's body that may wait, produced but not yet written to the
/// socket, before the body is polled again.
pub const LONG_LIVED_UNSENT: u64 = 16 * 1024;

/// The user's service, on one connection.
#[derive(Debug, Clone)]
pub(crate) struct Guarded<S> {
    inner: S,
    peer: PeerAddr,
    activity: Arc<Activity>,
    body_timeout: Duration,
    in_flight: Gauge,
}

impl<S> Guarded<S> {
    pub(crate) fn new(
        inner: S,
        peer: PeerAddr,
        activity: Arc<Activity>,
        body_timeout: Duration,
        in_flight: Gauge,
    ) -> Self {
        Self {
            inner,
            peer,
            activity,
            body_timeout,
            in_flight,
        }
    }
}

impl<S, B> tower_service::Service<Request<Incoming>> for Guarded<S>
where
    S: tower_service::Service<Request<RequestBody>, Response = Response<B>>,
    B: Default,
{
    type Response = Response<Paced<B>>;
    type Error = S::Error;
    type Future = GuardedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        self.activity.request_started();
        let deadline = Instant::now() + self.body_timeout;
        let activity = Arc::clone(&self.activity);
        let mut request = request.map(|incoming| RequestBody::new(incoming, deadline, activity));
        request.extensions_mut().insert(self.peer);
        GuardedFuture {
            in_flight: InFlight::start(&self.in_flight),
            inner: self.inner.call(request),
            activity: Arc::clone(&self.activity),
        }
    }
}

pin_project_lite::pin_project! {
    /// The user's response future; its end starts the connection's idle wait.
    pub(crate) struct GuardedFuture<F> {
        #[pin]
        inner: F,
        activity: Arc<Activity>,
        in_flight: InFlight,
    }
}

impl<F, B, E> Future for GuardedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Default,
{
    type Output = Result<Response<Paced<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answered = ready!(this.inner.poll(cx));
        let long_lived = answered
            .as_ref()
            .is_ok_and(|answer| answer.extensions().get::<LongLived>().is_some());
        if long_lived {
            this.activity.answered_long_lived();
        } else {
            this.activity.request_finished();
        }
        if !this.activity.did_body_time_out() {
            let pace = long_lived.then(|| Arc::clone(this.activity));
            return Poll::Ready(answered.map(|answer| answer.map(|body| Paced::new(body, pace))));
        }
        // Whatever the service made of the failed body read (ours answer 400), the client was
        // too slow, not wrong; and the rest of its body may still be on the way, so the
        // connection cannot carry another request.
        let mut timeout = Response::new(Paced::new(B::default(), None));
        *timeout.status_mut() = StatusCode::REQUEST_TIMEOUT;
        timeout
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        Poll::Ready(Ok(timeout))
    }
}

pin_project_lite::pin_project! {
    /// An answer's body: passed through, or for a [`LongLived`] answer polled for its next
    /// frame only while at most [`LONG_LIVED_UNSENT`] of its bytes wait unwritten.
    pub(crate) struct Paced<B> {
        #[pin]
        body: B,
        pace: Option<Pace>,
    }
}

/// The pacing of a long-lived body: its bytes produced against the connection's bytes
/// written since its first frame.
struct Pace {
    activity: Arc<Activity>,
    /// The connection's bytes written when the body was first polled (the head may follow:
    /// the estimate of what waits is short by at most a head).
    origin: Option<u64>,
    /// Bytes of the body handed to hyper, with their chunked framing.
    produced: u64,
}

impl<B> Paced<B> {
    fn new(body: B, pace: Option<Arc<Activity>>) -> Self {
        Self {
            body,
            pace: pace.map(|activity| Pace {
                activity,
                origin: None,
                produced: 0,
            }),
        }
    }
}

impl Pace {
    /// Whether more than [`LONG_LIVED_UNSENT`] bytes wait unwritten; if so the task is
    /// woken at the connection's next write.
    fn full(&mut self, cx: &Context<'_>) -> bool {
        let origin = *self.origin.get_or_insert_with(|| self.activity.written());
        let waiting = |written: u64| self.produced.saturating_sub(written - origin);
        if waiting(self.activity.written()) <= LONG_LIVED_UNSENT {
            return false;
        }
        self.activity.wake_at_next_write(cx);
        waiting(self.activity.written()) > LONG_LIVED_UNSENT
    }

    /// A data frame of `len` bytes went to hyper, which writes it as one chunk:
    /// `{len:X}\r\n`, the bytes, `\r\n`.
    fn produced(&mut self, len: usize) {
        let hex_digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1);
        self.produced += len as u64 + u64::from(hex_digits) + 4;
    }
}

impl<B: http_body::Body> http_body::Body for Paced<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let Some(pace) = this.pace else {
            return this.body.poll_frame(cx);
        };
        if pace.full(cx) {
            return Poll::Pending;
        }
        let frame = ready!(this.body.poll_frame(cx));
        if let Some(Ok(frame)) = &frame
            && let Some(data) = frame.data_ref()
        {
            pace.produced(bytes::Buf::remaining(data));
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
