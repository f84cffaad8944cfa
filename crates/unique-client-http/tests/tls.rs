//! HttpTransport over TLS against a real loopback TLS server (the kicker contract's
//! peer and its test identity, generated at test time).

use unique_client::Transport;
use unique_client_http::HttpTransport;
use unique_core::Key;
use unique_kick_contract::{Behaviour, Peer, identity};

/// A peer answering every request `200 {"released":true}`.
fn released() -> Behaviour {
    Behaviour::Respond {
        status: 200,
        headers: vec![("content-type".to_owned(), "application/json".to_owned())],
        body: br#"{"released":true}"#.to_vec(),
    }
}

/// A caller's own TLS config trusting the test CA, offering `h2` and `http/1.1`.
fn config_offering_h2() -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(identity::ca_certificate())
        .expect("test ca is a valid root");
    let mut config = unique_tls::client_config(roots).expect("ring supports the defaults");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// The server would pick `h2` if offered (and then close, as an HTTP/2 server cannot
/// read HTTP/1.1): the transport offers no ALPN and its call goes over HTTP/1.1.
#[tokio::test]
async fn a_tls_config_offering_h2_gives_a_working_http1_transport() {
    let mut server = identity::server_config();
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let peer = Peer::start_tls_with(released(), server).await;
    let transport = HttpTransport::builder(peer.https_url(""))
        .tls_config(config_offering_h2())
        .build()
        .expect("a caller's config with an ALPN list builds");

    let released = transport.release(&Key::new("game", "prod", 42), 3).await;

    assert!(released.expect("the release is answered over TLS"));
    let requests = peer.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        (requests[0].method.as_str(), requests[0].target.as_str()),
        ("POST", "/v1/release")
    );
}

/// The default config trusts the webpki roots only, so the private test CA is refused.
#[tokio::test]
async fn the_default_tls_config_refuses_a_private_ca() {
    let peer = Peer::start_tls(released()).await;
    let transport = HttpTransport::new(&peer.https_url("")).expect("valid base url");

    let err = transport
        .release(&Key::new("game", "prod", 42), 3)
        .await
        .unwrap_err();

    assert!(err.is_unavailable(), "{err}");
    assert!(
        peer.requests().is_empty(),
        "a request crossed an untrusted tls session"
    );
}
