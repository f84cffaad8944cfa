//! The small JSON answers of the receiver.

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE};
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;
use unique_client::KickAck;
use unique_kick_signature::Rejection;
use unique_wire::{ErrorBody, ErrorCode};

#[derive(Serialize)]
struct AckBody<'a> {
    ack: &'a str,
}

fn json(status: StatusCode, body: &impl Serialize) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// 200 `{"ack": …}` when no older session remains; 503 with the ack as message otherwise.
pub(crate) fn ack(ack: KickAck) -> Response<Full<Bytes>> {
    if ack.no_older_session() {
        json(StatusCode::OK, &AckBody { ack: ack.as_str() })
    } else {
        let message = match ack {
            KickAck::TimedOut { .. } => "destroy timed out",
            _ => "destroy failed",
        };
        error(ErrorCode::Unavailable, message)
    }
}

/// The error shape of the wire contract: `{"error": code, "message": text}`.
fn error(code: ErrorCode, message: &str) -> Response<Full<Bytes>> {
    let body = ErrorBody::new(code, message);
    json(body.status(), &body)
}

pub(crate) fn bad_request(message: &str) -> Response<Full<Bytes>> {
    error(ErrorCode::InvalidParams, message)
}

/// 401: the kick's signature did not check out; the message says why, never a key.
pub(crate) fn unauthenticated(rejection: Rejection) -> Response<Full<Bytes>> {
    error(ErrorCode::Unauthenticated, &rejection.to_string())
}

pub(crate) fn too_large() -> Response<Full<Bytes>> {
    let message = format!("kick body over {} bytes", unique_wire::MAX_KICK_BODY_BYTES);
    error(ErrorCode::TooLarge, &message)
}

pub(crate) fn method_not_allowed() -> Response<Full<Bytes>> {
    let mut response = error(ErrorCode::MethodNotAllowed, "kicks are POST requests");
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(Method::POST.as_str()));
    response
}
