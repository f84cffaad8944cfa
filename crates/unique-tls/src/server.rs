//! The TLS server configuration of unique's servers, from PEM files or PEM bytes.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

/// Why a server configuration could not be built. The message names the file (or the part of
/// the configuration) at fault and never contains key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerConfigError {
    /// A PEM file could not be read.
    #[error("cannot read {what} {}: {source}", path.display())]
    Read {
        /// Which file: `certificate chain`, `private key` or `client CA`.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A PEM input is malformed or holds no item of the expected kind.
    #[error("{what}: {source}")]
    Pem {
        /// Which input: `certificate chain`, `private key` or `client CA`.
        what: &'static str,
        /// What the PEM parser said (`no items found` for an input without one).
        source: pem::Error,
    },
    /// The key does not match the certificate, or rustls refused the chain or the client CAs.
    #[error("{what}: {source}")]
    Rustls {
        /// Which part was refused.
        what: &'static str,
        /// rustls' reason.
        source: rustls::Error,
    },
    /// The client CA file holds no usable CA certificate.
    #[error("client CA: {0}")]
    ClientCa(rustls::server::VerifierBuilderError),
}

/// Builds a server configuration from PEM files: `cert_chain` (the leaf first, then any
/// intermediates), `key` (PKCS#8, PKCS#1 or SEC1) and, for mutual TLS, `client_ca` (one or more
/// CA certificates; a client must then present a certificate signed by one of them, or the
/// handshake fails). See [`server_config_from_pem`] for the rest.
pub fn server_config_from_files(
    cert_chain: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<ServerConfig, ServerConfigError> {
    let read = |what, path: &Path| {
        std::fs::read(path).map_err(|source| ServerConfigError::Read {
            what,
            path: path.to_owned(),
            source,
        })
    };
    let chain = read("certificate chain", cert_chain)?;
    let key = read("private key", key)?;
    let client_ca = client_ca.map(|path| read("client CA", path)).transpose()?;
    server_config_from_pem(&chain, &key, client_ca.as_deref())
}

/// Builds a server configuration from PEM bytes, as [`server_config_from_files`] reads them.
///
/// The configuration names the ring provider (as [`client_config`](crate::client_config) does),
/// uses rustls' safe default protocol versions, and offers ALPN `http/1.1` only: a client that
/// offers only `h2` is refused, one that offers no ALPN speaks HTTP/1.1.
pub fn server_config_from_pem(
    cert_chain: &[u8],
    key: &[u8],
    client_ca: Option<&[u8]>,
) -> Result<ServerConfig, ServerConfigError> {
    let chain = certificates("certificate chain", cert_chain)?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|source| ServerConfigError::Pem {
        what: "private key",
        source,
    })?;
    let provider = crate::provider();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|source| ServerConfigError::Rustls {
            what: "protocol versions",
            source,
        })?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates("client CA", pem)? {
                roots
                    .add(cert)
                    .map_err(|source| ServerConfigError::Rustls {
                        what: "client CA",
                        source,
                    })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(ServerConfigError::ClientCa)?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config =
        builder
            .with_single_cert(chain, key)
            .map_err(|source| ServerConfigError::Rustls {
                what: "certificate chain and private key",
                source,
            })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Every certificate in `pem`; none is the same mistake as a malformed file.
fn certificates(
    what: &'static str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, ServerConfigError> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .and_then(|certs| {
            if certs.is_empty() {
                Err(pem::Error::NoItemsFound)
            } else {
                Ok(certs)
            }
        })
        .map_err(|source| ServerConfigError::Pem { what, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_identity_builds_with_and_without_client_auth() {
        let pki = unique_testsupport::pki::TestPki::generate();
        let chain = pki.server_chain.as_bytes();
        let key = pki.server_key.as_bytes();
        let plain = server_config_from_pem(chain, key, None).unwrap();
        assert_eq!(plain.alpn_protocols, vec![b"http/1.1".to_vec()]);
        let mutual = server_config_from_pem(chain, key, Some(pki.client_ca.as_bytes())).unwrap();
        assert_eq!(mutual.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn garbage_and_missing_inputs_are_errors_naming_the_input() {
        let error = server_config_from_pem(b"not pem", b"", None).unwrap_err();
        assert!(
            error.to_string().starts_with("certificate chain:"),
            "{error}"
        );

        let pki = unique_testsupport::pki::TestPki::generate();
        let error = server_config_from_pem(pki.server_chain.as_bytes(), b"", None).unwrap_err();
        assert!(error.to_string().starts_with("private key:"), "{error}");
        // A key of another certificate.
        let error =
            server_config_from_pem(pki.server_chain.as_bytes(), pki.client_key.as_bytes(), None)
                .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("certificate chain and private key:"),
            "{error}"
        );
        let error = server_config_from_pem(
            pki.server_chain.as_bytes(),
            pki.server_key.as_bytes(),
            Some(b"no CA here"),
        )
        .unwrap_err();
        assert!(error.to_string().starts_with("client CA:"), "{error}");

        let missing = Path::new("/nonexistent/unique-tls/cert.pem");
        let error = server_config_from_files(missing, missing, None).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("cannot read certificate chain /nonexistent"),
            "{message}"
        );
    }
}
