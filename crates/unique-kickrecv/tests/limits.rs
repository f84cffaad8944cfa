//! The standalone listener's guards (from `unique-listener`): a half-sent head is closed by the
//! header timeout, and one address cannot hold more connections than its cap.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use unique_client::{KickHandler, KickOptions, Sessions};
use unique_core::Key;
use unique_kickrecv::{ServeOptions, serve_with};
use unique_testsupport::net::{answer, closed_by_peer, connect_from};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A kick receiver for a node without sessions; must run inside the runtime.
fn start(options: ServeOptions) -> SocketAddr {
    let sessions = Sessions::new();
    let handler = KickHandler::new(
        move |key: &Key| sessions.generation(key),
        |_: Key, _| async {},
        KickOptions::default(),
    );
    let listener = unique_listener::bind((LOCAL, 0).into(), 64).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_with(
        listener,
        handler,
        options,
        std::future::pending(),
    ));
    addr
}

fn kick() -> Vec<u8> {
    let body = r#"{"project":"p","env":"e","uid":1,"gen":2}"#;
    format!(
        "POST /kick HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn a_half_sent_head_is_closed_by_the_header_timeout() {
    let addr = start(ServeOptions::default().header_timeout(Duration::from_millis(300)));
    let mut stream = connect_from(LOCAL, addr).await;
    stream
        .write_all(b"POST /kick HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    assert_eq!(closed_by_peer(&mut stream).await, b"");
}

#[tokio::test]
async fn past_the_per_address_cap_a_connection_is_closed_unread() {
    let addr = start(ServeOptions::default().max_connections_per_ip(1));
    let mut first = connect_from(OTHER, addr).await;
    let acked = answer(&mut first, &kick()).await.unwrap();
    assert!(acked.starts_with("HTTP/1.1 200"), "{acked}");

    let mut second = connect_from(OTHER, addr).await;
    assert_eq!(answer(&mut second, &kick()).await, None);
    assert_eq!(closed_by_peer(&mut second).await, b"");

    let mut local = connect_from(LOCAL, addr).await;
    let acked = answer(&mut local, &kick()).await.unwrap();
    assert!(acked.starts_with("HTTP/1.1 200"), "{acked}");
}
