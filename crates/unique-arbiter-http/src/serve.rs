//! Serving an [`ArbiterService`] on a TCP listener with graceful shutdown.

use std::future::Future;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use unique_core::Store;

use crate::service::ArbiterService;

/// How long in-flight requests get to finish after shutdown is requested.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts HTTP/1.1 connections (keep-alive, pipelining-safe) on `listener` until
/// `shutdown` completes, then stops accepting and lets in-flight requests finish
/// (at most [`DRAIN_TIMEOUT`]).
pub async fn serve<S: Store>(
    listener: TcpListener,
    service: ArbiterService<S>,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let service = TowerToHyperService::new(service);
    let mut builder = http1::Builder::new();
    // half_close: while a request is in flight hyper otherwise keeps reading the
    // socket to notice an early EOF, which reserves a fresh 8 KiB read buffer per
    // request (the old one is still shared with the request) and cancels the claim
    // if the client goes away. A claim is cheap and idempotent per claim_id, so
    // finishing it is the better outcome, and the read moves to after the answer.
    builder
        .keep_alive(true)
        .pipeline_flush(true)
        .half_close(true);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // Out of file descriptors and similar: log, back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = builder.serve_connection(TokioIo::new(stream), service.clone());
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within the drain timeout");
    }
}
