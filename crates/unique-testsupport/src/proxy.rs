//! A TCP proxy in front of a real server that a test can switch between forwarding and
//! stalling, to play a store that stops answering without killing it.
//!
//! While stalled it still accepts connections but never forwards a byte on them, and every
//! connection that was forwarding stops too: its sockets stay open and silent, like a peer
//! behind a network partition. Those connections stay silent for good, even after
//! [`StallProxy::forward`]; only connections accepted after that are forwarded, so a client
//! recovers only if it gives up on a silent connection and opens a new one.
//!
//! The proxy runs on its own thread and runtime, so both blocking tests (which run a server
//! binary) and async ones can use it; dropping it closes every connection.

use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

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
    addr: SocketAddr,
    phase: watch::Sender<Phase>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl StallProxy {
    /// Starts forwarding to `upstream`.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or the proxy's runtime cannot start.
    pub fn start(upstream: SocketAddr) -> Self {
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
        let (phase, watched) = watch::channel(Phase {
            stalled: false,
            epoch: 0,
        });
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("a tokio listener");
                tokio::select! {
                    () = accept_loop(listener, upstream, watched) => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime drops every connection task and closes its sockets.
        });
        Self {
            addr,
            phase,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
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

impl Drop for StallProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
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
