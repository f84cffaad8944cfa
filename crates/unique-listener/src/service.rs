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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LongLived;

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
    type Response = Response<B>;
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
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answered = ready!(this.inner.poll(cx));
        let long_lived = answered
            .as_ref()
            .is_ok_and(|answer| answer.extensions().get::<LongLived>().is_some());
        if !long_lived {
            this.activity.request_finished();
        }
        if !this.activity.did_body_time_out() {
            return Poll::Ready(answered);
        }
        // Whatever the service made of the failed body read (ours answer 400), the client was
        // too slow, not wrong; and the rest of its body may still be on the way, so the
        // connection cannot carry another request.
        let mut timeout = Response::new(B::default());
        *timeout.status_mut() = StatusCode::REQUEST_TIMEOUT;
        timeout
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        Poll::Ready(Ok(timeout))
    }
}
