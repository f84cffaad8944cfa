//! The soak's HTTP/1.1 client: one keep-alive connection, one request at a time, the answer
//! framed by its `content-length` (unique-server always sends one).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most a request may take before its connection is given up: far above any claim's
/// deadline (10 s), so only a server that stopped answering reaches it.
const REQUEST_LIMIT: Duration = Duration::from_secs(30);

/// A whole answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    /// `503 unavailable`: the status and the wire error code, when the body has one.
    pub(crate) fn kind(&self) -> String {
        let code = serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|body| body["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "-".to_owned());
        format!("{} {code}", self.status)
    }
}

/// A connection that failed: `connect refused`, `read reset`, `timeout`, ...
#[derive(Debug)]
pub(crate) struct Broken(pub(crate) String);

/// One keep-alive connection.
pub(crate) struct Conn {
    stream: TcpStream,
    input: Vec<u8>,
}

impl Conn {
    pub(crate) async fn connect(addr: SocketAddr) -> Result<Self, Broken> {
        let stream = tokio::time::timeout(REQUEST_LIMIT, TcpStream::connect(addr))
            .await
            .map_err(|_| Broken("connect timeout".into()))?
            .map_err(|e| Broken(format!("connect {}", io_kind(&e))))?;
        let _ = stream.set_nodelay(true);
        Ok(Self {
            stream,
            input: Vec::with_capacity(4096),
        })
    }

    /// Sends `POST path` (or `GET` when `body` is `None`) with `authorization: Bearer
    /// token` when given, and reads the whole answer.
    pub(crate) async fn send(
        &mut self,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> Result<Answer, Broken> {
        tokio::time::timeout(REQUEST_LIMIT, self.exchange(path, token, body))
            .await
            .map_err(|_| Broken("timeout".into()))?
    }

    async fn exchange(
        &mut self,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> Result<Answer, Broken> {
        let method = if body.is_some() { "POST" } else { "GET" };
        let mut request = format!("{method} {path} HTTP/1.1\r\nhost: soak\r\n");
        if let Some(token) = token {
            request.push_str("authorization: Bearer ");
            request.push_str(token);
            request.push_str("\r\n");
        }
        let body = body.unwrap_or("");
        request.push_str("content-type: application/json\r\ncontent-length: ");
        request.push_str(&body.len().to_string());
        request.push_str("\r\n\r\n");
        request.push_str(body);
        self.stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| Broken(format!("write {}", io_kind(&e))))?;
        self.input.clear();
        loop {
            if let Some(answer) = frame(&self.input)? {
                return Ok(answer);
            }
            let read = self
                .stream
                .read_buf(&mut self.input)
                .await
                .map_err(|e| Broken(format!("read {}", io_kind(&e))))?;
            if read == 0 {
                return Err(Broken("closed by the server".into()));
            }
        }
    }
}

fn io_kind(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "refused".into(),
        std::io::ErrorKind::ConnectionReset => "reset".into(),
        std::io::ErrorKind::BrokenPipe => "broken pipe".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The answer at the start of `input`, once whole.
fn frame(input: &[u8]) -> Result<Option<Answer>, Broken> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut response = httparse::Response::new(&mut headers);
    let head = match response.parse(input) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(Broken(format!("bad response: {e}"))),
    };
    let length = response
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
        .ok_or_else(|| Broken("response without a content-length".into()))?;
    if input.len() < head + length {
        return Ok(None);
    }
    Ok(Some(Answer {
        status: response.code.unwrap_or_default(),
        body: input[head..head + length].to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_framed_by_their_length() {
        let whole = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 25\r\n\r\n{\"error\":\"unavailable\"}  ";
        let answer = frame(whole).unwrap().unwrap();
        assert_eq!(answer.status, 503);
        assert_eq!(answer.kind(), "503 unavailable");
        assert!(frame(&whole[..whole.len() - 1]).unwrap().is_none());
        assert!(frame(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
    }
}
