//! Loopback peers: tokio TCP listeners on `127.0.0.1` that behave like a kick
//! receiver, a broken one, or something that is not HTTP at all.

use std::fmt::Write as _;
use std::future::pending;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use super::http1::{Reader, Received};
use super::identity;

/// What a [`Peer`] does with each connection it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behaviour {
    /// Answers every request on the connection (keep-alive) with `status`, the
    /// extra `headers` and `body`, framed by `content-length`.
    Respond {
        /// The status code.
        status: u16,
        /// Extra response headers, e.g. `location`.
        headers: Vec<(String, String)>,
        /// The response body.
        body: Vec<u8>,
    },
    /// Reads the request, then holds the connection open and says nothing.
    NeverAnswer,
    /// Reads the request, sends a `200` head promising a 1 KiB body, sends a few
    /// bytes of it, then stalls.
    HeadersThenStall,
    /// Reads the request, then resets the connection (`SO_LINGER` 0 and close,
    /// which sends RST). Plain TCP only.
    Reset,
    /// Reads the request, answers with bytes that are not HTTP, then holds the
    /// connection open.
    Garbled,
    /// Accepts the TCP connection and never reads or writes (a TLS client waits
    /// for the server hello forever).
    SilentAccept,
    /// Answers whatever arrives first with a plain-text HTTP `400`, as a plain HTTP
    /// server does when a TLS client hello reaches it, then holds the connection.
    PlainHttpToAnything,
    /// Answers `200` with a chunked body that never ends.
    EndlessBody,
    /// Answers the first request on each connection `200` (keep-alive, nothing
    /// announces a close) and closes the connection, unanswered, when a second
    /// request arrives on it: a server dropping a pooled connection just as the
    /// client reuses it.
    AnswerOnceThenClose,
}

impl Behaviour {
    /// [`Behaviour::Respond`] with `status`, no extra headers, and a short body
    /// (none for `204`).
    pub fn status(status: u16) -> Self {
        let body = if status == 204 {
            Vec::new()
        } else {
            b"ok".to_vec()
        };
        Self::Respond {
            status,
            headers: Vec::new(),
            body,
        }
    }

    /// [`Behaviour::Respond`] with a redirect `status` pointing at `location`.
    pub fn redirect(status: u16, location: impl Into<String>) -> Self {
        Self::Respond {
            status,
            headers: vec![("location".to_owned(), location.into())],
            body: Vec::new(),
        }
    }
}

#[derive(Debug, Default)]
struct Log {
    connections: AtomicUsize,
    requests: Mutex<Vec<Received>>,
}

impl Log {
    fn record(&self, request: Received) {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
    }
}

/// A loopback server for one behaviour. Dropping it stops the listener and every
/// connection it holds.
#[derive(Debug)]
pub struct Peer {
    addr: SocketAddr,
    log: Arc<Log>,
    accept_loop: JoinHandle<()>,
}

impl Peer {
    /// Starts a plain TCP peer on a free `127.0.0.1` port.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound: the suite cannot run without one.
    pub async fn start(behaviour: Behaviour) -> Self {
        Self::spawn(behaviour, None).await
    }

    /// Starts a TLS peer whose certificate (for `127.0.0.1` and `localhost`) is
    /// signed by the suite's private test CA, [`identity::ca_pem`], which no
    /// kicker trusts unless told to.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound, or the test identity cannot be generated.
    pub async fn start_tls(behaviour: Behaviour) -> Self {
        Self::start_tls_with(behaviour, identity::server_config()).await
    }

    /// Starts a TLS peer on `config`, usually [`identity::server_config`] with a
    /// change (such as an ALPN list). A connection on which the handshake selects
    /// `h2` is closed unanswered, as an HTTP/2 server would not understand the
    /// HTTP/1.1 this peer speaks.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound.
    pub async fn start_tls_with(behaviour: Behaviour, config: rustls::ServerConfig) -> Self {
        Self::spawn(behaviour, Some(identity::acceptor(config))).await
    }

