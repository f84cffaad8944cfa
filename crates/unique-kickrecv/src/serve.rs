//! A standalone kick listener.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use unique_client::KickHandler;

use crate::service::KickService;

/// A connection must send its request headers within this long (slow-client guard).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves kicks on `listener` with `handler` until `shutdown` completes, then stops
/// accepting, lets requests in flight finish, closes idle keep-alive connections, and
/// returns.
///
/// Every connection speaks HTTP/1.1 with keep-alive (the arbiter's kicker pools
/// connections). For a custom stack (routing, TLS, other limits), mount [`KickService`]
/// yourself instead. Accept failures (e.g. out of file descriptors) are logged and retried
/// after a short pause, so today it always returns `Ok(())`; the `io::Result` leaves room
/// for listener errors that cannot be retried.
pub async fn serve<F>(listener: TcpListener, handler: KickHandler, shutdown: F) -> io::Result<()>
where
    F: Future<Output = ()>,
{
    let service = TowerToHyperService::new(KickService::new(handler));
    let graceful = GracefulShutdown::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Typically EMFILE: back off instead of spinning on the same error.
                tracing::warn!(%error, "kick listener accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(DEFAULT_HEADER_READ_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service.clone());
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "kick connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
