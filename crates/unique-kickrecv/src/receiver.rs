//! [`KickReceiver`]: the standalone listener on a task of its own, with a handle to stop it.

use std::io;
use std::net::SocketAddr;

use http::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use unique_core::BoxError;
use unique_listener::{RequestBody, ServeOptions};

/// A kick receiver serving on its own tokio task: what a node runs next to its
/// `unique_client::Node`, in one call (the crate docs' "A node" shows the whole wiring).
///
/// It serves exactly as [`serve_with`](crate::serve_with) does until [`close`](Self::close)
/// is called or the receiver is dropped (which stops it without waiting).
#[derive(Debug)]
#[must_use = "dropping the receiver stops it"]
pub struct KickReceiver {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl KickReceiver {
    /// Serves `service` on `listener` on a new task. `service` is a
    /// [`KickService`](crate::KickService), or one wrapped in tower layers of your own
    /// (tracing, metrics): any service `unique-listener` accepts.
    ///
    /// Must be called within a tokio runtime. Errors: the listener's address cannot be read.
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
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(unique_listener::serve(listener, service, options, async {
            // A stop signal or a dropped handle.
            let _ = stopped.await;
        }));
        Ok(Self { addr, stop, task })
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
