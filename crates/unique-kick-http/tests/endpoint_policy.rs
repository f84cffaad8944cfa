//! The kick-endpoint policy against real sockets, on loopback only: a refused
//! endpoint is `connect-error` and its listener accepts nothing, while an allowed
//! one is still kicked. (Refusals of non-loopback addresses are unit tests of the
//! policy; no test here sends anything beyond loopback.)

use std::net::{Ipv4Addr, SocketAddr};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use unique_core::{KickDetail, KickOutcome, Kicker};
use unique_kick_contract::{ANSWER_DEADLINE, Behaviour, Peer, timed_kick};
use unique_kick_http::{EndpointPolicy, EndpointRule, HttpKicker};

/// A loopback listener that reports the peer address of every connection it accepts.
struct Listener {
    addr: SocketAddr,
    accepted: mpsc::UnboundedReceiver<SocketAddr>,
}

impl Listener {
    async fn start(ip: Ipv4Addr) -> Self {
        let listener = TcpListener::bind((ip, 0))
            .await
            .unwrap_or_else(|e| panic!("bind {ip}:0 (the whole of 127.0.0.0/8 is loopback): {e}"));
        let addr = listener.local_addr().expect("bound address");
        let (tx, accepted) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                drop(stream);
                if tx.send(peer).is_err() {
                    break;
                }
            }
        });
        Self { addr, accepted }
    }

    /// Asserts that no connection reached the listener so far. A probe connection
    /// must be the first one it accepts: the accept queue is first-in first-out,
    /// and a kick's connection would have been established before the kick returned.
    async fn assert_accepted_nothing(mut self) {
        let probe = TcpStream::connect(self.addr).await.expect("probe connects");
        let first = self.accepted.recv().await.expect("the listener is running");
        assert_eq!(
            first,
            probe.local_addr().expect("probe address"),
            "the listener accepted a connection before the probe"
        );
    }
}

fn rules(texts: &[&str]) -> Vec<EndpointRule> {
    texts
        .iter()
        .map(|t| t.parse().expect("a valid rule"))
        .collect()
}

fn kicker(policy: EndpointPolicy) -> HttpKicker {
    HttpKicker::builder()
        .endpoint_policy(policy)
        .build()
        .expect("valid options")
}

async fn kick(kicker: &HttpKicker, endpoint: &str) -> KickOutcome {
    timed_kick(kicker, endpoint, ANSWER_DEADLINE).await.0
}

const CONNECT_ERROR: KickOutcome = KickOutcome::Failed(KickDetail::ConnectError);

/// Asserts a kick to `http://HOST:port/kick` is a connect error for every host.
async fn assert_connect_errors(kicker: &HttpKicker, hosts: &[&str], port: u16) {
    for host in hosts {
        let url = format!("http://{host}:{port}/kick?token=t");
        assert_eq!(kick(kicker, &url).await, CONNECT_ERROR, "{host}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_address_is_a_connect_error_and_never_connected_to() {
    let kicker = kicker(EndpointPolicy::new().deny(rules(&["127.0.0.2/32"])));
    let denied = Listener::start(Ipv4Addr::new(127, 0, 0, 2)).await;
    let allowed = Peer::start(Behaviour::status(200)).await;

    let url = format!("http://{}/kick", denied.addr);
    assert_eq!(kick(&kicker, &url).await, CONNECT_ERROR);
    // The IPv4-mapped form of the same address is the same address.
    let mapped = format!("http://[::ffff:127.0.0.2]:{}/kick", denied.addr.port());
    assert_eq!(kick(&kicker, &mapped).await, CONNECT_ERROR);
    assert!(kicker.check_endpoint(&url).is_err());
    denied.assert_accepted_nothing().await;

    assert_eq!(
        kick(&kicker, &allowed.http_url("/kick")).await,
        KickOutcome::Confirmed
    );
    assert_eq!(allowed.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_host_name_is_a_connect_error_and_never_connected_to() {
    let listener = Listener::start(Ipv4Addr::LOCALHOST).await;
    let port = listener.addr.port();
    let kicker = kicker(EndpointPolicy::new().deny(rules(&["localhost"])));

    let hosts = ["localhost", "LocalHost", "localhost."];
    assert_connect_errors(&kicker, &hosts, port).await;
    for host in hosts {
        let url = format!("http://{host}:{port}/kick");
        assert!(kicker.check_endpoint(&url).is_err(), "{host}");
    }
    listener.assert_accepted_nothing().await;
}

/// `localhost` is allowed by name but resolves only to denied addresses: the
/// addresses connected to decide, so nothing is connected to. The same kick
/// without the CIDR rules reaches the receiver through the same name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_name_resolving_to_denied_addresses_is_never_connected_to() {
    let listener = Listener::start(Ipv4Addr::LOCALHOST).await;
    let url = format!("http://localhost:{}/kick", listener.addr.port());
    let kicker = kicker(
        EndpointPolicy::new()
            .allow(rules(&["localhost"]))
            .deny(rules(&["127.0.0.0/8", "::1"])),
    );

    // No lookup at claim time: the name alone is allowed.
    assert_eq!(kicker.check_endpoint(&url), Ok(()));
    assert_eq!(kick(&kicker, &url).await, CONNECT_ERROR);
    listener.assert_accepted_nothing().await;

    let peer = Peer::start(Behaviour::status(204)).await;
    let by_name = format!("http://localhost:{}/kick", peer.addr().port());
    let allowed = self::kicker(EndpointPolicy::new().allow(rules(&["localhost"])));
    assert_eq!(kick(&allowed, &by_name).await, KickOutcome::Confirmed);
    assert_eq!(peer.requests().len(), 1);
}

/// An allow list that does not hold loopback refuses loopback literals and names
/// alike, before any connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_list_refuses_what_it_does_not_hold() {
    let listener = Listener::start(Ipv4Addr::LOCALHOST).await;
    let port = listener.addr.port();
    let kicker = kicker(EndpointPolicy::new().allow(rules(&["10.0.0.0/8"])));
    assert_connect_errors(&kicker, &["127.0.0.1", "localhost"], port).await;
    assert!(
        kicker
            .check_endpoint(&format!("http://127.0.0.1:{port}/"))
            .is_err()
    );
    listener.assert_accepted_nothing().await;
}
