//! [`KickService`]: one kick request in, one status out.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{Method, Request, Response};
use http_body::Body;
use http_body_util::Full;
use unique_client::KickHandler;
use unique_core::{BoxError, Error, KickPayload, ValidationLimits};
use unique_kick_signature::{DEFAULT_WINDOW, SigningKeys};
use unique_wire::{BodyError, read_body};

use crate::{reply, telemetry};

/// Largest kick body accepted; a kick payload is well under 600 bytes (an admin logout's
/// message is at most 256).
pub use unique_wire::MAX_KICK_BODY_BYTES as MAX_BODY_BYTES;

/// An HTTP service that applies kicks through a [`KickHandler`].
///
/// `POST` with the JSON payload `{"project","env","uid","gen","reason"?,"message"?}`; the
/// kick's `reason` and `message` reach the handler's destroy as its
/// [`KickCause`](unique_client::KickCause) (neither ever fails a kick, see
/// [`KickPayload`]):
///
/// - **200** `{"ack": "destroyed" | "no-session" | "not-older"}` once no session older than
///   the kick remains here (destroyed, or nothing to destroy);
/// - **503** when `destroy` did not finish within the handler's destroy timeout (or failed):
///   the arbiter then records `non-2xx` and relies on the heartbeat (I5b);
/// - **401** `unauthenticated` when the service has [signing keys](Self::signing_keys) and
///   the kick's `Unique-Signature` is missing, malformed, made with another key, over other
///   bytes, or outside the window: nothing is destroyed, and the arbiter records `non-2xx`
///   (presumed offline, I5b);
/// - **400** for malformed JSON, a missing or mistyped field (unknown fields are ignored), or an invalid key
///   (checked with [`ValidationLimits::check_key`]);
/// - **405** for any other method (with `Allow: POST`);
/// - **413** for a body over [`MAX_BODY_BYTES`], by `Content-Length` or while reading a
///   chunked body.
///
/// Errors carry the JSON shape of the wire contract: `{"error": code, "message": text}`. The
/// path is not looked at: mount the service wherever the owner endpoint points. It is a
/// [`tower_service::Service`] over any request body type: mount it with axum's
/// `route_service` or in any tower stack, or on a bare hyper connection through
/// `hyper_util::service::TowerToHyperService`.
///
/// # Exposure
///
/// A service without signing keys lets anyone who can reach it log this node's users out.
/// This crate's listeners ([`KickReceiver`](crate::KickReceiver),
/// [`serve_with`](crate::serve_with)) therefore refuse to serve one on an address that is not
/// loopback unless it was built with [`insecure_unsigned_kicks`](Self::insecure_unsigned_kicks)
/// ([`check_exposure`](Self::check_exposure) is that check). Mounted in a server of your own,
/// the check is yours: call [`check_exposure`](Self::check_exposure) with the address you
/// listen on before you serve.
#[derive(Debug, Clone)]
pub struct KickService {
    handler: KickHandler,
    limits: ValidationLimits,
    signing_keys: Option<SigningKeys>,
    signature_window: Duration,
    insecure_unsigned: bool,
}

impl From<KickHandler> for KickService {
    fn from(handler: KickHandler) -> Self {
        Self::new(handler)
    }
}

impl KickService {
    /// A service over `handler`, validating keys with the default limits.
    pub fn new(handler: KickHandler) -> Self {
        Self {
            handler,
            limits: ValidationLimits::default(),
            signing_keys: None,
            signature_window: DEFAULT_WINDOW,
            insecure_unsigned: false,
        }
    }

