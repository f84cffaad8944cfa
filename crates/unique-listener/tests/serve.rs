//! The accept loop over real loopback sockets: every guard of `ServeOptions`, and TLS.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use unique_listener::{RequestBody, ServeOptions};
use unique_testsupport::net::{answer, closed_by_peer, connect_from, tls_answer};
use unique_testsupport::pki::TestPki;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const LONG: Duration = Duration::from_mins(1);
const SHORT: Duration = Duration::from_millis(300);

const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: t\r\n\r\n";
const HALF_SENT: &[u8] = b"POST / HTTP/1.1\r\nhost: t\r\n";

/// Echoes the request body (`200`), or answers `400` when it cannot be read.
#[derive(Clone)]
struct Echo;

impl tower_service::Service<Request<RequestBody>> for Echo {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<RequestBody>) -> Self::Future {
        Box::pin(async move {
            let Ok(body) = request.into_body().collect().await else {
                let mut response = Response::new(Full::from("unreadable"));
                *response.status_mut() = StatusCode::BAD_REQUEST;
                return Ok(response);
            };
            Ok(Response::new(Full::new(body.to_bytes())))
        })
    }
}

/// Options with every timeout long; a test shortens the one it checks.
fn patient() -> ServeOptions {
    ServeOptions::default()
        .header_timeout(LONG)
        .idle_timeout(LONG)
        .body_timeout(LONG)
}

/// Must run inside the runtime: `bind` registers the socket with it.
fn start(options: ServeOptions) -> SocketAddr {
    let listener = unique_listener::bind((LOCAL, 0).into(), 64).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(unique_listener::serve(
        listener,
        Echo,
        options,
        std::future::pending(),
    ));
    addr
}

/// A connection from `from` that the server has admitted (it answered a request on it).
async fn admitted(from: IpAddr, addr: SocketAddr) -> TcpStream {
    let mut stream = connect_from(from, addr).await;
    let answered = answer(&mut stream, GET)
        .await
        .expect("an admitted connection");
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    stream
}

/// A connection from `from` the server closes without reading a request.
async fn assert_refused(from: IpAddr, addr: SocketAddr) {
    let mut stream = connect_from(from, addr).await;
    let _ = stream.write_all(GET).await;
    assert_eq!(closed_by_peer(&mut stream).await, b"");
}

#[tokio::test]
async fn a_half_sent_head_is_closed_by_the_header_timeout() {
    let addr = start(patient().header_timeout(SHORT));
    let mut stream = connect_from(LOCAL, addr).await;
    stream.write_all(HALF_SENT).await.unwrap();
    assert_eq!(closed_by_peer(&mut stream).await, b"");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_by_the_idle_timeout() {
    let addr = start(patient().idle_timeout(SHORT));
    let mut stream = admitted(LOCAL, addr).await;
    // The header timeout is a minute: only the idle timeout closes it.
    assert_eq!(closed_by_peer(&mut stream).await, b"");
}

#[tokio::test]
async fn a_slow_body_is_answered_408_and_the_connection_closed() {
    let addr = start(patient().body_timeout(SHORT));
    let mut stream = connect_from(LOCAL, addr).await;
    stream
        .write_all(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 10\r\n\r\nabc")
        .await
        .unwrap();
    let answered = String::from_utf8(closed_by_peer(&mut stream).await).unwrap();
    assert!(answered.starts_with("HTTP/1.1 408"), "{answered}");
    assert!(
        answered.to_ascii_lowercase().contains("connection: close"),
        "{answered}"
    );

    // A body that arrives in time is served as usual on the same server.
    let mut stream = connect_from(LOCAL, addr).await;
    let answered = answer(
        &mut stream,
        b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 3\r\n\r\nabc",
    )
    .await
    .unwrap();
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    assert!(answered.ends_with("\r\n\r\nabc"), "{answered}");
}

#[tokio::test]
async fn past_the_per_address_cap_connections_are_closed_and_others_are_served() {
    let addr = start(patient().max_connections_per_ip(2));
    let _first = admitted(OTHER, addr).await;
    let _second = admitted(OTHER, addr).await;
    assert_refused(OTHER, addr).await;
    // Another address is not affected.
    let _local = admitted(LOCAL, addr).await;
}

#[tokio::test]
async fn past_the_total_cap_connections_are_closed_until_one_ends() {
    let addr = start(patient().max_connections(2));
    let first = admitted(LOCAL, addr).await;
    let _second = admitted(OTHER, addr).await;
    assert_refused(LOCAL, addr).await;
    assert_refused(OTHER, addr).await;

    drop(first);
    // The server releases the place once it has seen the close; until then it refuses.
    let mut attempts = 0;
    let _third = loop {
        attempts += 1;
        let mut stream = connect_from(LOCAL, addr).await;
        if let Some(answered) = answer(&mut stream, GET).await {
            assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
            break stream;
        }
        assert!(
            attempts < 200,
            "the closed connection's place was never released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
}

// TLS --------------------------------------------------------------------------------------

fn tls_options(pki: &TestPki, mutual: bool) -> ServeOptions {
    let config = unique_tls::server_config_from_pem(
        pki.server_chain.as_bytes(),
        pki.server_key.as_bytes(),
        mutual.then_some(pki.client_ca.as_bytes()),
    )
    .unwrap();
    patient().tls(Arc::new(config))
}

/// One GET over TLS, with the client leaf when `with_certificate`: the answer, or `None` when
/// the handshake or the exchange failed.
async fn tls_get(addr: SocketAddr, pki: &TestPki, with_certificate: bool) -> Option<String> {
    tls_answer(addr, pki.client_config(with_certificate), GET).await
}

#[tokio::test]
async fn tls_serves_a_client_that_trusts_the_ca() {
    let pki = TestPki::generate();
    let addr = start(tls_options(&pki, false));
    let answered = tls_get(addr, &pki, false).await.unwrap();
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");

    // Plain HTTP on a TLS port gets no answer.
    let mut plain = connect_from(LOCAL, addr).await;
    assert_eq!(answer(&mut plain, GET).await, None);
}

#[tokio::test]
async fn mutual_tls_refuses_a_client_without_a_certificate() {
    let pki = TestPki::generate();
    let addr = start(tls_options(&pki, true));
    assert_eq!(tls_get(addr, &pki, false).await, None);
    let answered = tls_get(addr, &pki, true).await.unwrap();
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
}

#[tokio::test]
async fn a_stalled_tls_handshake_is_closed_by_the_header_timeout() {
    let pki = TestPki::generate();
    let addr = start(tls_options(&pki, false).header_timeout(SHORT));
    let mut stream = connect_from(LOCAL, addr).await;
    // Never starts the handshake.
    assert_eq!(closed_by_peer(&mut stream).await, b"");
}
