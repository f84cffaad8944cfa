//! The suite's TLS identity: a private test CA and a leaf certificate for
//! `127.0.0.1` / `localhost` signed by it, generated (with fresh keys) the first
//! time a process asks for either, so nothing checked in can expire or leak.
//!
//! Never trust [`ca_pem`] outside tests.
//!
//! [`ca`] and [`leaf`] are the workspace's one certificate generator: the test PKI of
//! `unique-testsupport` (server and client CAs for the TLS tests) is built from them too.

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
    let ca = ca("unique kicker contract test CA")?;
    let (leaf_cert, leaf_key) = leaf(
        &ca,
        vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    Ok(Identity {
        ca_pem: ca.pem(),
        ca_der: ca.der().clone(),
        leaf_der: leaf_cert.der().clone(),
        leaf_key: PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
    })
}

/// A self-signed test CA named `name`, with a fresh key.
///
/// # Errors
///
/// When rcgen refuses the parameters (it does not for these).
pub fn ca(name: &str) -> Result<CertifiedIssuer<'static, KeyPair>, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate()?)
}

/// A leaf signed by `issuer` for `names` (a name that parses as an IP address becomes an IP
/// SAN) with one extended key usage, and its fresh key.
///
/// # Errors
///
/// When rcgen refuses a name.
pub fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> Result<(rcgen::Certificate, KeyPair), rcgen::Error> {
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "unique test peer");
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert, key))
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