    /// Validates keys with `limits` instead (match the server's).
    #[must_use]
    pub fn validation_limits(mut self, limits: ValidationLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Verifies every kick against `keys` (any of them) before anything else looks at its
    /// body: a kick without a valid `Unique-Signature` over its exact bytes gets 401 and
    /// destroys nothing. Without keys (the default) kicks are not checked, and this crate's
    /// listeners serve the service on loopback only (see
    /// [`check_exposure`](Self::check_exposure)).
    ///
    /// Refused kicks are counted in `unique_kick_signature_rejections_total{reason}` through
    /// the `metrics` facade, with handles registered here: install a recorder before calling
    /// this.
    #[must_use]
    pub fn signing_keys(mut self, keys: SigningKeys) -> Self {
        telemetry::rejections();
        self.signing_keys = Some(keys);
        self
    }

    /// How far a signature's timestamp may be from this node's clock, either way, in
    /// whole seconds. Default [`DEFAULT_WINDOW`] (5 minutes).
    #[must_use]
    pub fn signature_window(mut self, window: Duration) -> Self {
        self.signature_window = window;
        self
    }

    /// Declares that unsigned kicks may be served on any address: every host that can reach
    /// the receiver is trusted (a private network, a sidecar's socket behind mutual TLS).
    /// Without it, a service without [signing keys](Self::signing_keys) is refused on an
    /// address that is not loopback ([`check_exposure`](Self::check_exposure)). It changes
    /// nothing else: kicks are still verified when the service has keys.
    #[must_use]
    pub fn insecure_unsigned_kicks(mut self) -> Self {
        self.insecure_unsigned = true;
        self
    }

    /// Whether kicks are verified: the service has [signing keys](Self::signing_keys).
    pub fn verifies_signatures(&self) -> bool {
        self.signing_keys.is_some()
    }

    /// Whether this service may be served on `addr`: yes when it
    /// [verifies signatures](Self::verifies_signatures), when `addr` is loopback
    /// (`127.0.0.0/8`, `::1`, and `::ffff:127.0.0.0/104`; the unspecified `0.0.0.0` and `::`
    /// are not loopback: they listen on every interface), or when it was built with
    /// [`insecure_unsigned_kicks`](Self::insecure_unsigned_kicks) (then a warning is
    /// logged). [`KickReceiver`](crate::KickReceiver) and [`serve_with`](crate::serve_with)
    /// call it with their listener's address; call it yourself when you mount the service
    /// in your own server.
    ///
    /// Errors: [`io::ErrorKind::InvalidInput`], naming `addr` and both ways out.
    pub fn check_exposure(&self, addr: SocketAddr) -> io::Result<()> {
        if self.verifies_signatures() || addr.ip().to_canonical().is_loopback() {
            return Ok(());
        }
        if self.insecure_unsigned {
            tracing::warn!(%addr, "serving unsigned kicks (insecure_unsigned_kicks)");
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "refusing to serve unsigned kicks on {addr}: any host that reaches it could log \
                 this node's users out; give the receiver the arbiter's signing keys \
                 (signing_keys), or call insecure_unsigned_kicks() if every host that can reach \
                 it is trusted"
            ),
        ))
    }

    /// Whether this service agrees with the server `info` describes (its `GET /v1/info`,
    /// from `unique_client_http::HttpTransport::info`): the server serves sessions, and it
    /// signs kicks exactly when this service verifies them, with a key this service holds.
    /// [`KickReceiverBuilder::server_info`](crate::KickReceiverBuilder::server_info) makes
    /// the receiver call it before it serves; call it yourself when you mount the service
    /// in your own server.
    ///
    /// Errors: [`io::ErrorKind::InvalidInput`], naming the flag or option to set: the
    /// server's `--kick-signing-keys`, or this service's
    /// [`signing_keys`](Self::signing_keys).
    pub fn check_server(&self, info: &unique_wire::InfoAnswer) -> io::Result<()> {
        crate::agreement::check(self.signing_keys.as_ref(), info)
    }

    /// The handler it applies kicks with.
    pub fn handler(&self) -> &KickHandler {
        &self.handler
    }

    /// Answers one request. Never fails: every problem is a status.
    pub async fn respond<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body,
        B::Error: Into<BoxError>,
    {
        if request.method() != Method::POST {
            return reply::method_not_allowed();
        }
        if declared_length(&request).is_some_and(|n| n > MAX_BODY_BYTES as u64) {
            return reply::too_large();
        }
        let (parts, body) = request.into_parts();
        // Enforced while reading too: a chunked body declares no length.
        let body = match read_body(body, MAX_BODY_BYTES).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => return reply::too_large(),
            Err(BodyError::Unreadable(_)) => {
                return reply::bad_request("request body could not be read");
            }
        };
        if let Some(keys) = &self.signing_keys {
            // A value that is not visible ASCII is checked as "", which is malformed.
            let header = parts
                .headers
                .get(unique_kick_signature::HEADER)
                .map(|value| value.to_str().unwrap_or_default());
            let checked = keys.verify(header, &body, SystemTime::now(), self.signature_window);
            if let Err(rejection) = checked {
                tracing::debug!(reason = rejection.as_str(), "kick refused: signature");
                telemetry::count(rejection);
                return reply::unauthenticated(rejection);
            }
        }
        let payload: KickPayload = match unique_wire::decode_kick(&body) {
            Ok(payload) => payload,
            Err(e) => return reply::bad_request(&format!("malformed kick: {e}")),
        };
        if let Err(e) = self.limits.check_key(&payload.key()) {
            let message = match &e {
                Error::InvalidParams(m) => m.clone(),
                other => other.to_string(),
            };
            return reply::bad_request(&message);
        }
        let ack = self.handler.handle(&payload).await;
        tracing::debug!(key = %payload.key(), generation = payload.generation, %ack, "kick handled");
        reply::ack(ack)
    }
}

/// The `Content-Length` header, when present and well-formed.
fn declared_length<B>(request: &Request<B>) -> Option<u64> {
    request
        .headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send>>;

impl<B> tower_service::Service<Request<B>> for KickService
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.respond(request).await) })
    }
}
