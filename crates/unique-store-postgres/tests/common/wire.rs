//! A PostgreSQL protocol proxy for tests: it counts round trips on the wire and can swallow
//! the answer to the next request.
//!
//! Every request of the extended or simple query protocol ends in a `Sync` or a `Query`,
//! which the server answers with exactly one `ReadyForQuery` (`Z`) message: counting those
//! counts round trips (a connection's startup ends in one too, counted apart). When armed,
//! the proxy forwards the next request but drops everything the server answers to it and
//! closes the connection once the answer is complete: the server has executed (and
//! committed) the statement, the client only sees its connection close.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Counters {
    round_trips: AtomicU64,
    connections: AtomicU64,
    armed: AtomicBool,
    swallowed: AtomicU64,
}

/// See the module docs.
pub struct WireProxy {
    addr: SocketAddr,
    counters: Arc<Counters>,
}

impl WireProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counters = Arc::new(Counters::default());
        let shared = Arc::clone(&counters);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let counters = Arc::clone(&shared);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        relay(client, server, counters).await;
                    }
                });
            }
        });
        Self { addr, counters }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Completed request round trips so far (connection startups not included).
    pub fn round_trips(&self) -> u64 {
        self.counters.round_trips.load(Ordering::SeqCst)
    }

    /// Connections opened through the proxy so far.
    pub fn connections(&self) -> u64 {
        self.counters.connections.load(Ordering::SeqCst)
    }

    /// Swallows the answer to the next request (on whichever connection sends it).
    pub fn swallow_next_answer(&self) {
        self.counters.armed.store(true, Ordering::SeqCst);
    }

    /// Answers swallowed so far.
    pub fn swallowed(&self) -> u64 {
        self.counters.swallowed.load(Ordering::SeqCst)
    }
}

/// `url` (a `postgres://` URL) with its host and port replaced by `addr`.
pub fn url_via(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// url");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let credentials = authority.rsplit_once('@').map(|(c, _)| format!("{c}@"));
    format!(
        "{scheme}://{}{addr}/{path}",
        credentials.unwrap_or_default()
    )
}

async fn relay(client: TcpStream, server: TcpStream, counters: Arc<Counters>) {
    counters.connections.fetch_add(1, Ordering::SeqCst);
    let swallow = Arc::new(AtomicBool::new(false));
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = {
        let (counters, swallow) = (Arc::clone(&counters), Arc::clone(&swallow));
        async move {
            let mut buf = vec![0_u8; 64 * 1024];
            loop {
                let n = client_read.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<(), std::io::Error>(());
                }
                if counters.armed.swap(false, Ordering::SeqCst) {
                    swallow.store(true, Ordering::SeqCst);
                }
                server_write.write_all(&buf[..n]).await?;
            }
        }
    };
    let answers = async move {
        let mut started = false;
        loop {
            let mut head = [0_u8; 5];
            server_read.read_exact(&mut head).await?;
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut body = vec![0_u8; len.saturating_sub(4)];
            server_read.read_exact(&mut body).await?;
            let swallowing = swallow.load(Ordering::SeqCst);
            if head[0] == b'Z' {
                if started {
                    counters.round_trips.fetch_add(1, Ordering::SeqCst);
                } else {
                    started = true;
                }
                if swallowing {
                    counters.swallowed.fetch_add(1, Ordering::SeqCst);
                    // Close both sides without passing the answer on.
                    return Ok::<(), std::io::Error>(());
                }
            }
            if !swallowing {
                client_write.write_all(&head).await?;
                client_write.write_all(&body).await?;
            }
        }
    };
    // Either side ending ends the connection (dropping both halves of both sockets).
    tokio::select! {
        _ = requests => {}
        _ = answers => {}
    }
}
