//! [`KickReceiver`]: the standalone listener on a task of its own, with a handle to stop it.

use std::io;
use std::net::SocketAddr;

use http::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use unique_client::KickHandler;
use unique_core::BoxError;
use unique_kick_signature::SigningKeys;
use unique_listener::{RequestBody, ServeOptions};
use unique_wire::InfoAnswer;

use crate::service::KickService;

/// A kick receiver serving on its own tokio task: what a node runs next to its
/// `unique_client::Node`, in one call (the crate docs' "A node" shows the whole wiring).
///
/// Start one with [`builder`](Self::builder): it refuses a listener on an address that is
/// not loopback unless the service verifies signatures (or was told
/// [`insecure_unsigned_kicks`](KickReceiverBuilder::insecure_unsigned_kicks)).
///
/// It serves exactly as [`serve_with`](crate::serve_with) does until [`close`](Self::close)
/// is called, the receiver is dropped (which stops it without waiting), or, for one started
/// by the [`builder`](Self::builder), its `KickHandler` is closed (`Node::shutdown` closes
/// it): then it stops accepting and drains as `close` does.
#[derive(Debug)]
#[must_use = "dropping the receiver stops it"]
pub struct KickReceiver {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl KickReceiver {
    /// A receiver for `service`: a [`KickService`], or a `KickHandler` (which becomes
    /// `KickService::new(handler)`).
    pub fn builder(service: impl Into<KickService>) -> KickReceiverBuilder {
        KickReceiverBuilder {
            service: service.into(),
            options: ServeOptions::default(),
            server: None,
        }
    }

    /// Serves any `service` on a loopback `listener`, on a new task: a
    /// [`KickService`] wrapped in a type of your own, on a test's or a sidecar's
    /// loopback port.
    ///
    /// A wrapper does not say whether it verifies signatures, so a listener on an address
    /// that is not loopback is refused: use [`builder`](Self::builder) and
    /// [`spawn_layered`](KickReceiverBuilder::spawn_layered) there, which checks the
    /// [`KickService`] before wrapping it.
    ///
    /// Must be called within a tokio runtime. Errors: the listener's address cannot be
    /// read, or it is not loopback ([`io::ErrorKind::InvalidInput`]).
    pub fn spawn<S, B>(listener: TcpListener, service: S, options: ServeOptions) -> io::Result<Self>
    where
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
        let addr = listener.local_addr()?;
        if !addr.ip().to_canonical().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "refusing to serve kicks on {addr}: KickReceiver::spawn cannot tell whether \
                     the service verifies signatures, so it serves loopback only; use \
                     KickReceiver::builder(kicks) with signing_keys, or with \
                     insecure_unsigned_kicks() if every host that can reach it is trusted, and \
                     spawn_layered(listener, wrap)"
                ),
            ));
        }
        Ok(Self::start(listener, addr, service, options, None))
    }

    fn start<S, B>(
        listener: TcpListener,
        addr: SocketAddr,
        service: S,
        options: ServeOptions,
        handler: Option<KickHandler>,
    ) -> Self
    where
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
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(unique_listener::serve(
            listener,
            service,
            options,
            async move {
                let Some(handler) = handler else {
                    // A stop signal or a dropped handle.
                    let _ = stopped.await;
                    return;
                };
                // Or the handler closed: its node shut down, and every kick would find nothing.
                tokio::select! {
                    _ = stopped => {}
                    () = handler.closed() => {}
                }
            },
        ));
        Self { addr, stop, task }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting (the next kick's connect fails), closes idle connections, and
    /// waits for kicks in flight, at most the drain timeout of its [`ServeOptions`].
    pub async fn close(self) {
        let _ = self.stop.send(());
        // Only a runtime shutting down cancels the task: nothing is served any more.
        let _ = self.task.await;
    }
}

/// How a [`KickReceiver`] will serve: its [`KickService`] and its [`ServeOptions`]. From
/// [`KickReceiver::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until spawned"]
pub struct KickReceiverBuilder {
    service: KickService,
    options: ServeOptions,
    /// The server's `GET /v1/info`, checked against the service before it serves.
    server: Option<InfoAnswer>,
}

impl KickReceiverBuilder {
    /// Verifies every kick against `keys` ([`KickService::signing_keys`]): a kick without a
    /// valid signature gets 401 and destroys nothing. With keys the receiver may listen on
    /// any address.
    pub fn signing_keys(mut self, keys: SigningKeys) -> Self {
        self.service = self.service.signing_keys(keys);
        self
    }

    /// Serves unsigned kicks on any address ([`KickService::insecure_unsigned_kicks`]):
    /// only for a network where every host that can reach the receiver is trusted.
    pub fn insecure_unsigned_kicks(mut self) -> Self {
        self.service = self.service.insecure_unsigned_kicks();
        self
    }

    /// Checks, before serving, that the receiver agrees with the server that will kick it:
    /// `info` is that server's `GET /v1/info` (`unique_client_http::HttpTransport::info`).
    /// [`spawn`](Self::spawn) then refuses to serve when the server does not sign kicks and
    /// this receiver verifies them (every kick would be refused 401, no session would end on
    /// a takeover), when it signs and this receiver does not verify, when it signs with a
    /// key this receiver does not hold, or when it serves no sessions
    /// ([`KickService::check_server`]). Without it, nothing is checked.
    pub fn server_info(mut self, info: &InfoAnswer) -> Self {
        self.server = Some(info.clone());
        self
    }

    /// The listener's guards (connection caps, timeouts, TLS); default
    /// `ServeOptions::default()`.
    pub fn options(mut self, options: ServeOptions) -> Self {
        self.options = options;
        self
    }

    /// Serves the service on `listener`, on a new task.
    ///
    /// Must be called within a tokio runtime. Errors: the listener's address cannot be
    /// read, [`KickService::check_exposure`] refuses it (unsigned kicks on an address
    /// that is not loopback, [`io::ErrorKind::InvalidInput`]), or, with
    /// [`server_info`](Self::server_info), [`KickService::check_server`] finds that the
    /// server and the receiver disagree ([`io::ErrorKind::InvalidInput`], naming the flag to
    /// set); nothing is served then.
    pub fn spawn(self, listener: TcpListener) -> io::Result<KickReceiver> {
        self.spawn_layered(listener, |service| service)
    }

    /// Serves `wrap(service)` on `listener`, on a new task: the [`KickService`] inside tower
    /// layers or a type of your own (tracing, metrics). The exposure check is made on the
    /// [`KickService`] before it is wrapped.
    ///
    /// Must be called within a tokio runtime. Errors: as [`spawn`](Self::spawn).
    pub fn spawn_layered<S, B>(
        self,
        listener: TcpListener,
        wrap: impl FnOnce(KickService) -> S,
    ) -> io::Result<KickReceiver>
    where
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
        let addr = listener.local_addr()?;
        self.service.check_exposure(addr)?;
        if let Some(info) = &self.server {
            self.service.check_server(info)?;
        }
        let handler = self.service.handler().clone();
        Ok(KickReceiver::start(
            listener,
            addr,
            wrap(self.service),
            self.options,
            Some(handler),
        ))
    }
}
