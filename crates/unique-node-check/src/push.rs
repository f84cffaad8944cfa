//! The push mode of [`NodeCheck`](crate::NodeCheck): the check of a node that takes its kicks
//! over a kick stream, the check playing the server (`docs/design.md#push-kicks`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONNECTION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout, timeout_at};
use unique_core::Error;
use unique_wire::push::{
    DEFAULT_PING_MS, KickAckAnswer, KickAckBody, KickLine, NDJSON_CONTENT_TYPE, PushRoute,
    StreamLine, parse_node_kicks_path,
};
use unique_wire::{ErrorBody, ErrorCode};

use crate::check::Kicks;
use crate::clause::Clause;
use crate::report::ClauseResult;
use crate::send::{Answer, Probe};

/// How long a check in push mode waits for a node to open its kick stream, by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// The ping interval a check in push mode announces in `hello` and keeps, by default: the server's
/// ([`DEFAULT_PING_MS`]).
pub const DEFAULT_PING: Duration = Duration::from_millis(DEFAULT_PING_MS);

/// The largest ack body read.
const ACK_LIMIT: usize = 64 * 1024;

/// How long the end of a run waits for the node's connections to finish after the stream's
/// last line (`closed` `shutdown`) before dropping them.
const DRAIN: Duration = Duration::from_secs(1);

/// The push mode of [`NodeCheck`](crate::NodeCheck): where it listens, and whose stream it
/// takes.
#[derive(Debug, Clone)]
pub(crate) struct Push {
    listener: Arc<std::net::TcpListener>,
    pub(crate) node: Option<String>,
    pub(crate) wait: Duration,
    pub(crate) ping: Duration,
}

