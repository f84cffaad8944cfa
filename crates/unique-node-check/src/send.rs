//! Sending one request to the receiver, each on a connection of its own, and reading back
//! what it answered.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderValue, Method, Request, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// At most this much of an answer's body is read.
const ANSWER_LIMIT: usize = 64 * 1024;

/// At most this many characters of an answer's body are shown.
const SHOWN: usize = 120;

/// Why a URL cannot be checked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// Not an absolute URL.
    #[error("not an absolute http URL: {0}")]
    Invalid(String),
    /// A scheme other than `http`.
    #[error(
        "only http URLs are checked (got {0}): check the receiver's plain-HTTP listener, \
         e.g. on loopback"
    )]
    Scheme(String),
}

/// Where the receiver listens: the URL of its owner endpoint.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    host: String,
    port: u16,
    authority: HeaderValue,
    path: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Self, UrlError> {
        let invalid = || UrlError::Invalid(url.to_owned());
        let uri: Uri = url.parse().map_err(|_| invalid())?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => return Err(UrlError::Scheme(other.to_owned())),
            None => return Err(invalid()),
        }
        let authority = uri.authority().ok_or_else(invalid)?;
        if authority.as_str().contains('@') {
            return Err(invalid());
        }
        // An IPv6 literal comes bracketed, as the Host header wants it; a socket does not.
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(invalid());
        }
        let path = uri
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str);
        Ok(Self {
            host: host.to_owned(),
            port: authority.port_u16().unwrap_or(80),
            authority: HeaderValue::from_str(authority.as_str()).map_err(|_| invalid())?,
            path: if path.is_empty() { "/" } else { path }.to_owned(),
        })
    }
}

/// How a probe's body goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// With its `Content-Length`.
    Sized,
    /// With `Transfer-Encoding: chunked` and no length.
    Chunked,
}

/// One request: method, optional `Unique-Signature`, body.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub(crate) method: Method,
    pub(crate) signature: Option<String>,
    pub(crate) body: Bytes,
    pub(crate) framing: Framing,
}

/// What came back for one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A status, and the start of the body (lossy UTF-8, control characters escaped).
    Status {
        /// The status code.
        status: u16,
        /// At most the first 120 characters of the body.
        body: String,
    },
    /// No answer: the connection failed, or the receiver did not answer within the timeout.
    NoAnswer(String),
}

impl Answer {
    /// The status, when there was an answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            Self::NoAnswer(_) => None,
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Status { status, body } if body.is_empty() => write!(f, "{status}"),
            Self::Status { status, body } => write!(f, "{status} {body}"),
            Self::NoAnswer(why) => write!(f, "no answer ({why})"),
        }
    }
}

/// Sends `probe` to `target` on a fresh connection, waiting at most `timeout` for the whole
/// exchange.
pub(crate) async fn send(target: &Target, probe: Probe, timeout: Duration) -> Answer {
    match tokio::time::timeout(timeout, exchange(target, probe)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(why)) => Answer::NoAnswer(why),
        Err(_) => Answer::NoAnswer(format!("nothing within {timeout:?}")),
    }
}

async fn exchange(target: &Target, probe: Probe) -> Result<Answer, String> {
    let stream = TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let connection = tokio::spawn(connection);
    let mut request = Request::builder()
        .method(probe.method)
        .uri(&target.path)
        .header(HOST, target.authority.clone())
        .header(CONTENT_TYPE, "application/json");
    if let Some(signature) = probe.signature {
        request = request.header(unique_kick_signature::HEADER, signature);
    }
    let request = request
        .body(ProbeBody {
            data: Some(probe.body),
            framing: probe.framing,
        })
        .map_err(|e| format!("request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status().as_u16();
    let body = match Limited::new(response.into_body(), ANSWER_LIMIT)
        .collect()
        .await
    {
        Ok(body) => shown(&body.to_bytes()),
        Err(e) => format!("<body unreadable: {e}>"),
    };
    connection.abort();
    Ok(Answer::Status { status, body })
}

/// The start of a body, printable on one line.
fn shown(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == SHOWN {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// One frame of bytes; [`Framing::Chunked`] hides its length so hyper sends it chunked.
struct ProbeBody {
    data: Option<Bytes>,
    framing: Framing,
}

impl Body for ProbeBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.data.take().map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.framing == Framing::Sized && self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Sized => {
                SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Framing::Chunked => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_to_host_port_and_path() {
        let t = Target::parse("http://127.0.0.1:9001/kick?x=1").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 9001, "/kick?x=1")
        );
        assert_eq!(t.authority, "127.0.0.1:9001");
        let t = Target::parse("http://[::1]:9001").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 9001, "/")
        );
        assert_eq!(t.authority, "[::1]:9001");
        let t = Target::parse("http://node.internal/kick").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("node.internal", 80));
    }

    #[test]
    fn other_schemes_and_relative_urls_are_refused() {
        assert!(
            matches!(Target::parse("https://127.0.0.1/kick"), Err(UrlError::Scheme(s)) if s == "https")
        );
        assert!(matches!(Target::parse("/kick"), Err(UrlError::Invalid(_))));
        assert!(matches!(
            Target::parse("127.0.0.1:9001"),
            Err(UrlError::Invalid(_) | UrlError::Scheme(_))
        ));
        assert!(matches!(
            Target::parse("http://user@127.0.0.1/kick"),
            Err(UrlError::Invalid(_))
        ));
        assert!(matches!(
            Target::parse("not a url"),
            Err(UrlError::Invalid(_))
        ));
    }

    #[test]
    fn bodies_are_shown_on_one_line_and_cut() {
        assert_eq!(
            shown(b"{\"ack\":\"no-session\"}\n"),
            "{\"ack\":\"no-session\"}\\n"
        );
        let long = "x".repeat(500);
        assert_eq!(shown(long.as_bytes()).chars().count(), SHOWN + 1);
    }
}
