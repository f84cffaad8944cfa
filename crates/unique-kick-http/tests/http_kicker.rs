//! `HttpKicker` beyond the shared contract: its options, private CAs, the body cap.

use std::sync::Arc;

use unique_core::{KickOutcome, Kicker};
use unique_kick_contract::{ANSWER_DEADLINE, Behaviour, Peer, identity, timed_kick};
use unique_kick_http::rustls::{self, RootCertStore};
use unique_kick_http::{BuildError, HttpKicker};

async fn kick_confirms_over_tls(kicker: HttpKicker) {
    kick_confirms_at(kicker, Peer::start_tls(Behaviour::status(200)).await).await;
}

async fn kick_confirms_at(kicker: HttpKicker, peer: Peer) {
    let (outcome, took) = timed_kick(&kicker, &peer.https_url("/kick?t=1"), ANSWER_DEADLINE).await;
    assert_eq!(outcome, KickOutcome::Confirmed, "took {took:?}");
    let requests = peer.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        (requests[0].method.as_str(), requests[0].target.as_str()),
        ("POST", "/kick?t=1")
    );
}

/// A caller's own TLS config trusting the test CA, offering `alpn`.
fn custom_config(alpn: &[&[u8]]) -> rustls::ClientConfig {
    let mut roots = RootCertStore::empty();
    roots
        .add(identity::ca_certificate())
        .expect("test ca is a valid root");
    let mut config = unique_tls::client_config(roots).expect("ring supports the defaults");
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_added_as_der_confirms_https_kicks() {
    let kicker = HttpKicker::builder()
        .add_root_certificate(identity::ca_certificate())
        .build()
        .expect("valid options");
    kick_confirms_over_tls(kicker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_added_as_pem_confirms_https_kicks() {
    let kicker = HttpKicker::builder()
        .add_root_certificates_pem(identity::ca_pem())
        .build()
        .expect("valid options");
    kick_confirms_over_tls(kicker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_tls_config_is_used_and_its_alpn_replaced() {
    // hyper-rustls panics on a preset ALPN list; the builder must clear it.
    let config = custom_config(&[b"h2"]);
    let kicker = HttpKicker::builder()
        .tls_config(config)
        .build()
        .expect("valid options");
    kick_confirms_over_tls(kicker).await;
}

/// A config offering `h2` and `http/1.1`, against a server that would pick `h2`
/// (and then close, as an HTTP/2 server cannot read HTTP/1.1): the kick still
/// goes over HTTP/1.1, because the kicker offers no ALPN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_tls_config_offering_h2_kicks_over_http1() {
    let kicker = HttpKicker::builder()
        .tls_config(custom_config(&[b"h2", b"http/1.1"]))
        .build()
        .expect("valid options");
    let mut server = identity::server_config();
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    kick_confirms_at(
        kicker,
        Peer::start_tls_with(Behaviour::status(200), server).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_agent_is_sent() {
    let peer = Peer::start(Behaviour::status(204)).await;
    let default = HttpKicker::new();
    let custom = HttpKicker::builder()
        .user_agent("login-service/7")
        .build()
        .expect("valid options");
    for kicker in [&default, &custom] {
        let (outcome, _) = timed_kick(kicker, &peer.http_url("/kick"), ANSWER_DEADLINE).await;
        assert_eq!(outcome, KickOutcome::Confirmed);
    }
    let agents: Vec<_> = peer
        .requests()
        .iter()
        .map(|r| r.header("user-agent").unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        agents,
        [
            concat!("unique-kick-http/", env!("CARGO_PKG_VERSION")),
            "login-service/7"
        ]
    );
}

/// A 200 whose chunked body never ends is confirmed once the cap is read, long
/// before the deadline; an uncapped reader would time out instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_body_is_read_only_up_to_the_cap() {
    let peer = Peer::start(Behaviour::EndlessBody).await;
    let kicker = HttpKicker::builder()
        .max_response_body(16 * 1024)
        .build()
        .expect("valid options");
    let (outcome, took) = timed_kick(&kicker, &peer.http_url("/kick"), ANSWER_DEADLINE).await;
    assert_eq!(outcome, KickOutcome::Confirmed, "took {took:?}");
}

/// Many kicks at once through one kicker all arrive and confirm; the pool never
/// holds more connections than kicks in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_kicks_share_one_pool() {
    const KICKS: usize = 32;
    let peer = Arc::new(Peer::start(Behaviour::status(200)).await);
    let kicker = Arc::new(HttpKicker::new());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..KICKS {
        let (peer, kicker) = (Arc::clone(&peer), Arc::clone(&kicker));
        tasks.spawn(async move {
            timed_kick(&*kicker, &peer.http_url("/kick"), ANSWER_DEADLINE)
                .await
                .0
        });
    }
    while let Some(outcome) = tasks.join_next().await {
        assert_eq!(outcome.expect("kick task"), KickOutcome::Confirmed);
    }
    assert_eq!(peer.requests().len(), KICKS);
    assert!(
        peer.connections() <= KICKS,
        "{} connections",
        peer.connections()
    );
}

/// Sequential kicks to one host ride one connection: each kick hands its
/// connection back before returning, so reuse does not depend on timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_kicks_ride_one_connection() {
    let peer = Peer::start(Behaviour::status(200)).await;
    let kicker = HttpKicker::new();
    for _ in 0..20 {
        let (outcome, _) = timed_kick(&kicker, &peer.http_url("/kick"), ANSWER_DEADLINE).await;
        assert_eq!(outcome, KickOutcome::Confirmed);
    }
    assert_eq!(peer.requests().len(), 20);
    assert_eq!(peer.connections(), 1);
}

/// Clones share the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_share_the_pool() {
    let peer = Peer::start(Behaviour::status(200)).await;
    let kicker = HttpKicker::new();
    let clone = kicker.clone();
    for k in [&kicker, &clone] {
        let (outcome, _) = timed_kick(k, &peer.http_url("/kick"), ANSWER_DEADLINE).await;
        assert_eq!(outcome, KickOutcome::Confirmed);
    }
    assert_eq!(peer.connections(), 1);
}

/// A pooled connection that the server drops as it is reused (request read,
/// connection closed unanswered) is replaced by a fresh one: the kick is sent
/// again and confirms, instead of reporting a connect error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_dropped_on_reuse_is_replaced() {
    let peer = Peer::start(Behaviour::AnswerOnceThenClose).await;
    let kicker = HttpKicker::new();
    for round in 1..=5 {
        let (outcome, took) = timed_kick(&kicker, &peer.http_url("/kick"), ANSWER_DEADLINE).await;
        assert_eq!(
            outcome,
            KickOutcome::Confirmed,
            "round {round}, took {took:?}"
        );
    }
    assert_eq!(peer.connections(), 5, "one fresh connection per round");
    // Rounds 2..=5 each tried the pooled connection first, then a fresh one.
    assert_eq!(peer.requests().len(), 1 + 4 * 2);
}

#[test]
fn the_builder_refuses_bad_options() {
    let bad_agent = HttpKicker::builder().user_agent("bad\nagent").build();
    assert!(
        matches!(bad_agent, Err(BuildError::InvalidUserAgent)),
        "{bad_agent:?}"
    );

    let no_cert = HttpKicker::builder()
        .add_root_certificates_pem("no certificate here")
        .build();
    assert!(
        matches!(no_cert, Err(BuildError::InvalidRootCertificate(_))),
        "{no_cert:?}"
    );

    let garbage_der = HttpKicker::builder()
        .add_root_certificate(vec![0x30, 0x03, 0x01, 0x01, 0xff].into())
        .build();
    assert!(
        matches!(garbage_der, Err(BuildError::InvalidRootCertificate(_))),
        "{garbage_der:?}"
    );

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let custom = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the defaults")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    let conflicting = HttpKicker::builder()
        .tls_config(custom)
        .add_root_certificates_pem(identity::ca_pem())
        .build();
    assert!(
        matches!(conflicting, Err(BuildError::ConflictingTlsOptions)),
        "{conflicting:?}"
    );
}

/// Building needs no runtime, and one kicker serves many runtimes.
#[test]
fn a_kicker_built_outside_a_runtime_kicks_inside_one() {
    let kicker = HttpKicker::new();
    for _ in 0..2 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let peer = Peer::start(Behaviour::status(200)).await;
            let outcome = kicker
                .kick(
                    &peer.http_url("/kick"),
                    &unique_kick_contract::payload(),
                    ANSWER_DEADLINE,
                )
                .await;
            assert_eq!(outcome, KickOutcome::Confirmed);
        });
    }
}
