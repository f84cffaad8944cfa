//! Routing and the hyper / tower service around an [`Arbiter`].

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use serde::Serialize;
use unique_core::{Arbiter, ClaimInput, Error, Key, Store};

use crate::wire::{ClaimBody, ErrorAnswer, KeyBody, ReleaseAnswer, ReleaseBody, parse};

/// Largest request body accepted (SPEC §6); larger bodies get 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The response body type of every answer.
pub type ResponseBody = Full<Bytes>;

/// Serves the wire contract of SPEC §6 over an [`Arbiter`].
///
/// Implements both `hyper::service::Service` (for a bare hyper connection) and
/// `tower::Service` (to mount in axum or any tower stack), for any request body
/// whose data is [`Bytes`]. Cloning is cheap.
pub struct ArbiterService<S> {
    arbiter: Arbiter<S>,
}

impl<S> Clone for ArbiterService<S> {
    fn clone(&self) -> Self {
        Self {
            arbiter: self.arbiter.clone(),
        }
    }
}

impl<S: Store> ArbiterService<S> {
    /// Wraps an arbiter.
    pub fn new(arbiter: Arbiter<S>) -> Self {
        Self { arbiter }
    }

    /// Answers one request. Never fails: every problem is an HTTP answer.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<unique_core::BoxError>,
    {
        let route = match (req.method(), req.uri().path()) {
            (&Method::POST, "/v1/claim") => Route::Claim,
            (&Method::POST, "/v1/current") => Route::Current,
            (&Method::POST, "/v1/release") => Route::Release,
            (&Method::GET | &Method::HEAD, "/healthz") => return text(StatusCode::OK, "ok"),
            (_, "/v1/claim" | "/v1/current" | "/v1/release" | "/healthz") => {
                return error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method_not_allowed",
                    "method not allowed on this path",
                );
            }
            _ => return error(StatusCode::NOT_FOUND, "not_found", "no such path"),
        };
        let body = match read_body(req.into_body()).await {
            Ok(body) => body,
            Err(answer) => return *answer,
        };
        let result = match route {
            Route::Claim => self.claim(&body).await,
            Route::Current => self.current(&body).await,
            Route::Release => self.release(&body).await,
        };
        result.unwrap_or_else(|e| error_answer(&e))
    }

    async fn claim(&self, body: &[u8]) -> Result<Response<ResponseBody>, Error> {
        let input: ClaimInput = parse::<ClaimBody>(body)?.into();
        let outcome = self.arbiter.claim(&input).await?;
        Ok(json(StatusCode::OK, &outcome))
    }

    async fn current(&self, body: &[u8]) -> Result<Response<ResponseBody>, Error> {
        let key: Key = parse::<KeyBody>(body)?.into();
        let view = self.arbiter.current(&key).await?;
        Ok(json(StatusCode::OK, &view))
    }

    async fn release(&self, body: &[u8]) -> Result<Response<ResponseBody>, Error> {
        let (key, generation) = parse::<ReleaseBody>(body)?.key();
        let released = self.arbiter.release(&key, generation).await?;
        Ok(json(StatusCode::OK, &ReleaseAnswer { released }))
    }
}

enum Route {
    Claim,
    Current,
    Release,
}

/// Collects at most [`MAX_BODY_BYTES`]; a longer body (announced or streamed) is a 413.
async fn read_body<B>(body: B) -> Result<Bytes, Box<Response<ResponseBody>>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<unique_core::BoxError>,
{
    let too_large = || {
        Box::new(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "request body exceeds 65536 bytes",
        ))
    };
    // A Content-Length over the limit is refused before reading a byte.
    if body.size_hint().lower() > MAX_BODY_BYTES as u64 {
        return Err(too_large());
    }
    let mut body = std::pin::pin!(Limited::new(body, MAX_BODY_BYTES));
    // A small body arrives as one chunk: keep that chunk (no copy, no list of
    // chunks); join only when there is more than one.
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
            Err(e) => {
                return Err(Box::new(error(
                    StatusCode::BAD_REQUEST,
                    "invalid_params",
                    &format!("cannot read request body: {e}"),
                )));
            }
        };
        // Trailers carry nothing for us.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        match &mut joined {
            Some(joined) => joined.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut both = BytesMut::with_capacity(first.len() + data.len());
                both.extend_from_slice(&first);
                both.extend_from_slice(&data);
                joined = Some(both);
            }
        }
    }
    Ok(joined.map_or(first, BytesMut::freeze))
}

fn error_answer(e: &Error) -> Response<ResponseBody> {
    let status = match e {
        Error::InvalidParams(_) => StatusCode::BAD_REQUEST,
        Error::Throttled => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let message = match e {
        Error::InvalidParams(reason) | Error::Unavailable { reason, .. } => reason.as_str(),
        Error::Throttled => "throttled by the store",
        _ => "unavailable",
    };
    error(status, e.code(), message)
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<ResponseBody> {
    json(
        status,
        &ErrorAnswer {
            error: code,
            message,
        },
    )
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

impl<S, B> hyper::service::Service<Request<B>> for ArbiterService<S>
where
    S: Store,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<unique_core::BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn call(&self, req: Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.handle(req).await) })
    }
}

impl<S, B> tower::Service<Request<B>> for ArbiterService<S>
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
        hyper::service::Service::call(self, req)
    }
}

#[cfg(test)]
mod tests {
    use http_body::Frame;
    use http_body_util::StreamBody;

    use super::*;

    fn streamed(parts: &[&'static str]) -> impl Body<Data = Bytes, Error = Infallible> {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect();
        StreamBody::new(futures::stream::iter(frames))
    }

    #[tokio::test]
    async fn body_chunks_are_joined_in_order() {
        let body = read_body(streamed(&[r#"{"a":"#, "", "1,", r#""b":2}"#]))
            .await
            .unwrap();
        assert_eq!(&body[..], br#"{"a":1,"b":2}"#);
    }

    #[tokio::test]
    async fn one_chunk_and_no_chunk() {
        assert_eq!(&read_body(streamed(&["{}"])).await.unwrap()[..], b"{}");
        assert!(read_body(streamed(&[])).await.unwrap().is_empty());
    }
}
