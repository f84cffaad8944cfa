//! Routing and the tower service around an [`Arbiter`].

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::answer::write_claim_outcome;
use crate::auth::{Grant, SharedTokens, Unauthenticated};
use crate::request_id::RequestId;
use crate::telemetry::{self, Refusal};
use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;
use serde::Serialize;
use tracing::Instrument;
use unique_core::{Arbiter, ClaimInput, Error, Key, Store};
use unique_wire::{
    BatchAnswer, BatchBody, BatchView, BodyError, ErrorBody, ErrorCode, KeyBody, ReleaseAnswer,
    ReleaseBody, Route, parse, parse_claim, read_body,
};

/// Largest request body accepted; larger bodies get 413.
pub use unique_wire::MAX_REQUEST_BODY_BYTES as MAX_BODY_BYTES;

/// The response body type of every answer.
pub type ResponseBody = Full<Bytes>;

/// How long `/readyz` waits for the store's [`Store::check_ready`] by default.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves the wire contract over an [`Arbiter`].
///
/// A [`tower_service::Service`] for any request body whose data is [`Bytes`]: mount it in
/// axum or any tower stack, or on a bare hyper connection through
/// `hyper_util::service::TowerToHyperService` (what [`serve`](crate::serve) does). Cloning is
/// cheap.
pub struct ArbiterService<S> {
    arbiter: Arbiter<S>,
    /// `None`: every caller may act on every key (a network where every host is trusted).
    tokens: Option<SharedTokens>,
    ready_timeout: Duration,
}

impl<S> Clone for ArbiterService<S> {
    fn clone(&self) -> Self {
        Self {
            arbiter: self.arbiter.clone(),
            tokens: self.tokens.clone(),
            ready_timeout: self.ready_timeout,
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
            ready_timeout: DEFAULT_READY_TIMEOUT,
        }
    }

    /// Requires a bearer token from [`Tokens`](crate::Tokens) on every `/v1/*` request: a
    /// missing or unknown token gets 401 `unauthenticated`, a key outside the token's scope
    /// 403 `forbidden`, both before the arbiter is called. `/healthz` and `/readyz` stay open.
    ///
    /// Pass a [`SharedTokens`] (and keep a clone) to replace the set later while the service
    /// runs ([`SharedTokens::replace`]); a plain `Tokens` is fixed for the service's life.
    ///
    /// Refusals are counted in `unique_auth_rejections_total{reason}` through the `metrics`
    /// facade, with handles registered here: install a recorder before calling this.
    #[must_use]
    pub fn with_tokens(mut self, tokens: impl Into<SharedTokens>) -> Self {
        telemetry::rejections();
        self.tokens = Some(tokens.into());
        self
    }

    /// How long `/readyz` waits for the store's [`Store::check_ready`] before answering 503
    /// (default [`DEFAULT_READY_TIMEOUT`]).
    #[must_use]
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
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
            Some(Route::Ready) => return self.ready().await,
            Some(route) => route,
            None => return error(ErrorCode::NotFound, "no such path"),
        };
        let request_id = RequestId::of(req.headers());
        // Authenticated before the body is read: a refused caller costs no more than this.
        // The request keeps the set in force now, even if it is replaced meanwhile.
        let tokens = self.tokens.as_ref().map(SharedTokens::get);
        let grant = match tokens.as_deref().map(|t| t.authenticate(req.headers())) {
            None => None,
            Some(Ok(grant)) => Some(grant),
            Some(Err(why)) => return unauthenticated(why),
        };
        let body = match read_body(req.into_body(), MAX_BODY_BYTES).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => {
                let message = format!("request body exceeds {MAX_BODY_BYTES} bytes");
                return error(ErrorCode::TooLarge, &message);
            }
            Err(BodyError::Unreadable(e)) => {
                return error(
                    ErrorCode::InvalidParams,
                    &format!("cannot read request body: {e}"),
                );
            }
        };
        let result = match route {
            Route::Claim => self.claim(&body, grant, &request_id).await,
            Route::Current => self.current(&body, grant, &request_id).await,
            Route::CurrentBatch => self.current_batch(&body, grant, &request_id).await,
            Route::Release => self.release(&body, grant, &request_id).await,
            // Answered above, before authentication and without reading a body.
            Route::Health => return text(StatusCode::OK, "ok"),
            Route::Ready => return self.ready().await,
        };
        result.unwrap_or_else(|e| error_body(ErrorBody::from_error(&e)))
    }

    /// `/readyz`: `ok` when the store answers within the ready timeout; any failure is 503
    /// `unavailable` with its reason (a throttle too: the store cannot take this server's
    /// traffic now).
    async fn ready(&self) -> Response<ResponseBody> {
        let within = self.ready_timeout;
        match tokio::time::timeout(within, self.arbiter.store().check_ready()).await {
            Ok(Ok(())) => text(StatusCode::OK, "ok"),
            Ok(Err(e)) => {
                let reason = ErrorBody::from_error(&e).message;
                error(
                    ErrorCode::Unavailable,
                    &format!("store not ready: {reason}"),
                )
            }
            Err(_) => error(
                ErrorCode::Unavailable,
                &format!("store not ready: no answer within {within:?}"),
            ),
        }
    }

    async fn claim(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let input: ClaimInput = parse_claim(body)?.into();
        if let Some(refused) = forbidden(grant, &input.key) {
            return Ok(refused);
        }
        let span = request_id.span("claim", &input.key);
        let outcome = self.arbiter.claim(&input).instrument(span).await?;
        Ok(answer(StatusCode::OK, |out| {
            write_claim_outcome(out, &outcome);
        }))
    }

    async fn current(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let key: Key = parse::<KeyBody>(body)?.into();
        if let Some(refused) = forbidden(grant, &key) {
            return Ok(refused);
        }
        let span = request_id.span("current", &key);
        let view = self.arbiter.current(&key).instrument(span).await?;
        Ok(json(StatusCode::OK, &view))
    }

    /// Every key is checked (count, fields, scope) before the one store round trip.
    async fn current_batch(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let keys = parse::<BatchBody>(body)?.into_keys()?;
        if let Some(refused) = keys.iter().find_map(|key| forbidden(grant, key)) {
            return Ok(refused);
        }
        let span = request_id.batch_span("current_batch", keys.len());
        let results = self.arbiter.current_batch(&keys).instrument(span).await?;
        let answer = BatchAnswer {
            views: results.iter().map(BatchView::from_result).collect(),
        };
        Ok(json(StatusCode::OK, &answer))
    }

    async fn release(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let (key, generation) = parse::<ReleaseBody>(body)?.into_parts();
        if let Some(refused) = forbidden(grant, &key) {
            return Ok(refused);
        }
        let span = request_id.span("release", &key);
        let released = self
            .arbiter
            .release(&key, generation)
            .instrument(span)
            .await?;
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
    answer(status, |scratch| {
        // Serialising our own answer types cannot fail (no maps with non-string keys).
        serde_json::to_writer(scratch, value).expect("answer types serialise");
    })
}

/// A JSON answer whose body `write` appends to an empty buffer.
fn answer(status: StatusCode, write: impl FnOnce(&mut Vec<u8>)) -> Response<ResponseBody> {
    thread_local! {
        /// Serialisation scratch, reused by every answer of this thread.
        static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
    }
    // One exact-size allocation per answer: a growing Vec would reallocate as it
    // fills, and `Bytes::from` a Vec with spare capacity allocates a header too.
    let body = SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        write(scratch);
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
