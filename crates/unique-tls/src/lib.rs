#![doc = include_str!("../README.md")]

use std::sync::Arc;
#[cfg(feature = "http")]
use std::time::Duration;

#[cfg(feature = "http")]
use hyper_util::client::legacy::connect::HttpConnector;
#[cfg(feature = "http")]
use hyper_util::client::legacy::connect::dns::GaiResolver;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore};

mod server;

pub use server::{ServerConfigError, server_config_from_files, server_config_from_pem};

/// The connector [`connector`] builds: TLS for `https` URLs, plain TCP for `http` ones,
/// names resolved by the system resolver (`getaddrinfo` on a blocking thread).
#[cfg(feature = "http")]
pub type Connector = ConnectorWith<GaiResolver>;

/// The connector [`connector_with_resolver`] builds: like [`Connector`], with host
/// names resolved by `R`.
#[cfg(feature = "http")]
pub type ConnectorWith<R> = hyper_rustls::HttpsConnector<HttpConnector<R>>;

/// The crypto provider every configuration of this crate names: ring, with its default
/// cipher suites, key exchange groups and signature algorithms. A custom certificate
/// verifier (see [`client_config_with_verifier`]) checks signatures with this provider's
/// algorithms, so that it agrees with the configuration it is plugged into.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Mozilla's root certificates (from the `webpki-roots` crate), to use as they are or to
/// extend with private CAs before [`client_config`].
pub fn webpki_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// A client configuration trusting `roots`, with the ring provider and rustls' safe
/// default protocol versions, and no client certificate.
///
/// The provider is named here rather than taken from the process default, so the result
/// does not depend on which rustls providers other crates in the binary compiled in.
///
/// Errors: rustls refuses the protocol versions for the provider (never for ring and
/// the safe defaults; the error is kept rather than unwrapped so a future rustls cannot
/// turn it into a panic).
pub fn client_config(roots: RootCertStore) -> Result<ClientConfig, rustls::Error> {
    Ok(builder(provider())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// [`client_config`] with the server's certificate judged by `verifier` instead of the
/// WebPKI check over a root store: for a client whose protocol defines checks of its own
/// (PostgreSQL's `sslmode=require`, which checks no chain, and `verify-ca`, which checks the
/// chain but not the host name). Same provider, same protocol versions, no client
/// certificate, no ALPN (set `alpn_protocols` on the result for a protocol that has one).
///
/// `verifier` should check the handshake signatures with [`provider`]'s algorithms.
///
/// Errors: as [`client_config`].
pub fn client_config_with_verifier(
    verifier: Arc<dyn ServerCertVerifier>,
) -> Result<ClientConfig, rustls::Error> {
    Ok(builder(provider())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// The first steps every client configuration shares: the provider and rustls' safe
/// default protocol versions (TLS 1.2 and 1.3).
fn builder(
    provider: Arc<CryptoProvider>,
) -> Result<rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier>, rustls::Error> {
    ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions()
}

/// The HTTPS-or-HTTP connector over `config`: hyper-rustls wrapping a hyper-util
/// [`HttpConnector`] with `TCP_NODELAY` on and the TCP connect bounded by
/// `connect_timeout` (`None`: bounded only by the caller's own deadline).
///
/// `config`'s ALPN list is replaced: the connector speaks HTTP/1.1 only and offers no
/// ALPN, so a server never selects HTTP/2, even when `config` listed `h2`.
#[cfg(feature = "http")]
pub fn connector(config: ClientConfig, connect_timeout: Option<Duration>) -> Connector {
    connector_with_resolver(config, connect_timeout, GaiResolver::new())
}

/// [`connector`] with host names resolved by `resolver`, a tower
/// `Service<hyper_util::client::legacy::connect::dns::Name>` yielding socket addresses
/// (their ports are replaced by the URL's). The TCP layer connects only to the
/// addresses `resolver` returns, with no lookup of its own, so a resolver that filters
/// addresses decides where a connection can go.
///
/// A URL whose host is an IP literal (`http://10.0.0.1/`, `http://[::1]/`) is connected
/// to directly: `resolver` is not called for it.
#[cfg(feature = "http")]
pub fn connector_with_resolver<R>(
    mut config: ClientConfig,
    connect_timeout: Option<Duration>,
    resolver: R,
) -> ConnectorWith<R> {
    // hyper-rustls writes the ALPN list itself from the enabled HTTP versions (for
    // HTTP/1.1 alone: none) and panics on a config that already has one.
    config.alpn_protocols.clear();

    let mut http = HttpConnector::new_with_resolver(resolver);
    // The TLS layer decides which schemes are allowed.
    http.enforce_http(false);
    // Requests are small and latency-bound; do not let Nagle hold them back.
    http.set_nodelay(true);
    http.set_connect_timeout(connect_timeout);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_trusts_the_webpki_roots_and_offers_no_alpn() {
        let config = client_config(webpki_roots()).unwrap();
        assert!(config.alpn_protocols.is_empty());
        assert_eq!(
            webpki_roots().roots.len(),
            webpki_roots::TLS_SERVER_ROOTS.len()
        );
    }
}
