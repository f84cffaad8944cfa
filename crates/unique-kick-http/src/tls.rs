//! The rustls client configuration: ring, webpki roots, optional private CAs.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

use crate::builder::BuildError;

/// The TLS settings a builder collected.
#[derive(Debug, Default)]
pub(crate) struct TlsOptions {
    /// Extra trust anchors added to the webpki roots.
    pub(crate) extra_roots: Vec<CertificateDer<'static>>,
    /// PEM bundles of extra trust anchors, parsed at build time.
    pub(crate) extra_roots_pem: Vec<Vec<u8>>,
    /// A complete replacement configuration.
    pub(crate) custom: Option<ClientConfig>,
}

impl TlsOptions {
    /// The client configuration the connector uses.
    ///
    /// The provider is always named explicitly (ring) rather than taken from the
    /// process default: a binary that also links aws-lc-rs (the AWS SDK does) has
    /// no unambiguous default, and rustls would panic at first use.
    pub(crate) fn into_client_config(self) -> Result<ClientConfig, BuildError> {
        if let Some(mut custom) = self.custom {
            if !self.extra_roots.is_empty() || !self.extra_roots_pem.is_empty() {
                return Err(BuildError::ConflictingTlsOptions);
            }
            // hyper-rustls sets ALPN itself from the enabled HTTP versions (here only
            // HTTP/1.1) and refuses a config that already has some.
            custom.alpn_protocols.clear();
            return Ok(custom);
        }

        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for cert in self.extra_roots {
            roots
                .add(cert)
                .map_err(|e| BuildError::InvalidRootCertificate(e.to_string()))?;
        }
        for pem in &self.extra_roots_pem {
            let mut found = false;
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| BuildError::InvalidRootCertificate(e.to_string()))?;
                roots
                    .add(cert)
                    .map_err(|e| BuildError::InvalidRootCertificate(e.to_string()))?;
                found = true;
            }
            if !found {
                return Err(BuildError::InvalidRootCertificate(
                    "no certificate in pem input".to_owned(),
                ));
            }
        }

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(BuildError::Tls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(config)
    }
}
