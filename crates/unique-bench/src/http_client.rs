//! The HTTP/1.1 client of `unique-server`: one keep-alive connection per worker,
//! one request in flight, the request written by hand and the answer framed
//! with `httparse` (see [`crate::conn`] for why it is this lean).

use std::fmt::Write as _;
use std::net::SocketAddr;

use unique_wire::CLAIM_PATH;

use crate::conn::Conn;
use crate::load::{Claim, Client, Connector, Failure, OWNER};

/// Opens connections to one `unique-server`.
#[derive(Debug, Clone)]
pub(crate) struct HttpConnector {
    addr: SocketAddr,
    /// Sent as `authorization: Bearer <token>` when the server requires a token.
    bearer_token: Option<String>,
    /// Each claim a pooled login of its user with this limit (evict-oldest), not a claim
    /// of the user's default slot.
    pool: Option<usize>,
}

impl HttpConnector {
    pub(crate) fn new(addr: SocketAddr, bearer_token: Option<&str>) -> Self {
        Self {
            addr,
            bearer_token: bearer_token.map(str::to_owned),
            pool: None,
        }
    }

    /// The same server, each claim a pooled login with limit `k` (evict-oldest).
    pub(crate) fn pooled(mut self, k: usize) -> Self {
        self.pool = Some(k);
        self
    }
}

impl Connector for HttpConnector {
    type Client = HttpClient;

    async fn connect(&self) -> Result<HttpClient, Failure> {
        // The header lines every request repeats: host, and the token when there is one.
        let mut headers = format!("host: {}\r\n", self.addr);
        if let Some(token) = &self.bearer_token {
            let _ = write!(headers, "authorization: Bearer {token}\r\n");
        }
        Ok(HttpClient {
            conn: Conn::connect(self.addr).await?,
            headers,
            body: String::with_capacity(256),
            pool: self
                .pool
                .map(|k| format!(r#","pool":{{"policy":"evict-oldest","limit":{k}}}"#))
                .unwrap_or_default(),
        })
    }
}

/// One keep-alive connection.
pub(crate) struct HttpClient {
    conn: Conn,
    headers: String,
    body: String,
    /// `,"pool":{…}` for pooled logins, else empty.
    pool: String,
}

impl Client for HttpClient {
    async fn claim(&mut self, claim: Claim<'_>) -> Result<(), Failure> {
        self.body.clear();
        let _ = write!(
            self.body,
            r#"{{"project":"bench","env":"prod","uid":{},"owner":{OWNER},"claim_id":"{}"{}}}"#,
            claim.uid, claim.claim_id, self.pool
        );
        write_request(&mut self.conn.request, &self.headers, &self.body);
        let (answer, head) = self.conn.exchange(frame_response).await?;
        let body = &answer[head.body_start..];
        if head.status == 200 && body.starts_with(br#"{"gen":"#) {
            Ok(())
        } else {
            Err(Failure::answer(classify(head.status, body)))
        }
    }
}

fn write_request(out: &mut Vec<u8>, headers: &str, body: &str) {
    use std::io::Write as _;
    let _ = write!(
        out,
        "POST {CLAIM_PATH} HTTP/1.1\r\n{headers}content-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
}

/// What framing learned about one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResponseHead {
    status: u16,
    body_start: usize,
}

/// Frames one response: head plus a `content-length` body. unique-server always
/// sends a length (its bodies are whole buffers), so anything else is refused.
fn frame_response(input: &[u8]) -> Result<Option<(usize, ResponseHead)>, Failure> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut response = httparse::Response::new(&mut headers);
    let head_length = match response.parse(input) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(Failure::broken(format!("bad response: {e}"))),
    };
    let status = response.code.unwrap_or_default();
    let content_length = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        })
        .ok_or_else(|| Failure::broken("response without a valid content-length"))?;
    let length = head_length + content_length;
    Ok((input.len() >= length).then_some((
        length,
        ResponseHead {
            status,
            body_start: head_length,
        },
    )))
}

