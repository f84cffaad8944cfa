//! The server's guards with the arbiter behind them: a flood of half-sent requests from one
//! address does not keep another address from claiming, and TLS serves the real client.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use unique_arbiter_http::{ArbiterService, ServeOptions, serve_with};
use unique_client::Transport;
use unique_client_http::HttpTransport;
use unique_core::{Arbiter, ClaimInput, Key, Owner};
use unique_store_memory::MemoryStore;
use unique_testsupport::net::{answer, closed_by_peer, connect_from, tls_answer};
use unique_testsupport::pki::TestPki;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const FLOODER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// Must run inside the runtime: `bind` registers the socket with it.
fn start(options: ServeOptions) -> SocketAddr {
    let listener = unique_listener::bind((LOCAL, 0).into(), 64).unwrap();
    let addr = listener.local_addr().unwrap();
    let service = ArbiterService::new(Arbiter::new(MemoryStore::new()));
    tokio::spawn(serve_with(
        listener,
        service,
        options,
        std::future::pending(),
    ));
    addr
}

fn claim_request(uid: i64) -> Vec<u8> {
    let body = format!(
        r#"{{"project":"flood","env":"test","uid":{uid},"owner":{{"endpoint":"http://127.0.0.1:9/kick"}},"claim_id":"c{uid}"}}"#
    );
    format!(
        "POST /v1/claim HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn a_flood_of_half_sent_requests_from_one_address_does_not_stop_another() {
    const CAP: usize = 4;
    // Long enough that the flood's admitted connections are surely still open while the
    // connections past the cap are checked; the test waits for them to close at the end.
    let header_timeout = Duration::from_secs(1);
    let addr = start(
        ServeOptions::default()
            .max_connections_per_ip(CAP)
            .header_timeout(header_timeout),
    );
    let half_sent = b"POST /v1/claim HTTP/1.1\r\nHost: x\r\n";

    let mut admitted = Vec::new();
    for _ in 0..CAP {
        let mut stream = connect_from(FLOODER, addr).await;
        stream.write_all(half_sent).await.unwrap();
        admitted.push(stream);
    }
    // Past the cap: closed at once, nothing read, nothing answered; the admitted ones, opened
    // earlier, are still waiting for their header timeout.
    for _ in 0..CAP {
        let mut stream = connect_from(FLOODER, addr).await;
        let _ = stream.write_all(half_sent).await;
        assert_eq!(closed_by_peer(&mut stream).await, b"");
    }
    for stream in &admitted {
        assert!(
            still_open(stream),
            "an admitted flood connection was closed early"
        );
    }

    // Meanwhile another address is served as usual, on one keep-alive connection.
    let mut client = connect_from(LOCAL, addr).await;
    let health = answer(&mut client, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("ok"),
        "{health}"
    );
    for uid in 1..=3 {
        let claimed = answer(&mut client, &claim_request(uid)).await.unwrap();
        assert!(claimed.starts_with("HTTP/1.1 200"), "{claimed}");
        assert!(claimed.contains(r#""gen":1"#), "{claimed}");
    }

    // The flood's admitted connections are closed by the header timeout, unanswered.
    for mut stream in admitted {
        assert_eq!(closed_by_peer(&mut stream).await, b"");
    }
    // And the flooder's address is admitted again.
    let mut again = connect_from(FLOODER, addr).await;
    let health = answer(&mut again, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(health.unwrap().starts_with("HTTP/1.1 200"));
}

/// Whether the peer has neither closed nor reset `stream` (nothing to read, no end of stream).
fn still_open(stream: &TcpStream) -> bool {
    let mut buf = [0_u8; 1];
    matches!(stream.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[tokio::test]
async fn over_tls_the_real_client_claims_and_reads_back() {
    let pki = TestPki::generate();
    let config = unique_tls::server_config_from_pem(
        pki.server_chain.as_bytes(),
        pki.server_key.as_bytes(),
        None,
    )
    .unwrap();
    let addr = start(ServeOptions::default().tls(Arc::new(config)));

    let client_config = unique_tls::client_config(pki.server_roots()).unwrap();
    let transport = HttpTransport::builder(format!("https://{addr}"))
        .tls_config(client_config.clone())
        .build()
        .unwrap();
    let key = Key::new("tls", "test", 7);
    let claimed = transport
        .claim(&ClaimInput {
            key: key.clone(),
            owner: Owner::new("eu", "c1", "https://127.0.0.1:9/kick"),
            claim_id: "tls-claim".into(),
        })
        .await
        .unwrap();
    assert_eq!(claimed.generation, 1);
    let current = transport.current(&key).await.unwrap();
    assert_eq!(current.generation, 1);

    // /healthz over the same TLS port, and plain HTTP there gets no answer.
    let health = tls_answer(
        addr,
        client_config,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
    )
    .await
    .unwrap();
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("ok"),
        "{health}"
    );
    let mut plain = connect_from(LOCAL, addr).await;
    assert_eq!(
        answer(&mut plain, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await,
        None
    );
}
