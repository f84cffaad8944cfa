//! A standalone kick listener: `unique-listener`'s accept loop around a [`KickService`].

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::net::TcpListener;
use unique_client::KickHandler;
use unique_listener::ServeOptions;

use crate::service::KickService;

/// A connection must send its request headers within this long (slow-client guard); the default
/// [`ServeOptions::header_timeout`].
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = unique_listener::DEFAULT_HEADER_TIMEOUT;

/// [`serve_with`] the default [`ServeOptions`].
pub async fn serve<F>(listener: TcpListener, handler: KickHandler, shutdown: F) -> io::Result<()>
where
    F: Future<Output = ()>,
{
    serve_with(listener, handler, ServeOptions::default(), shutdown).await
}

/// Serves kicks on `listener` with `service` until `shutdown` completes, then stops
/// accepting, lets requests in flight finish (at most the drain timeout), closes idle
/// keep-alive connections, and returns.
///
/// `service` is a [`KickHandler`] (kicks unsigned, keys checked with the default
/// `ValidationLimits`), or a [`KickService`] configured with
/// [`signing_keys`](KickService::signing_keys) to refuse kicks without a valid signature
/// and with [`validation_limits`](KickService::validation_limits) to accept the longer
/// names a server with raised limits accepts.
///
/// Every connection speaks HTTP/1.1 with keep-alive (the arbiter's kicker pools
/// connections), with the connection caps, header, idle and body timeouts and optional TLS of
/// `options` (see `unique-listener`). For a custom stack (routing, other limits), mount
/// [`KickService`] yourself instead. Accept failures (e.g. out of file descriptors) are logged
/// and retried after a short pause, so today it always returns `Ok(())`; the `io::Result` leaves
/// room for listener errors that cannot be retried.
pub async fn serve_with<F>(
    listener: TcpListener,
    service: impl Into<KickService>,
    options: ServeOptions,
    shutdown: F,
) -> io::Result<()>
where
    F: Future<Output = ()>,
{
    unique_listener::serve(listener, service.into(), options, shutdown).await;
    Ok(())
}
