//! The node's kick receiver: `unique_kickrecv::KickService` mounted in a small hyper server
//! that reports every kick it answers.
//!
//! `unique_kickrecv::serve` would do the serving, but it does not tell the caller which gen
//! a kick announced or what it answered; the examples print exactly that, so they mount the
//! service themselves (the way an application would mount it in its own server).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use unique_client::KickHandler;
use unique_core::KickPayload;
use unique_kick_signature::SigningKeys;
use unique_kickrecv::KickService;

use crate::events::NodeEvent;
use crate::node::EventSink;

/// The wrapper reads at most this much; the service itself refuses anything over its own
/// 4 KiB limit with 413, so this only bounds what a misbehaving peer can make us buffer.
const READ_LIMIT: usize = 64 * 1024;

/// How long closing waits for kicks in flight.
const CLOSE_DRAIN: Duration = Duration::from_secs(5);

/// A running kick receiver.
pub(crate) struct Receiver {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Receiver {
    /// Binds `listen` and serves kicks with `handler`, verifying them with `keys` when
    /// given, reporting each to `sink`.
    pub(crate) async fn bind(
        listen: SocketAddr,
        handler: KickHandler,
        keys: Option<SigningKeys>,
        sink: EventSink,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel();
        let mut service = KickService::new(handler);
        if let Some(keys) = keys {
            service = service.signing_keys(keys);
        }
        let task = tokio::spawn(accept_loop(listener, service, sink, stopped));
        Ok(Self { addr, stop, task })
    }

    /// The bound address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening (new connections are refused), closes idle keep-alive connections
    /// and waits for kicks in flight, at most a few seconds.
    pub(crate) async fn close(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    service: KickService,
    sink: EventSink,
    mut stopped: oneshot::Receiver<()>,
) {
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = &mut stopped => break,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            // Out of descriptors or similar: pause rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (service, sink) = (service.clone(), sink.clone());
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .serve_connection(
                TokioIo::new(stream),
                service_fn(move |request| observed(service.clone(), sink.clone(), request)),
            );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    // Dropping the listener is what makes the next kick's connect fail.
    drop(listener);
    let _ = tokio::time::timeout(CLOSE_DRAIN, graceful.shutdown()).await;
}

/// Answers one request through the kick service and reports what it answered.
async fn observed(
    service: KickService,
    sink: EventSink,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Box<dyn std::error::Error + Send + Sync>> {
    let (parts, body) = request.into_parts();
    let body = Limited::new(body, READ_LIMIT).collect().await?.to_bytes();
    let generation = serde_json::from_slice::<KickPayload>(&body)
        .ok()
        .map(|kick| kick.generation);
    let response = service
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
    sink(NodeEvent::Kick {
        generation,
        status: parts.status.as_u16(),
        ack,
    });
    Ok(Response::from_parts(parts, Full::new(body)))
}
