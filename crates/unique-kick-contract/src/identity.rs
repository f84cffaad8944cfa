//! The suite's TLS identity: a private test CA and a leaf certificate for
//! `127.0.0.1` / `localhost` signed by it, generated (with fresh keys) the first
//! time a process asks for either, so nothing checked in can expire or leak.
//!
//! Never trust [`ca_pem`] outside tests.

use std::sync::{Arc, OnceLock};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

/// One process's CA and leaf.
struct Identity {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    leaf_der: CertificateDer<'static>,
    leaf_key: PrivatePkcs8KeyDer<'static>,
}

fn identity() -> &'static Identity {
    static IDENTITY: OnceLock<Identity> = OnceLock::new();
    IDENTITY.get_or_init(|| generate().expect("rcgen generates the test identity"))
}

fn generate() -> Result<Identity, rcgen::Error> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "unique kicker contract test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;

    // A SAN that parses as an IP address becomes an IP SAN.
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    leaf.distinguished_name
        .push(DnType::CommonName, "unique kicker contract peer");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_key = KeyPair::generate()?;
    let leaf_cert = leaf.signed_by(&leaf_key, &ca)?;

    Ok(Identity {
        ca_pem: ca.pem(),
        ca_der: ca.der().clone(),
        leaf_der: leaf_cert.der().clone(),
        leaf_key: PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
    })
}

/// The private test CA (PEM). A kicker that trusts it accepts the TLS peers of
/// [`Peer::start_tls`](crate::Peer::start_tls).
///
/// # Panics
///
/// If the identity cannot be generated (rcgen refusing its fixed parameters).
pub fn ca_pem() -> &'static str {
    &identity().ca_pem
}

/// The CA as a DER certificate, e.g. for a builder's `add_root_certificate`.
///
/// # Panics
///
/// As [`ca_pem`].
pub fn ca_certificate() -> CertificateDer<'static> {
    identity().ca_der.clone()
}

/// A server configuration presenting the leaf (with the CA in its chain), on the ring
/// provider and rustls' safe default protocol versions, offering no ALPN. Tests that
/// need a TLS server of their own start from it (and may set its ALPN list).
///
/// # Panics
///
/// As [`ca_pem`].
pub fn server_config() -> ServerConfig {
    let identity = identity();
    let chain = vec![identity.leaf_der.clone(), identity.ca_der.clone()];
    let key = PrivateKeyDer::Pkcs8(identity.leaf_key.clone_key());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("the generated identity is consistent")
}

pub(crate) fn acceptor(config: ServerConfig) -> TlsAcceptor {
    TlsAcceptor::from(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn the_pem_and_der_forms_are_the_same_ca() {
        let from_pem = CertificateDer::from_pem_slice(ca_pem().as_bytes()).unwrap();
        assert_eq!(from_pem, ca_certificate());
        assert_ne!(identity().leaf_der, ca_certificate());
    }
}
