//! TCP proxies in front of a real server, to play a network that misbehaves without
//! touching the server.
//!
//! - [`StallProxy`] switches between forwarding and stalling, to play a store that stops
//!   answering. While stalled it still accepts connections but never forwards a byte on them,
//!   and every connection that was forwarding stops too: its sockets stay open and silent, like
//!   a peer behind a network partition. Those connections stay silent for good, even after
//!   [`StallProxy::forward`]; only connections accepted after that are forwarded, so a client
//!   recovers only if it gives up on a silent connection and opens a new one.
//! - [`DropProxy`] forwards every request but drops a share of the answers: when the server's
//!   answer to a request starts to arrive, it closes both connections instead, so the request
//!   took effect and the client never learns it (an ambiguous write).
//!
//! Each proxy runs on its own thread and runtime, so both blocking tests (which run a server
//! binary) and async ones can use it; dropping it closes every connection.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// A proxy's listener and accept loop, on a thread and runtime of their own; dropping it
/// stops the loop and closes every connection.
#[derive(Debug)]
struct ProxyThread {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ProxyThread {
    /// Binds a free loopback port and runs `accept_loop` on it.
    fn start<F, Fut>(accept_loop: F) -> Self
    where
        F: FnOnce(TcpListener) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        // Bound here, outside any runtime, so a caller inside one can start a proxy too.
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy on loopback");
        let addr = listener.local_addr().expect("the proxy's address");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the proxy");
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("a tokio listener");
                tokio::select! {
                    () = accept_loop(listener) => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime drops every connection task and closes its sockets.
        });
        Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for ProxyThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the proxy does with connections; `epoch` counts stalls, so a connection knows
/// whether a stall began since it was accepted.
#[derive(Debug, Clone, Copy)]
struct Phase {
    stalled: bool,
    epoch: u64,
}

/// A switchable TCP proxy on a free loopback port; see the module docs.
#[derive(Debug)]
pub struct StallProxy {
    phase: watch::Sender<Phase>,
    thread: ProxyThread,
}

impl StallProxy {
    /// Starts forwarding to `upstream`.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or the proxy's runtime cannot start.
    pub fn start(upstream: SocketAddr) -> Self {
        let (phase, watched) = watch::channel(Phase {
            stalled: false,
            epoch: 0,
        });
        let thread = ProxyThread::start(move |listener| accept_loop(listener, upstream, watched));
        Self { phase, thread }
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.thread.addr
    }

    /// `http://ADDR` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.thread.addr)
    }

    /// Stops forwarding: new connections are held silent, and so is every open one, for good.
    pub fn stall(&self) {
        self.phase.send_modify(|p| {
            p.stalled = true;
            p.epoch += 1;
        });
    }

    /// Forwards connections accepted from now on; those silenced by a stall stay silent.
    pub fn forward(&self) {
        self.phase.send_modify(|p| p.stalled = false);
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, phase: watch::Receiver<Phase>) {
    while let Ok((client, _)) = listener.accept().await {
        tokio::spawn(relay(client, upstream, phase.clone()));
    }
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, mut phase: watch::Receiver<Phase>) {
    let accepted = *phase.borrow_and_update();
    if accepted.stalled {
        return silent(client, None).await;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let stalled = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
        changed = phase.wait_for(|p| p.epoch != accepted.epoch) => changed.is_ok(),
    };
    if stalled {
        // Stop copying mid-stream and keep both ends open.
        silent(client, Some(server)).await;
    }
}

/// Holds the connection open without reading or writing until the proxy stops.
async fn silent(client: TcpStream, server: Option<TcpStream>) {
    let _held = (client, server);
    std::future::pending::<()>().await;
}

/// A TCP proxy on a free loopback port that forwards every request and drops a share of the
/// answers by closing the connection; see the module docs.
///
/// It assumes one request at a time per connection, answered before the next is sent (HTTP/1.1
/// without pipelining, as the AWS SDK and hyper clients send): the first bytes the server
/// sends after the client's last ones start an answer.
#[derive(Debug)]
pub struct DropProxy {
    counts: Arc<DropCounts>,
    thread: ProxyThread,
}

#[derive(Debug, Default)]
struct DropCounts {
    answered: AtomicU64,
    dropped: AtomicU64,
}

impl DropProxy {
    /// Starts forwarding to `upstream`, dropping each answer with probability `share`
    /// (0.0 forwards every answer, 1.0 none).
    ///
    /// # Panics
    ///
    /// When `share` is not within `0.0..=1.0`, no loopback port can be bound or the proxy's
    /// runtime cannot start.
    pub fn start(upstream: SocketAddr, share: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&share),
            "drop share {share} is not in 0..=1"
        );
        let counts = Arc::new(DropCounts::default());
        let shared = counts.clone();
        let thread = ProxyThread::start(move |listener| async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay_dropping(client, upstream, share, shared.clone()));
            }
        });
        Self { counts, thread }
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.thread.addr
    }

    /// `http://ADDR` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.thread.addr)
    }

    /// Answers dropped so far: requests the server handled whose answer never arrived.
    pub fn dropped(&self) -> u64 {
        self.counts.dropped.load(Ordering::Relaxed)
    }

    /// Answers forwarded so far.
    pub fn answered(&self) -> u64 {
        self.counts.answered.load(Ordering::Relaxed)
    }
}

