//! Routing and the tower service around an [`Arbiter`].

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::auth::{Grant, Tokens, Unauthenticated};
use crate::telemetry::{self, Refusal};
use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;
use serde::Serialize;
use unique_core::{Arbiter, ClaimInput, Error, Key, Store};
use unique_wire::{
    BodyError, ClaimBody, ErrorBody, ErrorCode, KeyBody, ReleaseAnswer, ReleaseBody, Route, parse,
    read_body,
};

/// Largest request body accepted; larger bodies get 413.
pub use unique_wire::MAX_REQUEST_BODY_BYTES as MAX_BODY_BYTES;

/// The response body type of every answer.
pub type ResponseBody = Full<Bytes>;

/// Serves the wire contract over an [`Arbiter`].
///
/// A [`tower_service::Service`] for any request body whose data is [`Bytes`]: mount it in
/// axum or any tower stack, or on a bare hyper connection through
/// `hyper_util::service::TowerToHyperService` (what [`serve`](crate::serve) does). Cloning is
/// cheap.
pub struct ArbiterService<S> {
    arbiter: Arbiter<S>,
    /// `None`: every caller may act on every key (a network where every host is trusted).
    tokens: Option<Arc<Tokens>>,
}

impl<S> Clone for ArbiterService<S> {
    fn clone(&self) -> Self {
        Self {
            arbiter: self.arbiter.clone(),
            tokens: self.tokens.clone(),
        }
    }
}

impl<S: Store> ArbiterService<S> {
    /// Wraps an arbiter. Without [`with_tokens`](Self::with_tokens) every caller is
    /// trusted: serve it only where every host that can reach it is.
    pub fn new(arbiter: Arbiter<S>) -> Self {
        Self {
            arbiter,
            tokens: None,
        }
    }

    /// Requires a bearer token from [`Tokens`] on every `/v1/*` request: a missing or
    /// unknown token gets 401 `unauthenticated`, a key outside the token's scope 403
    /// `forbidden`, both before the arbiter is called. `/healthz` stays open.
    ///
    /// Refusals are counted in `unique_auth_rejections_total{reason}` through the `metrics`
    /// facade, with handles registered here: install a recorder before calling this.
    #[must_use]
    pub fn with_tokens(mut self, tokens: Tokens) -> Self {
        telemetry::rejections();
        self.tokens = Some(Arc::new(tokens));
        self
    }

    /// Answers one request. Never fails: every problem is an HTTP answer.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<unique_core::BoxError>,
    {
        let route = match Route::from_path(req.uri().path()) {
            Some(route) if !route.allows(req.method()) => {
                return error(
                    ErrorCode::MethodNotAllowed,
                    "method not allowed on this path",
                );
            }
            Some(Route::Health) => return text(StatusCode::OK, "ok"),
            Some(route) => route,
            None => return error(ErrorCode::NotFound, "no such path"),
        };
        // Authenticated before the body is read: a refused caller costs no more than this.
        let grant = match self
            .tokens
            .as_deref()
            .map(|t| t.authenticate(req.headers()))
        {
            None => None,
            Some(Ok(grant)) => Some(grant),
            Some(Err(why)) => return unauthenticated(why),
        };
        let body = match read_body(req.into_body(), MAX_BODY_BYTES).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => {
                return error(ErrorCode::TooLarge, "request body exceeds 65536 bytes");
            }
            Err(BodyError::Unreadable(e)) => {
                return error(
                    ErrorCode::InvalidParams,
                    &format!("cannot read request body: {e}"),
                );
            }
        };
        let result = match route {
            Route::Claim => self.claim(&body, grant).await,
            Route::Current => self.current(&body, grant).await,
            Route::Release => self.release(&body, grant).await,
            // Answered above, before reading a body.
            Route::Health => return text(StatusCode::OK, "ok"),
        };
        result.unwrap_or_else(|e| error_body(ErrorBody::from_error(&e)))
    }

    async fn claim(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
    ) -> Result<Response<ResponseBody>, Error> {
        let input: ClaimInput = parse::<ClaimBody>(body)?.into();
        if let Some(refused) = forbidden(grant, &input.key) {
            return Ok(refused);
        }
        let outcome = self.arbiter.claim(&input).await?;
        Ok(json(StatusCode::OK, &outcome))
    }

    async fn current(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
    ) -> Result<Response<ResponseBody>, Error> {
        let key: Key = parse::<KeyBody>(body)?.into();
        if let Some(refused) = forbidden(grant, &key) {
            return Ok(refused);
        }
        let view = self.arbiter.current(&key).await?;
        Ok(json(StatusCode::OK, &view))
    }

    async fn release(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
    ) -> Result<Response<ResponseBody>, Error> {
        let (key, generation) = parse::<ReleaseBody>(body)?.into_parts();
        if let Some(refused) = forbidden(grant, &key) {
            return Ok(refused);
        }
        let released = self.arbiter.release(&key, generation).await?;
        Ok(json(StatusCode::OK, &ReleaseAnswer { released }))
    }
}

/// 401 with the bearer challenge.
fn unauthenticated(why: Unauthenticated) -> Response<ResponseBody> {
    telemetry::count(Refusal::Unauthenticated(why));
    let mut answer = error(ErrorCode::Unauthenticated, why.message());
    answer
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    answer
}

/// 403 when the caller's token does not cover `key` (`None`: no authentication configured).
fn forbidden(grant: Option<&Grant>, key: &Key) -> Option<Response<ResponseBody>> {
    let grant = grant?;
    if grant.permits(key) {
        return None;
    }
    telemetry::count(Refusal::Forbidden);
    let message = format!(
        "token {:?} may not act on project {:?} env {:?}",
        grant.name(),
        key.project,
        key.env
    );
    Some(error(ErrorCode::Forbidden, &message))
}

fn error(code: ErrorCode, message: &str) -> Response<ResponseBody> {
    error_body(ErrorBody::new(code, message))
}

fn error_body(body: ErrorBody<'_>) -> Response<ResponseBody> {
    json(body.status(), &body)
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<ResponseBody> {
    thread_local! {
        /// Serialisation scratch, reused by every answer of this thread.
        static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
    }
    // One exact-size allocation per answer: a growing Vec would reallocate as it
    // fills, and `Bytes::from` a Vec with spare capacity allocates a header too.
    let body = SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        // Serialising our own answer types cannot fail (no maps with non-string keys).
        serde_json::to_writer(&mut *scratch, value).expect("answer types serialise");
        Bytes::copy_from_slice(scratch)
    });
    let mut res = Response::new(Full::new(body));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

fn text(status: StatusCode, body: &'static str) -> Response<ResponseBody> {
    let mut res = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    res
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower_service::Service<Request<B>> for ArbiterService<S>
where
    S: Store,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<unique_core::BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.handle(req).await) })
    }
}
