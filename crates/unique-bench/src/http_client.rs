//! The HTTP/1.1 client of `unique-server`: one hyper connection per worker,
//! keep-alive, one request in flight.

use std::fmt::Write as _;
use std::net::SocketAddr;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::load::{Claim, Client, Connector, Failure, OWNER};

/// Opens connections to one `unique-server`.
#[derive(Debug, Clone)]
pub(crate) struct HttpConnector {
    addr: SocketAddr,
    host: HeaderValue,
}

impl HttpConnector {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        let host =
            HeaderValue::from_str(&addr.to_string()).expect("a socket address is a valid host");
        Self { addr, host }
    }
}

impl Connector for HttpConnector {
    type Client = HttpClient;

    async fn connect(&self) -> Result<HttpClient, Failure> {
        let stream = TcpStream::connect(self.addr)
            .await
            .map_err(|e| Failure::broken(format!("connect: {}", e.kind())))?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Failure::broken(format!("handshake: {e}")))?;
        tokio::spawn(async move {
            // Ends when the sender is dropped or the server closes the connection;
            // a failure shows up on the next request.
            let _ = connection.await;
        });
        Ok(HttpClient {
            sender,
            host: self.host.clone(),
            body: String::with_capacity(256),
        })
    }
}

/// One keep-alive connection.
pub(crate) struct HttpClient {
    sender: SendRequest<Full<Bytes>>,
    host: HeaderValue,
    body: String,
}

impl Client for HttpClient {
    async fn claim(&mut self, claim: Claim<'_>) -> Result<(), Failure> {
        self.body.clear();
        let _ = write!(
            self.body,
            r#"{{"project":"bench","env":"prod","uid":{},"owner":{OWNER},"claim_id":"{}"}}"#,
            claim.uid, claim.claim_id
        );
        let request = Request::builder()
            .method(Method::POST)
            .uri("/v1/claim")
            .header(HOST, self.host.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(Full::new(Bytes::copy_from_slice(self.body.as_bytes())))
            .expect("a valid request");
        self.sender
            .ready()
            .await
            .map_err(|e| Failure::broken(format!("connection: {e}")))?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| Failure::broken(format!("request: {e}")))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| Failure::broken(format!("response body: {e}")))?
            .to_bytes();
        if status == StatusCode::OK && body.starts_with(br#"{"gen":"#) {
            Ok(())
        } else {
            Err(Failure::answer(classify(status, &body)))
        }
    }
}

/// `http 503 unavailable`: the status and the wire error code, when the body has one.
fn classify(status: StatusCode, body: &[u8]) -> String {
    let code = std::str::from_utf8(body)
        .ok()
        .and_then(|text| text.split(r#""error":""#).nth(1))
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("unexpected body");
    format!("http {} {code}", status.as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_name_status_and_code() {
        assert_eq!(
            classify(
                StatusCode::SERVICE_UNAVAILABLE,
                br#"{"error":"unavailable","message":"x"}"#
            ),
            "http 503 unavailable"
        );
        assert_eq!(classify(StatusCode::OK, b"{}"), "http 200 unexpected body");
    }
}