impl Push {
    pub(crate) fn bind(addr: impl ToSocketAddrs) -> io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener: Arc::new(listener),
            node: None,
            wait: DEFAULT_WAIT,
            ping: DEFAULT_PING,
        })
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves kick streams and acks, waits for a node's stream, checks each of `clauses` in
    /// order (each kick waiting at most `per_kick` for its ack), then ends the stream
    /// (`closed` `shutdown`) and stops serving.
    pub(crate) async fn run(
        &self,
        kicks: &Kicks,
        per_kick: Duration,
        clauses: &[Clause],
    ) -> Vec<ClauseResult> {
        let listener = match self.listener.try_clone().and_then(TcpListener::from_std) {
            Ok(listener) => listener,
            Err(e) => return kicks.unanswered(clauses, &format!("cannot listen: {e}")),
        };
        let shared = Arc::new(Shared {
            want: self.node.clone(),
            ping: self.ping,
            current: watch::channel(None).0,
            waiting: Mutex::new(HashMap::new()),
            serial: Mutex::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn(serve(listener, Arc::clone(&shared), stopped));
        let mut current = shared.current.subscribe();
        let opened = matches!(
            timeout(self.wait, current.wait_for(Option::is_some)).await,
            Ok(Ok(_))
        );
        let results = if opened {
            let mut results = Vec::with_capacity(clauses.len());
            for &clause in clauses {
                let mut answers = Vec::new();
                for (variant, probe) in kicks.probes(clause) {
                    answers.push((variant, kick(&shared, probe, per_kick).await));
                }
                results.push(ClauseResult::new(clause, answers));
            }
            results
        } else {
            let why = format!("no node opened its kick stream within {:?}", self.wait);
            kicks.unanswered(clauses, &why)
        };
        // The stream's last line, then its end: the node hears the server is going.
        if let Some(open) = shared.current.send_replace(None) {
            let _ = open.lines.send(closed_shutdown());
        }
        let _ = stop.send(true);
        let _ = timeout(DRAIN, server).await;
        results
    }
}

/// Pushes one kick down the node's stream and waits at most `per_kick` for its ack.
async fn kick(shared: &Shared, probe: Probe, per_kick: Duration) -> Answer {
    let deadline = Instant::now() + per_kick;
    let id = fresh_id();
    let line = Bytes::from(
        StreamLine::Kick(KickLine {
            id: id.clone(),
            body: String::from_utf8_lossy(&probe.body).into_owned(),
            signature: probe.signature,
        })
        .to_line(),
    );
    let mut current = shared.current.subscribe();
    loop {
        // The node's stream; when it dropped, the one it opens again within the timeout.
        let open = match timeout_at(deadline, current.wait_for(Option::is_some)).await {
            Ok(Ok(open)) => open.clone().expect("waited for a stream"),
            _ => return Answer::NoAnswer(format!("no kick stream open within {per_kick:?}")),
        };
        let (acked, ack) = oneshot::channel();
        shared
            .waiting()
            .insert(id.clone(), (open.node.clone(), acked));
        if open.lines.send(line.clone()).is_err() {
            // Its reader is gone: forget that stream, and wait for the next.
            shared.waiting().remove(&id);
            shared.current.send_if_modified(|now| {
                let gone = now.as_ref().is_some_and(|o| o.serial == open.serial);
                if gone {
                    *now = None;
                }
                gone
            });
            continue;
        }
        // Not held while waiting: a stream replaced meanwhile ends at once.
        drop(open);
        if let Ok(Ok(status)) = timeout_at(deadline, ack).await {
            return Answer::Status {
                status,
                body: String::new(),
            };
        }
        shared.waiting().remove(&id);
        return Answer::NoAnswer(format!("no ack within {per_kick:?}"));
    }
}

impl Kicks {
    /// Each clause of `clauses` with every variant answered "no answer (`why`)".
    pub(crate) fn unanswered(&self, clauses: &[Clause], why: &str) -> Vec<ClauseResult> {
        clauses
            .iter()
            .map(|&clause| {
                let answers = self
                    .probes(clause)
                    .into_iter()
                    .map(|(variant, _)| (variant, Answer::NoAnswer(why.to_owned())))
                    .collect();
                ClauseResult::new(clause, answers)
            })
            .collect()
    }
}

/// An open kick stream: its node, and the lines queued for its body.
#[derive(Debug, Clone)]
struct Open {
    node: String,
    serial: u64,
    lines: mpsc::UnboundedSender<Bytes>,
}

/// What the connections and the run share.
#[derive(Debug)]
struct Shared {
    want: Option<String>,
    ping: Duration,
    /// The stream the kicks go down: the latest opened.
    current: watch::Sender<Option<Open>>,
    /// The kicks waiting for an ack, by id: their node, and where the status goes.
    waiting: Mutex<HashMap<String, (String, oneshot::Sender<u16>)>>,
    serial: Mutex<u64>,
}

impl Shared {
    fn waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (String, oneshot::Sender<u16>)>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a stream for `node`: `hello` queued first, pings kept every interval while its
    /// body lasts; it replaces the current stream, which gets `closed` `replaced`.
    fn open(&self, node: &str) -> StreamBody {
        let (lines, body) = mpsc::unbounded_channel();
        let hello = StreamLine::Hello {
            node: node.to_owned(),
            ping_ms: u64::try_from(self.ping.as_millis()).unwrap_or(u64::MAX),
        };
        let _ = lines.send(Bytes::from(hello.to_line()));
        let serial = {
            let mut serial = self.serial.lock().unwrap_or_else(PoisonError::into_inner);
            *serial += 1;
            *serial
        };
        // The pinger holds a weak sender, so the stream ends once the run drops the strong one.
        let pinger = lines.downgrade();
        let ping = self.ping;
        tokio::spawn(async move {
            let line = Bytes::from(StreamLine::Ping.to_line());
            loop {
                tokio::time::sleep(ping).await;
                match pinger.upgrade() {
                    Some(lines) if lines.send(line.clone()).is_ok() => {}
                    _ => break,
                }
            }
        });
        let open = Open {
            node: node.to_owned(),
            serial,
            lines,
        };
        if let Some(old) = self.current.send_replace(Some(open)) {
            let replaced = StreamLine::Closed {
                reason: unique_wire::push::ClosedReason::Replaced,
            };
            let _ = old.lines.send(Bytes::from(replaced.to_line()));
        }
        StreamBody { lines: body }
    }

    /// The ack of kick `id` by `node` with `status`: whether that kick was waiting for it.
    fn ack(&self, node: &str, id: &str, status: u16) -> bool {
        let mut waiting = self.waiting();
        match waiting.remove(id) {
            Some((for_node, acked)) if for_node == node => acked.send(status).is_ok(),
            Some(other) => {
                waiting.insert(id.to_owned(), other);
                false
            }
            None => false,
        }
    }
}

fn closed_shutdown() -> Bytes {
    Bytes::from(
        StreamLine::Closed {
            reason: unique_wire::push::ClosedReason::Shutdown,
        }
        .to_line(),
    )
}

/// A kick id: 32 lowercase hex digits, drawn at random.
fn fresh_id() -> String {
    format!("{:032x}", fastrand::u128(..))
}

/// Accepts connections until `stopped`, then lets each finish its answer (idle ones close).
async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = until_stopped(&mut stopped) => break,
        };
        let Ok((stream, _)) = accepted else { continue };
        let shared = Arc::clone(&shared);
        let mut stopped = stopped.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(answer(&shared, request).await) }
            });
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = until_stopped(&mut stopped) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    while connections.join_next().await.is_some() {}
}

