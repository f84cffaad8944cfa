//! The accept loop: caps, TLS, hyper, the watchdog, graceful shutdown.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use metrics::Gauge;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::activity::{Activity, Watched};
use crate::body::{BoxError, RequestBody};
use crate::drain::{Drain, DrainWatcher, Graceful, ShutdownSignal};
use crate::limit::{ConnectionGuard, ConnectionLimits};
use crate::options::ServeOptions;
use crate::service::{Guarded, PeerAddr};
use crate::telemetry::ServeMetrics;

/// How long the loop pauses after an accept failure such as running out of descriptors, so it
/// does not spin on the same error while connections close and free some.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// A listening socket on `addr` with a listen backlog of `backlog` (the queue of connections the
/// kernel has completed but the server has not accepted yet; see [`DEFAULT_BACKLOG`]) and
/// `SO_REUSEADDR` on Unix, so a restarted server binds while old connections linger in
/// `TIME_WAIT`.
///
/// Linux silently caps the backlog at `net.core.somaxconn` (4096 by default since 5.4, 128
/// before). Must be called within a tokio runtime.
///
/// [`DEFAULT_BACKLOG`]: crate::DEFAULT_BACKLOG
pub fn bind(addr: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // On Windows SO_REUSEADDR lets another process steal the port; tokio's own bind skips it
    // there for the same reason.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Serves `service` over HTTP/1.1 (or HTTPS, with [`ServeOptions::tls`]) on `listener` until
/// `shutdown` completes; then stops accepting, closes idle connections, lets requests in flight
/// finish for at most the drain timeout, and returns.
///
/// Every connection gets the guards of `options`: the connection caps (a connection past one is
/// closed as soon as it is accepted), the header, idle and body timeouts, and a TLS handshake
/// bounded by the header timeout. Connections speak HTTP/1.1 with keep-alive, flush pipelined
/// answers together, and finish a request whose client half-closed the connection.
///
/// Accept failures never end the loop: a failed connection (reset before it was accepted) is
/// skipped, and anything else (typically `EMFILE`/`ENFILE`, out of descriptors) is logged and
/// retried after a 50 ms pause.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) where
    S: tower_service::Service<Request<RequestBody>, Response = Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Default + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    accept_loop(listener, service, options, shutdown).await;
}

/// The bounds of [`serve`]'s service, named once for the functions behind it.
pub(crate) trait Served<B>:
    tower_service::Service<
        Request<RequestBody>,
        Response = Response<B>,
        Future: Send + 'static,
        Error: Into<BoxError>,
    > + Clone
    + Send
    + 'static
{
}

impl<S, B> Served<B> for S where
    S: tower_service::Service<
            Request<RequestBody>,
            Response = Response<B>,
            Future: Send + 'static,
            Error: Into<BoxError>,
        > + Clone
        + Send
        + 'static
{
}

/// The bounds of [`serve`]'s response body.
pub(crate) trait Answer:
    http_body::Body<Data: Send, Error: Into<BoxError>> + Default + Send + 'static
{
}

impl<B> Answer for B where
    B: http_body::Body<Data: Send, Error: Into<BoxError>> + Default + Send + 'static
{
}

/// Where connections come from: a [`TcpListener`], or in tests one that fails on purpose.
pub(crate) trait Accept {
    fn accept(&mut self) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send;
}

impl Accept for TcpListener {
    fn accept(&mut self) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send {
        TcpListener::accept(self)
    }
}

/// What every connection task shares.
struct Shared {
    http: http1::Builder,
    tls: Option<TlsAcceptor>,
    header_timeout: Duration,
    idle_timeout: Duration,
    body_timeout: Duration,
    in_flight: Gauge,
}

