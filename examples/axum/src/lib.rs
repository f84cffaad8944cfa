//! unique in an [axum](https://docs.rs/axum) application, in two routers that the tests in
//! `tests/` serve on loopback and send real requests through.
//!
//! - [`arbiter_router`]: the arbitration server's [`ArbiterService`] under a prefix
//!   (`/unique`) of an application's own router, behind tower-http's trace and timeout layers,
//!   with the service's own bearer-token auth ([`ArbiterService::with_tokens`]). Clients reach
//!   it with `HttpTransport::builder("http://host/unique").bearer_token(…)`: a path in the
//!   base URL is kept as a prefix.
//! - [`node_router`]: a backend node's kick receiver ([`KickService`] over its
//!   `unique_sessions::node::Node`'s kick handler) mounted next to the application's own routes, at
//!   the path its owner endpoint names.
//! - [`game::game_router`]: a game server's player WebSockets, one session each, closed with
//!   the session's `EndNotice` (a 4xxx code and a JSON reason) on a login elsewhere, an admin
//!   logout or a drain.
//!
//! Both services are `tower_service::Service`s that never fail, so axum mounts them as they
//! are: `nest_service` strips the prefix before the arbiter routes `/v1/…`, and
//! `route_service` hands the kick service every method (it answers 405 itself).

pub mod game;

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use unique_sessions::Store;
use unique_sessions::node::KickService;
use unique_sessions::server::ArbiterService;

/// What the application's own route answers, so the tests can tell it from the arbiter.
pub const APP_GREETING: &str = "the application's own route";

/// The prefix the arbitration service is mounted under.
pub const ARBITER_PREFIX: &str = "/unique";

/// The path the node's kick receiver is mounted at (its owner endpoint is
/// `http://<this app's address>/kick`).
pub const KICK_PATH: &str = "/kick";

/// An application router with the arbitration `service` under [`ARBITER_PREFIX`].
///
/// Build `service` with [`ArbiterService::with_tokens`] to require a bearer token on every
/// `/unique/v1/*` call (401 without one, 403 outside its scope). Every request is traced
/// (`tower_http::trace`, at debug level), and a request not answered within
/// `request_timeout` gets 408; keep that above the arbiter's kick timeout, or a claim that
/// is waiting for a kick is cut off (the arbiter finishes it all the same, and the client's
/// retry with the same claim_id is answered by the replay).
pub fn arbiter_router<S: Store>(service: ArbiterService<S>, request_timeout: Duration) -> Router {
    Router::new()
        .route("/", get(|| async { APP_GREETING }))
        .nest_service(ARBITER_PREFIX, service)
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            request_timeout,
        ))
        .layer(TraceLayer::new_for_http())
}

/// An application router with a node's kick receiver at [`KICK_PATH`].
///
/// `kicks` is `KickService::new(node.kick_handler().clone())` with
/// [`signing_keys`](KickService::signing_keys), the keys the arbiter signs its kicks with (a
/// kick without a valid signature then gets 401 and ends nothing). Mounted in your own server,
/// the exposure check is yours: call [`KickService::check_exposure`] with the address you
/// bind, which refuses unsigned kicks off loopback as `KickReceiver::builder` does.
pub fn node_router(kicks: KickService) -> Router {
    Router::new()
        .route("/", get(|| async { APP_GREETING }))
        .route_service(KICK_PATH, kicks)
        .layer(TraceLayer::new_for_http())
}
