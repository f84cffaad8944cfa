//! The suite's TLS identity: a private test CA and a leaf certificate for
//! `127.0.0.1` / `localhost`, valid until 2126.
//!
//! Test-only material: the leaf's private key is public by being in this crate.
//! Never trust [`CA_PEM`] outside tests.

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The private test CA (PEM). A kicker that trusts it accepts the TLS peers of
/// [`Peer::start_tls`](super::Peer::start_tls).
pub const CA_PEM: &str = include_str!("certs/ca.pem");

const LEAF_PEM: &str = include_str!("certs/leaf.pem");
const LEAF_KEY_PEM: &str = include_str!("certs/leaf.key");

/// The CA as a DER certificate, e.g. for
/// [`HttpKickerBuilder::add_root_certificate`](crate::HttpKickerBuilder::add_root_certificate).
///
/// # Panics
///
/// Never: the PEM is a constant that the crate's own tests parse.
pub fn ca_certificate() -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(CA_PEM.as_bytes()).expect("built-in test ca parses")
}

pub(crate) fn acceptor() -> TlsAcceptor {
    let chain = vec![
        CertificateDer::from_pem_slice(LEAF_PEM.as_bytes()).expect("built-in leaf parses"),
        ca_certificate(),
    ];
    let key = PrivateKeyDer::from_pem_slice(LEAF_KEY_PEM.as_bytes()).expect("built-in key parses");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("built-in identity is consistent");
    TlsAcceptor::from(Arc::new(config))
}
