//! The small JSON answers of the receiver.

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE};
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;
use unique_client::KickAck;

#[derive(Serialize)]
struct AckBody<'a> {
    ack: &'a str,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    message: &'a str,
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
        error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

/// The error shape shared with `unique-server`: `{"error": code, "message": text}`.
pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    json(
        status,
        &ErrorBody {
            error: code,
            message,
        },
    )
}

pub(crate) fn bad_request(message: &str) -> Response<Full<Bytes>> {
    error(StatusCode::BAD_REQUEST, "invalid_params", message)
}

pub(crate) fn too_large() -> Response<Full<Bytes>> {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        "kick body over 4096 bytes",
    )
}

pub(crate) fn method_not_allowed() -> Response<Full<Bytes>> {
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "kicks are POST requests",
    );
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(Method::POST.as_str()));
    response
}
