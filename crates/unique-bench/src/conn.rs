//! One keep-alive TCP connection with one request in flight: the transport of
//! both the HTTP and the Redis client.
//!
//! It is deliberately lean — the request is written from a reused buffer and the
//! answer framed in place, with no background task per connection — so that the
//! load generator spends as little of the shared cores as it can and the numbers
//! measure the servers. Both protocols go through this same code.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::load::Failure;

/// Read buffer growth step; an answer of either protocol is far smaller.
const READ_CHUNK: usize = 4096;

/// Frames one answer at the start of the bytes read so far: `Ok(None)` while it
/// is incomplete, `Ok(Some((length, meta)))` once whole, an error if malformed.
pub(crate) type FrameFn<M> = fn(&[u8]) -> Result<Option<(usize, M)>, Failure>;

/// A connected socket with its buffers.
pub(crate) struct Conn {
    stream: TcpStream,
    /// The next request; callers fill it, [`Conn::exchange`] sends and clears it.
    pub(crate) request: Vec<u8>,
    input: Vec<u8>,
    /// Bytes of `input` that belong to the answer returned last.
    answered: usize,
}

impl Conn {
    /// Connects with Nagle off (one small request at a time).
    pub(crate) async fn connect(addr: SocketAddr) -> Result<Self, Failure> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| Failure::broken(format!("connect: {}", e.kind())))?;
        let _ = stream.set_nodelay(true);
        Ok(Self {
            stream,
            request: Vec::with_capacity(512),
            input: Vec::with_capacity(READ_CHUNK),
            answered: 0,
        })
    }

    /// Sends `request`, then reads until `frame` finds a whole answer, and returns
    /// the answer's bytes with what `frame` learned about them.
    pub(crate) async fn exchange<M>(&mut self, frame: FrameFn<M>) -> Result<(&[u8], M), Failure> {
        // Bytes after the last answer would be an answer to nothing: a protocol error
        // the next frame reports, so they are kept, not silently dropped.
        self.input.drain(..self.answered);
        self.answered = 0;
        let sent = self.stream.write_all(&self.request).await;
        self.request.clear();
        sent.map_err(|e| Failure::broken(format!("write: {}", e.kind())))?;
        loop {
            if let Some((length, meta)) = frame(&self.input)? {
                self.answered = length;
                return Ok((&self.input[..length], meta));
            }
            self.input.reserve(READ_CHUNK);
            let read = self
                .stream
                .read_buf(&mut self.input)
                .await
                .map_err(|e| Failure::broken(format!("read: {}", e.kind())))?;
            if read == 0 {
                return Err(Failure::broken("connection closed by the server"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;

    /// Answers are lines; the frame is everything up to and including `\n`.
    #[expect(clippy::unnecessary_wraps, reason = "the shape of a FrameFn")]
    fn line(input: &[u8]) -> Result<Option<(usize, ())>, Failure> {
        Ok(input
            .iter()
            .position(|&b| b == b'\n')
            .map(|at| (at + 1, ())))
    }

    #[tokio::test]
    async fn answers_split_across_reads_are_framed_whole() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0_u8; 4];
            for answer in [&b"first\n"[..], b"second\n"] {
                socket.read_exact(&mut request).await.unwrap();
                assert_eq!(&request, b"ping");
                // Two writes with a pause: the client sees a partial answer first.
                let (head, tail) = answer.split_at(2);
                socket.write_all(head).await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                socket.write_all(tail).await.unwrap();
            }
        });
        let mut conn = Conn::connect(addr).await.unwrap();
        for expected in [&b"first\n"[..], b"second\n"] {
            conn.request.extend_from_slice(b"ping");
            let (answer, ()) = conn.exchange(line).await.unwrap();
            assert_eq!(answer, expected);
        }
        server.await.unwrap();
        conn.request.extend_from_slice(b"ping");
        let closed = conn.exchange(line).await.expect_err("the server is gone");
        assert!(closed.broken, "{}", closed.kind);
    }
}
