//! Just enough HTTP/1.1 to read what a kicker sends: a request line, headers, and
//! a body framed by `content-length` or `transfer-encoding: chunked`.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Refuse heads and bodies past this size: a kick is a few hundred bytes.
const LIMIT: usize = 64 * 1024;

/// One request as a peer received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Which accepted connection carried it, counting from 1 in accept order.
    pub connection: usize,
    /// The method, e.g. `POST`.
    pub method: String,
    /// The request target as sent (origin form: path and query).
    pub target: String,
    /// Header names in lower case, values as sent, in order.
    pub headers: Vec<(String, String)>,
    /// The decoded body.
    pub body: Vec<u8>,
}

impl Received {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads bytes from a connection into a buffer that keeps what belongs to the
/// next request (keep-alive).
pub(crate) struct Reader<R> {
    io: R,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub(crate) fn new(io: R) -> Self {
        Self {
            io,
            buf: Vec::new(),
        }
    }

    pub(crate) fn get_mut(&mut self) -> &mut R {
        &mut self.io
    }

    pub(crate) fn into_inner(self) -> R {
        self.io
    }

    /// Reads whatever arrives next (at least one byte), for peers that answer
    /// anything without parsing it. `false` on end of stream.
    pub(crate) async fn read_some(&mut self) -> io::Result<bool> {
        self.fill().await
    }

    /// The next request, or `None` when the peer closed cleanly between requests.
    pub(crate) async fn read_request(&mut self, connection: usize) -> io::Result<Option<Received>> {
        let head_end = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                break end;
            }
            if self.buf.len() > LIMIT {
                return Err(invalid("request head too large"));
            }
            if !self.fill().await? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                };
            }
        };
        let head = String::from_utf8(self.buf[..head_end].to_vec())
            .map_err(|_| invalid("request head is not utf-8"))?;
        self.buf.drain(..head_end + 4);

        let mut lines = head.split("\r\n");
        let mut request_line = lines.next().unwrap_or_default().split(' ');
        let (Some(method), Some(target), Some(version)) = (
            request_line.next(),
            request_line.next(),
            request_line.next(),
        ) else {
            return Err(invalid("malformed request line"));
        };
        if !version.starts_with("HTTP/1.") {
            return Err(invalid("not an http/1 request"));
        }
        let mut headers = Vec::new();
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| invalid("malformed header line"))?;
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
        let mut received = Received {
            connection,
            method: method.to_owned(),
            target: target.to_owned(),
            headers,
            body: Vec::new(),
        };

        let chunked = received
            .header("transfer-encoding")
            .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
        if chunked {
            received.body = self.read_chunked().await?;
        } else if let Some(length) = received.header("content-length") {
            let length: usize = length.parse().map_err(|_| invalid("bad content-length"))?;
            received.body = self.read_exact(length).await?;
        }
        Ok(Some(received))
    }

    async fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line().await?;
            let size = line.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailers, if any, end with an empty line.
                while !self.read_line().await?.is_empty() {}
                return Ok(body);
            }
            if body.len() + size > LIMIT {
                return Err(invalid("request body too large"));
            }
            body.extend(self.read_exact(size).await?);
            if !self.read_line().await?.is_empty() {
                return Err(invalid("chunk not followed by crlf"));
            }
        }
    }

    async fn read_line(&mut self) -> io::Result<String> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n") {
                let line = String::from_utf8(self.buf[..end].to_vec())
                    .map_err(|_| invalid("line is not utf-8"))?;
                self.buf.drain(..end + 2);
                return Ok(line);
            }
            if self.buf.len() > LIMIT {
                return Err(invalid("line too long"));
            }
            if !self.fill().await? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    async fn read_exact(&mut self, length: usize) -> io::Result<Vec<u8>> {
        if length > LIMIT {
            return Err(invalid("request body too large"));
        }
        while self.buf.len() < length {
            if !self.fill().await? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(self.buf.drain(..length).collect())
    }

    /// Appends the next read to the buffer; `false` on end of stream.
    async fn fill(&mut self) -> io::Result<bool> {
        let mut chunk = [0u8; 4096];
        let n = self.io.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(raw: &[u8]) -> io::Result<Option<Received>> {
        Reader::new(raw).read_request(1).await
    }

    #[tokio::test]
    async fn reads_a_content_length_request_and_keeps_the_next_one() {
        let raw = b"POST /kick?a=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}GET / HTTP/1.1\r\n\r\n";
        let mut reader = Reader::new(&raw[..]);
        let first = reader.read_request(1).await.unwrap().unwrap();
        assert_eq!(first.method, "POST");
        assert_eq!(first.target, "/kick?a=1");
        assert_eq!(first.header("CONTENT-TYPE"), Some("application/json"));
        assert_eq!(first.body, b"{}");
        let second = reader.read_request(1).await.unwrap().unwrap();
        assert_eq!((second.method.as_str(), second.body.len()), ("GET", 0));
        assert!(reader.read_request(1).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn reads_a_chunked_body() {
        let raw = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        let request = parse(raw).await.unwrap().unwrap();
        assert_eq!(request.body, b"abcde");
    }

    #[tokio::test]
    async fn refuses_what_is_not_http() {
        assert!(parse(b"\x16\x03\x01\x02\x00garbage\r\n\r\n").await.is_err());
        assert!(
            parse(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab")
                .await
                .is_err()
        );
    }
}