    async fn spawn(behaviour: Behaviour, tls: Option<TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port for a contract peer");
        let addr = listener
            .local_addr()
            .expect("local address of a bound listener");
        let log = Arc::new(Log::default());
        let accept_loop = tokio::spawn(accept_loop(listener, behaviour, tls, Arc::clone(&log)));
        Self {
            addr,
            log,
            accept_loop,
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path_and_query>`.
    pub fn http_url(&self, path_and_query: &str) -> String {
        format!("http://{}{path_and_query}", self.addr)
    }

    /// `https://127.0.0.1:<port><path_and_query>`.
    pub fn https_url(&self, path_and_query: &str) -> String {
        format!("https://{}{path_and_query}", self.addr)
    }

    /// How many TCP connections it has accepted.
    pub fn connections(&self) -> usize {
        self.log.connections.load(Ordering::SeqCst)
    }

    /// Every request it has read completely, in arrival order.
    pub fn requests(&self) -> Vec<Received> {
        self.log
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection.
        self.accept_loop.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    behaviour: Behaviour,
    tls: Option<TlsAcceptor>,
    log: Arc<Log>,
) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // E.g. out of file descriptors: let other tasks run before retrying.
            tokio::task::yield_now().await;
            continue;
        };
        // Answers go out as soon as they are written, like any HTTP server's.
        let _ = stream.set_nodelay(true);
        let id = log.connections.fetch_add(1, Ordering::SeqCst) + 1;
        let behaviour = behaviour.clone();
        let tls = tls.clone();
        let log = Arc::clone(&log);
        connections.spawn(async move {
            // A connection that fails is the kicker's business, not the peer's.
            let _ = serve(stream, id, &behaviour, tls, &log).await;
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn serve(
    stream: TcpStream,
    id: usize,
    behaviour: &Behaviour,
    tls: Option<TlsAcceptor>,
    log: &Log,
) -> io::Result<()> {
    if *behaviour == Behaviour::SilentAccept {
        let _held = stream;
        return pending().await;
    }
    match tls {
        Some(acceptor) => {
            let stream = acceptor.accept(stream).await?;
            if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                return Ok(());
            }
            serve_http(Reader::new(stream), id, behaviour, log).await
        }
        None if *behaviour == Behaviour::Reset => {
            let mut reader = Reader::new(stream);
            if let Some(request) = reader.read_request(id).await? {
                log.record(request);
            }
            let stream = reader.into_inner();
            stream.set_zero_linger()?;
            drop(stream);
            Ok(())
        }
        None => serve_http(Reader::new(stream), id, behaviour, log).await,
    }
}

async fn serve_http<S>(
    mut reader: Reader<S>,
    id: usize,
    behaviour: &Behaviour,
    log: &Log,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if *behaviour == Behaviour::PlainHttpToAnything {
        if reader.read_some().await? {
            reader
                .get_mut()
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await?;
        }
        return pending().await;
    }

    let mut served = 0usize;
    while let Some(request) = reader.read_request(id).await? {
        log.record(request);
        served += 1;
        let io = reader.get_mut();
        match behaviour {
            Behaviour::Respond {
                status,
                headers,
                body,
            } => {
                let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(*status));
                for (name, value) in headers {
                    let _ = write!(head, "{name}: {value}\r\n");
                }
                let _ = write!(head, "content-length: {}\r\n\r\n", body.len());
                // One write: a head and body in two segments would meet the
                // client's delayed ACK and cost every answer 40 ms.
                let mut answer = head.into_bytes();
                answer.extend_from_slice(body);
                io.write_all(&answer).await?;
                io.flush().await?;
            }
            Behaviour::HeadersThenStall => {
                io.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1024\r\n\r\npartial")
                    .await?;
                io.flush().await?;
                return pending().await;
            }
            Behaviour::Garbled => {
                io.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff\xfe garbage \r\n\r\n")
                    .await?;
                io.flush().await?;
                return pending().await;
            }
            Behaviour::EndlessBody => {
                io.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                    .await?;
                let chunk = format!("400\r\n{}\r\n", "x".repeat(0x400));
                loop {
                    io.write_all(chunk.as_bytes()).await?;
                }
            }
            Behaviour::AnswerOnceThenClose if served > 1 => return Ok(()),
            Behaviour::AnswerOnceThenClose => {
                io.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await?;
                io.flush().await?;
            }
            Behaviour::NeverAnswer | Behaviour::Reset => return pending().await,
            Behaviour::SilentAccept | Behaviour::PlainHttpToAnything => {
                unreachable!("handled before any request is read")
            }
        }
    }
    Ok(())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Other",
    }
}
