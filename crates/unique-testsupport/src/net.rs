//! Raw HTTP/1.1 over loopback sockets, for tests of connection limits and timeouts that a
//! well-behaved HTTP client cannot express (half-sent heads, a second client address).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// How long [`closed_by_peer`] and [`answer`] wait before failing the test: far above any
/// timeout a test sets, so only a server that never acts fails.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A connection to `to` from the local address `from` (any `127.x.y.z` is local on Linux:
/// `127.0.0.2` plays a second client machine).
///
/// # Panics
///
/// If the connection cannot be made.
pub async fn connect_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    let socket = if from.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .expect("a client socket");
    socket
        .bind(SocketAddr::new(from, 0))
        .unwrap_or_else(|e| panic!("cannot bind a client socket to {from}: {e}"));
    socket
        .connect(to)
        .await
        .unwrap_or_else(|e| panic!("cannot connect from {from} to {to}: {e}"))
}

/// Reads until the peer closes the connection (end of stream or reset) and returns what it sent
/// before.
///
/// # Panics
///
/// If the peer keeps the connection open for [`PATIENCE`].
pub async fn closed_by_peer(stream: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        let mut buf = [0_u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the peer kept the connection open for {PATIENCE:?}; it sent {:?}",
        String::from_utf8_lossy(&received)
    );
    received
}

/// Writes `request` and reads one answer (head and a `Content-Length` body), returned as text;
/// `None` when the peer closed the connection (or reset it) first.
///
/// # Panics
///
/// If no answer and no close come within [`PATIENCE`], or the answer is not HTTP/1.1 with a
/// `Content-Length`.
pub async fn answer(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    request: &[u8],
) -> Option<String> {
    if stream.write_all(request).await.is_err() {
        return None;
    }
    tokio::time::timeout(PATIENCE, read_answer(stream))
        .await
        .unwrap_or_else(|_| panic!("no answer within {PATIENCE:?}"))
}

/// As [`answer`] over TLS: connects to `to` (the certificate must name its IP address) with
/// `config`; `None` also when the handshake fails or the server refuses the client.
///
/// # Panics
///
/// As [`answer`], and if the TCP connection cannot be made.
pub async fn tls_answer(
    to: SocketAddr,
    config: rustls::ClientConfig,
    request: &[u8],
) -> Option<String> {
    let tcp = TcpStream::connect(to)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {to}: {e}"));
    let name = rustls::pki_types::ServerName::IpAddress(to.ip().into());
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .ok()?;
    answer(&mut tls, request).await
}

async fn read_answer(stream: &mut (impl AsyncRead + Unpin)) -> Option<String> {
    let mut received = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        if let Some(end) = find(&received, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .unwrap_or_else(|| panic!("no content-length in {head:?}"))
                .trim()
                .parse()
                .expect("a numeric content-length");
            if received.len() >= end + 4 + length {
                received.truncate(end + 4 + length);
                let text = String::from_utf8(received).expect("a text answer");
                assert!(text.starts_with("HTTP/1.1 "), "{text}");
                return Some(text);
            }
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => received.extend_from_slice(&buf[..n]),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