/// `http 503 unavailable`: the status and the wire error code, when the body has one.
fn classify(status: u16, body: &[u8]) -> String {
    let code = std::str::from_utf8(body)
        .ok()
        .and_then(|text| text.split(r#""error":""#).nth(1))
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("unexpected body");
    format!("http {status} {code}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_has_length_and_body() {
        let mut out = Vec::new();
        write_request(&mut out, "host: 127.0.0.1:1\r\n", "{}");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /v1/claim HTTP/1.1\r\nhost: 127.0.0.1:1\r\ncontent-type: application/json\r\n\
             content-length: 2\r\n\r\n{}"
        );
    }

    #[test]
    fn responses_are_framed_by_content_length() {
        let whole = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{\"gen\":1}";
        let head = ResponseHead {
            status: 200,
            body_start: whole.len() - 9,
        };
        assert_eq!(frame_response(whole).unwrap(), Some((whole.len(), head)));
        // Partial head, partial body: not yet.
        assert_eq!(frame_response(&whole[..10]).unwrap(), None);
        assert_eq!(frame_response(&whole[..whole.len() - 1]).unwrap(), None);
        // Extra bytes after the answer are not part of it.
        let mut more = whole.to_vec();
        more.extend_from_slice(b"HTTP/1.1");
        assert_eq!(frame_response(&more).unwrap(), Some((whole.len(), head)));
        // No length, or garbage: the connection is broken.
        assert!(
            frame_response(b"HTTP/1.1 200 OK\r\n\r\n")
                .unwrap_err()
                .broken
        );
        assert!(frame_response(b"SSH-2.0\r\n\r\n").unwrap_err().broken);
    }

    /// A real unique-server in process (memory store), requiring `tokens` when given.
    async fn server(tokens: Option<unique_arbiter_http::Tokens>) -> std::net::SocketAddr {
        let arbiter =
            unique_core::Arbiter::builder(unique_store_memory::MemoryStore::new()).build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut service = unique_arbiter_http::ArbiterService::new(arbiter);
        if let Some(tokens) = tokens {
            service = service.with_tokens(tokens);
        }
        tokio::spawn(unique_arbiter_http::serve(
            listener,
            service,
            std::future::pending(),
        ));
        addr
    }

    /// The client against a real unique-server: a claim succeeds, and an answer that
    /// is not a claim is an error kind.
    #[tokio::test]
    async fn claims_against_a_real_server() {
        let addr = server(None).await;
        let mut client = HttpConnector::new(addr, None).connect().await.unwrap();
        for claim_id in ["a", "a", "b"] {
            client.claim(Claim { uid: 7, claim_id }).await.unwrap();
        }
        let refused = client
            .claim(Claim {
                uid: 0,
                claim_id: "c",
            })
            .await
            .expect_err("uid 0 is invalid");
        assert_eq!(refused.kind, "http 400 invalid_params");
        assert!(!refused.broken);
        // The connection is still good after the refusal.
        client
            .claim(Claim {
                uid: 8,
                claim_id: "d",
            })
            .await
            .unwrap();
    }

    #[test]
    fn error_kinds_name_status_and_code() {
        assert_eq!(
            classify(503, br#"{"error":"unavailable","message":"x"}"#),
            "http 503 unavailable"
        );
        assert_eq!(classify(200, b"{}"), "http 200 unexpected body");
    }

    /// With a token, every request carries it, and a server that requires it answers.
    #[tokio::test]
    async fn claims_with_a_bearer_token() {
        const TOKEN: &str = "bench-token-0123456789";
        let mut tokens = unique_arbiter_http::Tokens::new();
        tokens
            .add(
                TOKEN,
                unique_arbiter_http::Grant::new("bench", vec!["bench".into()], None),
            )
            .unwrap();
        let addr = server(Some(tokens)).await;
        let mut client = HttpConnector::new(addr, Some(TOKEN))
            .connect()
            .await
            .unwrap();
        client
            .claim(Claim {
                uid: 7,
                claim_id: "a",
            })
            .await
            .unwrap();
        let mut anonymous = HttpConnector::new(addr, None).connect().await.unwrap();
        let refused = anonymous
            .claim(Claim {
                uid: 7,
                claim_id: "a",
            })
            .await
            .expect_err("no token");
        assert_eq!(refused.kind, "http 401 unauthenticated");
    }
}
