//! A throwaway PKI for TLS tests: a server CA with a leaf for `127.0.0.1` / `localhost`, and a
//! separate client CA with one client leaf, generated with fresh keys on every call so nothing
//! checked in can expire or leak.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// PEM-encoded certificates and keys; never trust them outside tests.
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The CA that signed the server leaf (what a client trusts).
    pub server_ca: String,
    /// The server leaf followed by its CA: the chain a server presents.
    pub server_chain: String,
    /// The server leaf's private key (PKCS#8).
    pub server_key: String,
    /// The CA that signed the client leaf (what a mutual-TLS server trusts).
    pub client_ca: String,
    /// The client leaf (a certificate chain of one).
    pub client_cert: String,
    /// The client leaf's private key (PKCS#8).
    pub client_key: String,
}

impl TestPki {
    /// Generates a fresh PKI.
    ///
    /// # Panics
    ///
    /// If rcgen refuses its fixed parameters (it does not).
    pub fn generate() -> Self {
        Self::try_generate().expect("rcgen generates the test PKI")
    }

    fn try_generate() -> Result<Self, rcgen::Error> {
        let server_ca = ca("unique test server CA")?;
        let (server_leaf, server_key) = leaf(
            &server_ca,
            vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let client_ca = ca("unique test client CA")?;
        let (client_cert, client_key) = leaf(
            &client_ca,
            vec!["client.test".to_owned()],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        Ok(Self {
            server_chain: format!("{server_leaf}{}", server_ca.pem()),
            server_ca: server_ca.pem(),
            server_key,
            client_ca: client_ca.pem(),
            client_cert,
            client_key,
        })
    }
}

fn ca(name: &str) -> Result<CertifiedIssuer<'static, KeyPair>, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate()?)
}

/// A leaf signed by `issuer` for `names` (a name that parses as an IP address becomes an IP
/// SAN): its PEM certificate and PEM key.
fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> Result<(String, String), rcgen::Error> {
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "unique test peer");
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}