/// Copies both ways; at the start of each answer, rolls whether to drop it, and if so closes
/// both connections.
async fn relay_dropping(
    client: TcpStream,
    upstream: SocketAddr,
    share: f64,
    counts: Arc<DropCounts>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let mut rng = fastrand::Rng::new();
    let mut answer_due = false;
    // Returning drops all four halves, which closes both connections.
    loop {
        tokio::select! {
            read = client_in.read(&mut up) => {
                let Ok(n @ 1..) = read else { return };
                if server_out.write_all(&up[..n]).await.is_err() {
                    return;
                }
                answer_due = true;
            }
            read = server_in.read(&mut down) => {
                let Ok(n @ 1..) = read else { return };
                if answer_due {
                    answer_due = false;
                    if rng.f64() < share {
                        counts.dropped.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    counts.answered.fetch_add(1, Ordering::Relaxed);
                }
                if client_out.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A loopback server answering `pong` to every `ping` on a connection; counts the pings.
    fn pong_server() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let pings = Arc::new(AtomicUsize::new(0));
        let counted = pings.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let counted = counted.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4];
                    while stream.read_exact(&mut buf).is_ok() {
                        counted.fetch_add(1, Ordering::SeqCst);
                        if stream.write_all(b"pong").is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, pings)
    }

    /// Sends one ping through `proxy` and returns what came back before the connection closed
    /// or the answer was complete.
    fn ping(proxy: SocketAddr) -> Vec<u8> {
        let mut stream = TcpStream::connect(proxy).unwrap();
        stream.write_all(b"ping").unwrap();
        let mut answer = vec![0u8; 4];
        match stream.read_exact(&mut answer) {
            Ok(()) => answer,
            Err(_) => Vec::new(),
        }
    }

    #[test]
    fn drop_proxy_forwards_every_request_and_drops_the_share_of_answers() {
        let (upstream, pings) = pong_server();
        let all = DropProxy::start(upstream, 0.0);
        assert_eq!(ping(all.addr()), b"pong");
        assert_eq!((all.answered(), all.dropped()), (1, 0));

        let none = DropProxy::start(upstream, 1.0);
        assert!(ping(none.addr()).is_empty(), "the answer was dropped");
        assert_eq!((none.answered(), none.dropped()), (0, 1));
        // Both requests reached the server: the dropped one took effect unseen.
        assert_eq!(pings.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn drop_proxy_rolls_once_per_answer_on_a_kept_connection() {
        let (upstream, _) = pong_server();
        let proxy = DropProxy::start(upstream, 0.0);
        let mut stream = TcpStream::connect(proxy.addr()).unwrap();
        for _ in 0..3 {
            stream.write_all(b"ping").unwrap();
            let mut answer = [0u8; 4];
            stream.read_exact(&mut answer).unwrap();
            assert_eq!(&answer, b"pong");
        }
        assert_eq!(proxy.answered(), 3);
    }
}
