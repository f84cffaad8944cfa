//! A throwaway PKI for TLS tests: a server CA with a leaf for `127.0.0.1` / `localhost`, and a
//! separate client CA with one client leaf, generated with fresh keys on every call so nothing
//! checked in can expire or leak. Built with the kicker suite's generator
//! (`unique_kick_contract::identity::{ca, leaf}`), the workspace's one.

use std::sync::Arc;

use rcgen::ExtendedKeyUsagePurpose;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use unique_kick_contract::identity::{ca, leaf};

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

    /// The server CA as the only root, for a client of a server presenting
    /// [`server_chain`](Self::server_chain).
    ///
    /// # Panics
    ///
    /// Never for a generated PKI.
    pub fn server_roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.server_ca.as_bytes()).expect("a PEM CA"))
            .expect("a usable CA");
        roots
    }

    /// A client configuration (ring provider, safe default versions) trusting the server CA and,
    /// when `with_certificate`, presenting the client leaf for mutual TLS.
    ///
    /// # Panics
    ///
    /// Never for a generated PKI.
    pub fn client_config(&self, with_certificate: bool) -> rustls::ClientConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_root_certificates(self.server_roots());
        if !with_certificate {
            return builder.with_no_client_auth();
        }
        let chain = vec![CertificateDer::from_pem_slice(self.client_cert.as_bytes()).expect("PEM")];
        let key = PrivateKeyDer::from_pem_slice(self.client_key.as_bytes()).expect("a PEM key");
        builder
            .with_client_auth_cert(chain, key)
            .expect("the client leaf matches its key")
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
            server_chain: format!("{}{}", server_leaf.pem(), server_ca.pem()),
            server_ca: server_ca.pem(),
            server_key: server_key.serialize_pem(),
            client_ca: client_ca.pem(),
            client_cert: client_cert.pem(),
            client_key: client_key.serialize_pem(),
        })
    }
}
