//! Serving an [`ArbiterService`] on a TCP listener: `unique-listener`'s accept loop.

use std::future::Future;

use tokio::net::TcpListener;
use unique_core::Store;
use unique_listener::ServeOptions;

use crate::service::ArbiterService;

/// [`serve_with`] the default [`ServeOptions`]: plain HTTP/1.1, the default connection caps and
/// timeouts.
pub async fn serve<S: Store>(
    listener: TcpListener,
    service: ArbiterService<S>,
    shutdown: impl Future<Output = ()>,
) {
    serve_with(listener, service, ServeOptions::default(), shutdown).await;
}

/// Accepts HTTP/1.1 connections (keep-alive, pipelining-safe; HTTPS with
/// [`ServeOptions::tls`]) on `listener` until `shutdown` completes, then stops accepting and lets
/// in-flight requests finish (at most the drain timeout). Connection caps and header, idle and
/// body timeouts are those of `options`; see `unique-listener` for each guard.
pub async fn serve_with<S: Store>(
    listener: TcpListener,
    service: ArbiterService<S>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) {
    unique_listener::serve(listener, service, options, shutdown).await;
}
