//! [`Observed`]: the node's `unique_sessions::node::KickService` wrapped in a service that reports
//! every kick it answers, with the announced gen, the status and the ack.
//!
//! The examples print exactly that (S1 checks that an unsigned kick got 401), and the runtime
//! only reports kicks that ended a session; so they wrap the service, the way an application
//! adds its own tower layers, and serve the wrapper with `unique_sessions::node::KickReceiver`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use unique_sessions::core::BoxError;
use unique_sessions::node::KickService;

use crate::events::Report;
use crate::node::EventSink;

/// The wrapper reads at most this much; the service itself refuses anything over its own
/// 4 KiB limit with 413, so this only bounds what a misbehaving peer can make us buffer.
const READ_LIMIT: usize = 64 * 1024;

/// A [`KickService`] that reports [`Report::Kick`] for every answer.
#[derive(Clone)]
pub(crate) struct Observed {
    service: KickService,
    sink: EventSink,
}

impl Observed {
    pub(crate) fn new(service: KickService, sink: EventSink) -> Self {
        Self { service, sink }
    }

    /// Answers one request through the kick service and reports what it answered.
    async fn respond<B>(self, request: Request<B>) -> Result<Response<Full<Bytes>>, BoxError>
    where
        B: http_body::Body,
        B::Error: Into<BoxError>,
    {
        let (parts, body) = request.into_parts();
        let body = Limited::new(body, READ_LIMIT).collect().await?.to_bytes();
        let generation = unique_sessions::wire::decode_kick(&body)
            .ok()
            .map(|kick| kick.generation);
        let response = self
            .service
            .respond(Request::from_parts(parts, Full::new(body)))
            .await;
        let (parts, body) = response.into_parts();
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            // `Full` cannot fail.
            Err(never) => match never {},
        };
        let ack = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("ack").and_then(|a| a.as_str()).map(str::to_owned))
            .unwrap_or_else(|| "-".to_owned());
        (self.sink)(Report::Kick {
            generation,
            status: parts.status.as_u16(),
            ack,
        });
        Ok(Response::from_parts(parts, Full::new(body)))
    }
}

type ResponseFuture = Pin<Box<dyn Future<Output = Result<Response<Full<Bytes>>, BoxError>> + Send>>;

impl<B> tower_service::Service<Request<B>> for Observed
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        Box::pin(self.clone().respond(request))
    }
}