pub(crate) async fn accept_loop<L, S, B>(
    mut listener: L,
    service: S,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) where
    L: Accept,
    S: Served<B>,
    B: Answer,
{
    let metrics = ServeMetrics::new();
    let limits = ConnectionLimits::new(
        options.max_connections,
        options.max_connections_per_ip,
        metrics.open.clone(),
    );
    let mut http = http1::Builder::new();
    // half_close: while a request is in flight hyper otherwise keeps reading the socket to
    // notice an early EOF, which reserves a fresh 8 KiB read buffer per request (the old one is
    // still shared with the request) and cancels the request if the client goes away. Our
    // requests are cheap and idempotent (a claim per claim_id, a kick per gen), so finishing
    // one is the better outcome, and the read moves to after the answer.
    //
    // header_read_timeout: off, because hyper's clock covers the idle wait and the head
    // together; the watchdog (`activity`) bounds each on its own.
    http.keep_alive(true)
        .pipeline_flush(true)
        .half_close(true)
        .header_read_timeout(None);
    let shared = Arc::new(Shared {
        http,
        tls: options.tls.map(TlsAcceptor::from),
        header_timeout: options.header_timeout,
        idle_timeout: options.idle_timeout,
        body_timeout: options.body_timeout,
        in_flight: metrics.in_flight.clone(),
    });
    let drain = Drain::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                tracing::warn!(%error, "accept failed; pausing before the next accept");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let guard = match limits.admit(peer.ip()) {
            Ok(guard) => guard,
            Err(cap) => {
                // Closed before a byte is read: the descriptor is freed at once.
                tracing::debug!(%peer, ?cap, "connection refused by a connection cap");
                metrics.refused(cap);
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(
            stream,
            peer,
            guard,
            service.clone(),
            Arc::clone(&shared),
            drain.watcher(),
        ));
    }
    drop(listener);
    if tokio::time::timeout(options.drain_timeout, drain.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within the drain timeout");
    }
}

/// Errors about one connection that failed before it was accepted: the next accept is fine.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// One connection, from the accept to its end; `_guard` holds its place under the caps.
async fn connection<S, B>(
    stream: TcpStream,
    peer: SocketAddr,
    _guard: ConnectionGuard,
    service: S,
    shared: Arc<Shared>,
    watcher: DrainWatcher,
) where
    S: Served<B>,
    B: Answer,
{
    let accepted = Instant::now();
    let activity = Arc::new(Activity::new(accepted));
    let Some(acceptor) = &shared.tls else {
        return http(stream, peer, activity, service, &shared, watcher, shrink).await;
    };
    // The handshake and the first head share the header timeout, counted from the accept.
    let deadline = accepted + shared.header_timeout;
    match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let shrink = |tls: &tokio_rustls::server::TlsStream<TcpStream>| shrink(tls.get_ref().0);
            http(tls, peer, activity, service, &shared, watcher, shrink).await;
        }
        Ok(Err(error)) => tracing::debug!(%error, "tls handshake failed"),
        Err(_) => tracing::debug!("tls handshake timed out"),
    }
}

/// Shrinks the send buffer of a connection that answered [`LongLived`](crate::LongLived): a
/// failure leaves the kernel's buffer, which only makes a stalled reader slower to notice.
fn shrink(stream: &TcpStream) {
    if let Err(error) =
        socket2::SockRef::from(stream).set_send_buffer_size(crate::LONG_LIVED_SEND_BUFFER)
    {
        tracing::debug!(%error, "cannot shrink a long-lived connection's send buffer");
    }
}