/// Resolves once the run is over (or gone).
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

type Answered = Response<Either<Full<Bytes>, StreamBody>>;

/// The answer to one request: a kick stream, an ack, or an error as a server words it.
async fn answer(shared: &Shared, request: Request<Incoming>) -> Answered {
    let Some((route, node)) = parse_node_kicks_path(request.uri().path()) else {
        return error(StatusCode::NOT_FOUND, ErrorCode::NotFound, "no such route");
    };
    let node = node.to_owned();
    if let Err(Error::InvalidParams(reason)) = unique_core::check_node_id(&node) {
        return error(StatusCode::BAD_REQUEST, ErrorCode::InvalidParams, &reason);
    }
    match (route, request.method()) {
        (PushRoute::Stream, &Method::GET) => {
            if shared.want.as_ref().is_some_and(|want| *want != node) {
                let message = format!("this check takes the stream of node {:?}", shared.want);
                return error(StatusCode::NOT_FOUND, ErrorCode::NotFound, &message);
            }
            let mut response = Response::new(Either::Right(shared.open(&node)));
            let headers = response.headers_mut();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(NDJSON_CONTENT_TYPE));
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
            response
        }
        (PushRoute::Ack, &Method::POST) => {
            let body = match Limited::new(request.into_body(), ACK_LIMIT).collect().await {
                Ok(body) => body.to_bytes(),
                Err(e) => {
                    let message = format!("the ack body could not be read: {e}");
                    return error(StatusCode::BAD_REQUEST, ErrorCode::InvalidParams, &message);
                }
            };
            let ack: KickAckBody = match serde_json::from_slice(&body) {
                Ok(ack) => ack,
                Err(e) => {
                    let message = format!("not an ack body {{\"id\",\"status\"}}: {e}");
                    return error(StatusCode::BAD_REQUEST, ErrorCode::InvalidParams, &message);
                }
            };
            let accepted = shared.ack(&node, &ack.id, ack.status);
            json(
                StatusCode::OK,
                serde_json::to_vec(&KickAckAnswer { accepted }).expect("an answer serialises"),
            )
        }
        _ => error(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowed,
            "method not allowed",
        ),
    }
}

fn error(status: StatusCode, code: ErrorCode, message: &str) -> Answered {
    let body = serde_json::to_vec(&ErrorBody::new(code, message)).expect("an error serialises");
    json(status, body)
}

fn json(status: StatusCode, body: Vec<u8>) -> Answered {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A kick stream's body: each queued line as it comes, until every sender is gone.
#[derive(Debug)]
struct StreamBody {
    lines: mpsc::UnboundedReceiver<Bytes>,
}

impl Body for StreamBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.lines
            .poll_recv(cx)
            .map(|line| line.map(|line| Ok(Frame::data(line))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_lowercase_hex_digits() {
        for _ in 0..100 {
            let id = fresh_id();
            assert_eq!(id.len(), 32, "{id}");
            assert!(
                id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                "{id}"
            );
        }
        assert_ne!(fresh_id(), fresh_id());
    }
}
