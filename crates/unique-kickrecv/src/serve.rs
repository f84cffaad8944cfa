//! A standalone kick listener: `unique-listener`'s accept loop around a [`KickService`].

use std::future::Future;
use std::io;

use tokio::net::TcpListener;
use unique_client::KickHandler;
use unique_listener::ServeOptions;

use crate::service::KickService;

/// [`serve_with`] the default [`ServeOptions`]. The kicks are not verified, so `listener`
/// must be loopback (otherwise [`io::ErrorKind::InvalidInput`] at once, see
/// [`KickService::check_exposure`]); elsewhere pass a [`KickService`] with signing keys to
/// [`serve_with`].
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
/// Before serving, [`KickService::check_exposure`] checks the listener's address: unsigned
/// kicks are served on loopback only, unless the service was built with
/// [`insecure_unsigned_kicks`](KickService::insecure_unsigned_kicks).
///
/// Every connection speaks HTTP/1.1 with keep-alive (the arbiter's kicker pools
/// connections), with the connection caps, header, idle and body timeouts and optional TLS of
/// `options` (see `unique-listener`). For a custom stack (routing, other limits), mount
/// [`KickService`] yourself instead (the exposure check is then yours). Accept failures (e.g.
/// out of file descriptors) are logged and retried after a short pause.
///
/// Errors, before anything is served: the listener's address cannot be read, or
/// [`KickService::check_exposure`] refuses it ([`io::ErrorKind::InvalidInput`]).
pub async fn serve_with<F>(
    listener: TcpListener,
    service: impl Into<KickService>,
    options: ServeOptions,
    shutdown: F,
) -> io::Result<()>
where
    F: Future<Output = ()>,
{
    let service = service.into();
    service.check_exposure(listener.local_addr()?)?;
    unique_listener::serve(listener, service, options, shutdown).await;
    Ok(())
}
