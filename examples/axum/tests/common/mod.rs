//! Serving a router on loopback, and one bare HTTP/1.1 request to it, so the tests see
//! exactly what the router answers.

use std::fmt::Write as _;
use std::net::SocketAddr;

use axum::Router;
use tokio::net::{TcpListener, TcpStream};

/// Serves `app` on `listener` until the test ends; returns its address.
pub(crate) fn serve(listener: TcpListener, app: Router) -> SocketAddr {
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// Sends one request and returns the answer's status and body.
pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut raw = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        let _ = write!(raw, "{name}: {value}\r\n");
    }
    let _ = write!(raw, "\r\n{body}");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let answer = unique_testsupport::net::answer(&mut stream, raw.as_bytes())
        .await
        .expect("an answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
    (head[9..12].parse().unwrap(), body.to_owned())
}

/// POSTs `body` (JSON) to `path` of the server at `base` (`http://ADDR`); its status and body.
#[allow(dead_code)] // the game test uses it, the kick test does not
pub(crate) async fn post(base: &str, path: &str, body: &str) -> (u16, String) {
    let addr = base.strip_prefix("http://").unwrap().parse().unwrap();
    request(
        addr,
        "POST",
        path,
        &[("content-type", "application/json")],
        body,
    )
    .await
}