/// HTTP/1.1 on an accepted (and perhaps decrypted) stream, closed by the watchdog when a head or
/// an idle wait lasts too long; `shrink` shrinks the socket's send buffer for a long-lived answer.
async fn http<I, S, B>(
    io: I,
    peer: SocketAddr,
    activity: Arc<Activity>,
    service: S,
    shared: &Shared,
    mut watcher: DrainWatcher,
    shrink: fn(&I),
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Served<B>,
    B: Answer,
{
    let service = Guarded::new(
        service,
        PeerAddr(peer),
        Arc::clone(&activity),
        shared.body_timeout,
        shared.in_flight.clone(),
    );
    let io = TokioIo::new(Watched::new(io, Arc::clone(&activity), shrink));
    let conn = shared
        .http
        .serve_connection(io, TowerToHyperService::new(service));
    // The connection runs in a task of its own, and the watchdog and the drain signal are
    // awaited here: neither is polled on the connection's wake-ups (together about 1 150
    // instructions per request when they were).
    let signal = Arc::new(ShutdownSignal::default());
    let mut conn = tokio::spawn(Graceful::new(conn, Arc::clone(&signal)));
    let expired = activity.expired(shared.header_timeout, shared.idle_timeout);
    let mut expired = pin!(expired);
    let mut draining = false;
    loop {
        tokio::select! {
            ended = &mut conn => {
                match ended {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::debug!(%error, "connection ended with an error"),
                    Err(error) => tracing::warn!(%error, "connection task failed"),
                }
                break;
            }
            expired = &mut expired => {
                // Dropping the connection closes it; nothing was in flight. Waiting for the
                // aborted task keeps this connection's place under the caps until it is closed.
                conn.abort();
                let _ = conn.await;
                tracing::debug!(?expired, "connection closed by its timeout");
                break;
            }
            () = watcher.signalled(), if !draining => {
                draining = true;
                signal.request();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::{Ready, ready};
    use std::task::{Context, Poll};

    use std::net::IpAddr;

    use bytes::Bytes;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Answers every request `200 ok`.
    #[derive(Clone)]
    struct Ok200;

    impl tower_service::Service<Request<RequestBody>> for Ok200 {
        type Response = Response<http_body_util::Full<Bytes>>;
        type Error = Infallible;
        type Future = Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<RequestBody>) -> Self::Future {
            ready(Ok(Response::new(Bytes::from_static(b"ok").into())))
        }
    }

    /// A listener out of descriptors for its first `failures` accepts.
    struct OutOfDescriptors {
        listener: TcpListener,
        failures: usize,
        failed: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Accept for OutOfDescriptors {
        fn accept(&mut self) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send {
            let fail = self.failures > 0;
            if fail {
                self.failures -= 1;
                self.failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let listener = &self.listener;
            async move {
                if fail {
                    // EMFILE on Linux and macOS.
                    Err(io::Error::from_raw_os_error(24))
                } else {
                    listener.accept().await
                }
            }
        }
    }

    #[tokio::test]
    async fn the_loop_keeps_serving_after_running_out_of_descriptors() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let listener = OutOfDescriptors {
            listener,
            failures: 3,
            failed: Arc::clone(&failed),
        };
        tokio::spawn(accept_loop(
            listener,
            Ok200,
            ServeOptions::default(),
            std::future::pending(),
        ));

        // Waits in the backlog while the loop backs off, then is served.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert_eq!(failed.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    /// Answers `200 ok`, except `/wait`: it reports the call, then answers once released.
    #[derive(Clone)]
    struct Gate {
        called: tokio::sync::mpsc::UnboundedSender<()>,
        release: Arc<tokio::sync::Notify>,
    }

    impl tower_service::Service<Request<RequestBody>> for Gate {
        type Response = Response<http_body_util::Full<Bytes>>;
        type Error = Infallible;
        type Future =
            std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<RequestBody>) -> Self::Future {
            let wait = request.uri().path() == "/wait";
            let (called, release) = (self.called.clone(), Arc::clone(&self.release));
            Box::pin(async move {
                if wait {
                    called.send(()).unwrap();
                    release.notified().await;
                }
                Ok(Response::new(Bytes::from_static(b"ok").into()))
            })
        }
    }

    #[tokio::test]
    async fn shutdown_closes_idle_connections_at_once_and_lets_a_request_in_flight_finish() {
        use unique_testsupport::net::{answer, closed_by_peer};

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (called, mut calls) = tokio::sync::mpsc::unbounded_channel();
        let release = Arc::new(tokio::sync::Notify::new());
        let gate = Gate {
            called,
            release: Arc::clone(&release),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // Far longer than the test may take: the loop must end because the connections did.
        let options = ServeOptions::default().drain_timeout(Duration::from_hours(1));
        let server = tokio::spawn(accept_loop(listener, gate, options, async {
            let _ = stopped.await;
        }));
        let get = |path: &str| format!("GET {path} HTTP/1.1\r\nhost: t\r\n\r\n");

        let mut idle = TcpStream::connect(addr).await.unwrap();
        assert!(answer(&mut idle, get("/").as_bytes()).await.is_some());
        let mut waiting = TcpStream::connect(addr).await.unwrap();
        waiting.write_all(get("/wait").as_bytes()).await.unwrap();
        calls.recv().await.unwrap();

        stop.send(()).unwrap();
        // The idle connection is closed without waiting for its idle timeout...
        assert!(closed_by_peer(&mut idle).await.is_empty());
        assert!(!server.is_finished(), "a request is still in flight");
        // ...the one in flight is answered, then closed, and the loop ends.
        release.notify_one();
        let rest = String::from_utf8(closed_by_peer(&mut waiting).await).unwrap();
        assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
        tokio::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("the loop ends once its connections are gone")
            .unwrap();
    }

    #[test]
    fn open_connections_requests_in_flight_and_refusals_by_cap_are_recorded() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        use unique_testsupport::net::{answer, closed_by_peer, connect_from};

        let recorder = DebuggingRecorder::new();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let release = Arc::new(tokio::sync::Notify::new());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (server, clients) = metrics::with_local_recorder(&recorder, || {
            runtime.block_on(async {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let (called, mut calls) = tokio::sync::mpsc::unbounded_channel();
                let gate = Gate {
                    called,
                    release: Arc::clone(&release),
                };
                let options = ServeOptions::default()
                    .max_connections(3)
                    .max_connections_per_ip(2);
                let shutdown = async {
                    let _ = stopped.await;
                };
                let server = tokio::spawn(accept_loop(listener, gate, options, shutdown));
                let from = |last: u8| IpAddr::from([127, 0, 0, last]);
                let get = |path: &str| format!("GET {path} HTTP/1.1\r\nhost: t\r\n\r\n");

                // Two connections from 127.0.0.1: one idle after its answer, one waiting.
                let mut idle = connect_from(from(1), addr).await;
                assert!(answer(&mut idle, get("/").as_bytes()).await.is_some());
                let mut waiting = connect_from(from(1), addr).await;
                waiting.write_all(get("/wait").as_bytes()).await.unwrap();
                calls.recv().await.unwrap();
                // A third from 127.0.0.1 passes the total cap, not the per-address one.
                let mut per_ip = connect_from(from(1), addr).await;
                assert!(closed_by_peer(&mut per_ip).await.is_empty());
                // 127.0.0.2 takes the last place; 127.0.0.3 finds none.
                let mut other = connect_from(from(2), addr).await;
                assert!(answer(&mut other, get("/").as_bytes()).await.is_some());
                let mut total = connect_from(from(3), addr).await;
                assert!(closed_by_peer(&mut total).await.is_empty());
                (server, (idle, waiting, other))
            })
        });
        let gauge = |value: f64| DebugValue::Gauge(value.into());
        assert_eq!(
            recorded(&recorder),
            [
                ("unique_http_connections_open ".to_owned(), gauge(3.0)),
                (
                    "unique_http_connections_refused_total max-connections".to_owned(),
                    DebugValue::Counter(1)
                ),
                (
                    "unique_http_connections_refused_total max-connections-per-ip".to_owned(),
                    DebugValue::Counter(1)
                ),
                ("unique_http_requests_in_flight ".to_owned(), gauge(1.0)),
            ]
        );

        // The waiting request is answered, then shutdown closes every connection.
        release.notify_one();
        stop.send(()).unwrap();
        runtime.block_on(server).unwrap();
        drop(clients);
        // A snapshot resets what it read, so this one holds the changes since the first.
        assert_eq!(
            recorded(&recorder),
            [
                ("unique_http_connections_open ".to_owned(), gauge(-3.0)),
                (
                    "unique_http_connections_refused_total max-connections".to_owned(),
                    DebugValue::Counter(0)
                ),
                (
                    "unique_http_connections_refused_total max-connections-per-ip".to_owned(),
                    DebugValue::Counter(0)
                ),
                ("unique_http_requests_in_flight ".to_owned(), gauge(-1.0)),
            ]
        );
    }

    /// Every metric as `name label,label`, sorted.
    fn recorded(
        from: &metrics_util::debugging::DebuggingRecorder,
    ) -> Vec<(String, metrics_util::debugging::DebugValue)> {
        let mut recorded: Vec<_> = from
            .snapshotter()
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let labels: Vec<&str> = key.key().labels().map(metrics::Label::value).collect();
                (format!("{} {}", key.key().name(), labels.join(",")), value)
            })
            .collect();
        recorded.sort_by(|a, b| a.0.cmp(&b.0));
        recorded
    }

    #[test]
    fn only_failures_of_one_connection_skip_the_pause() {
        for kind in [
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionRefused,
        ] {
            assert!(is_connection_error(&kind.into()));
        }
        assert!(!is_connection_error(&io::Error::from_raw_os_error(24)));
    }

    #[tokio::test]
    async fn bind_listens_and_refuses_a_taken_address() {
        let listener = bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        let addr = listener.local_addr().unwrap();
        let (connected, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        assert_eq!(
            accepted.unwrap().1,
            connected.unwrap().local_addr().unwrap()
        );
        // SO_REUSEADDR does not let two listeners share a port.
        assert!(bind(addr, 16).is_err());
    }
}
