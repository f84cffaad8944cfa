//! Options for [`HttpKicker`]: pool, kicks in flight, user agent, response cap, TLS trust,
//! endpoint policy.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::accepted::AcceptedEndpoints;
use crate::kicker::{HttpKicker, InFlight, Inner};
use crate::policy::EndpointPolicy;
use crate::pool::{Limits, Pool};
use crate::resolve::PolicyResolver;
use crate::telemetry::KickerMetrics;
use unique_kick_signature::SigningKeys;

/// How long an idle pooled connection is kept by default: below the 60–75 s idle
/// timeouts common on servers, so the pool rarely hands out a connection the peer
/// is about to close.
pub const DEFAULT_POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle connections kept per `scheme://host:port` by default.
pub const DEFAULT_MAX_IDLE_PER_HOST: usize = 32;

/// Idle connections kept across all hosts by default. Claimants choose the hosts
/// (any port, any name under an allowed wildcard), so the per-host cap alone does not
/// bound the sockets a kicker keeps open.
pub const DEFAULT_MAX_IDLE: usize = 256;

/// Kicks one kicker sends at once by default; each holds a socket until it is
/// answered or its deadline passes. A kick past the cap is not sent.
pub const DEFAULT_MAX_KICKS_IN_FLIGHT: usize = 1024;

/// How many response body bytes a kick reads (and discards) by default. A kick
/// receiver's answer is a few bytes; past the cap the status alone decides and the
/// connection is closed instead of pooled.
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 64 * 1024;

/// Why [`HttpKickerBuilder::build`] refused its options.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The user agent is not a valid header value.
    #[error("invalid user agent: not a valid header value")]
    InvalidUserAgent,
    /// An extra root certificate could not be parsed or used as a trust anchor.
    #[error("invalid root certificate: {0}")]
    InvalidRootCertificate(String),
    /// Extra roots were given together with a custom rustls config; add them to
    /// that config's root store instead.
    #[error("extra root certificates cannot be combined with a custom tls config")]
    ConflictingTlsOptions,
    /// rustls refused the protocol configuration.
    #[error("tls configuration: {0}")]
    Tls(#[source] rustls::Error),
    /// [`HttpKickerBuilder::max_kicks_in_flight`] was 0: no kick could ever be sent.
    #[error("max kicks in flight must be at least 1")]
    ZeroKicksInFlight,
}

/// Builds an [`HttpKicker`]; start with [`HttpKicker::builder`].
///
/// ```
/// use std::time::Duration;
/// use unique_kick_http::HttpKicker;
///
/// let kicker = HttpKicker::builder()
///     .pool_idle_timeout(Duration::from_secs(10))
///     .pool_max_idle_per_host(4)
///     .pool_max_idle(64)
///     .max_kicks_in_flight(256)
///     .user_agent("my-login-service/1.0")
///     .build()
///     .expect("valid options");
/// # drop(kicker);
/// ```
#[derive(Debug)]
#[must_use]
pub struct HttpKickerBuilder {
    pool_idle_timeout: Option<Duration>,
    pool_max_idle_per_host: usize,
    pool_max_idle: usize,
    max_kicks_in_flight: usize,
    user_agent: String,
    max_response_body: usize,
    tls: TlsOptions,
    endpoint_policy: EndpointPolicy,
    signing_keys: Option<SigningKeys>,
}

impl Default for HttpKickerBuilder {
    fn default() -> Self {
        Self {
            pool_idle_timeout: Some(DEFAULT_POOL_IDLE_TIMEOUT),
            pool_max_idle_per_host: DEFAULT_MAX_IDLE_PER_HOST,
            pool_max_idle: DEFAULT_MAX_IDLE,
            max_kicks_in_flight: DEFAULT_MAX_KICKS_IN_FLIGHT,
            user_agent: concat!("unique-kick-http/", env!("CARGO_PKG_VERSION")).to_owned(),
            max_response_body: DEFAULT_MAX_RESPONSE_BODY,
            tls: TlsOptions::default(),
            endpoint_policy: EndpointPolicy::default(),
            signing_keys: None,
        }
    }
}

impl HttpKickerBuilder {
    /// An idle pooled connection older than this is never reused (it is closed at
    /// the next kick through this kicker, whichever host that kick goes to); `None`
    /// keeps idle connections until the peer closes them or a cap evicts them.
    /// Default [`DEFAULT_POOL_IDLE_TIMEOUT`].
    pub fn pool_idle_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.pool_idle_timeout = timeout.into();
        self
    }

    /// At most this many idle connections are kept per `scheme://host:port`;
    /// 0 turns connection reuse off. Default [`DEFAULT_MAX_IDLE_PER_HOST`].
    pub fn pool_max_idle_per_host(mut self, max: usize) -> Self {
        self.pool_max_idle_per_host = max;
        self
    }

    /// At most this many idle connections are kept across all hosts together;
    /// past it the least recently used one is closed, whichever host it is for. 0
    /// turns connection reuse off. Default [`DEFAULT_MAX_IDLE`].
    pub fn pool_max_idle(mut self, max: usize) -> Self {
        self.pool_max_idle = max;
        self
    }

    /// At most this many kicks are sent at once through this kicker and its clones.
    /// A kick past the cap is not attempted: it is `Failed(connect-error)` at once,
    /// with no connection made, and counted in `unique_kicks_shed_total`
    /// ([`KICKS_SHED_TOTAL`](crate::KICKS_SHED_TOTAL)). [`build`](Self::build) refuses
    /// 0. Default [`DEFAULT_MAX_KICKS_IN_FLIGHT`].
    pub fn max_kicks_in_flight(mut self, max: usize) -> Self {
        self.max_kicks_in_flight = max;
        self
    }

    /// The `user-agent` header sent with every kick. Default
    /// `unique-kick-http/<version>`.
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// Reads at most this many response body bytes. Default
    /// [`DEFAULT_MAX_RESPONSE_BODY`].
    pub fn max_response_body(mut self, bytes: usize) -> Self {
        self.max_response_body = bytes;
        self
    }

    /// Trusts `cert` (DER) as a root in addition to the webpki roots, for kick
    /// receivers behind a private CA.
    pub fn add_root_certificate(mut self, cert: CertificateDer<'static>) -> Self {
        self.tls.extra_roots.push(cert);
        self
    }

    /// Trusts every certificate in the PEM bundle `pem` as a root in addition to
    /// the webpki roots. Parsed by [`build`](Self::build), which fails when the
    /// bundle holds no certificate.
    pub fn add_root_certificates_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.tls.extra_roots_pem.push(pem.as_ref().to_vec());
        self
    }

    /// Replaces the whole TLS client configuration (roots, client certificates,
    /// versions). Its ALPN list is overwritten: the kicker speaks HTTP/1.1 only.
    /// Cannot be combined with the `add_root_*` methods.
    pub fn tls_config(mut self, config: ClientConfig) -> Self {
        self.tls.custom = Some(config);
        self
    }

    /// Which endpoints kicks may reach (see [`EndpointPolicy`]). Default
    /// [`EndpointPolicy::new`]: everything but unspecified, link-local, multicast and
    /// broadcast addresses and the fixed cloud metadata addresses.
    pub fn endpoint_policy(mut self, policy: EndpointPolicy) -> Self {
        self.endpoint_policy = policy;
        self
    }

    /// Signs every kick with the first of `keys`: each POST carries a `Unique-Signature`
    /// header over its exact body bytes, stamped with the system clock (see
    /// `unique-kick-signature`), for receivers that verify kicks. Default: unsigned.
    pub fn signing_keys(mut self, keys: SigningKeys) -> Self {
        self.signing_keys = Some(keys);
        self
    }

    /// Builds the kicker. Needs no runtime; kicks must run inside a tokio runtime.
    /// Its metrics are registered with the `metrics` recorder in force now, so install
    /// the recorder first.
    pub fn build(self) -> Result<HttpKicker, BuildError> {
        if self.max_kicks_in_flight == 0 {
            return Err(BuildError::ZeroKicksInFlight);
        }
        let user_agent =
            HeaderValue::try_from(self.user_agent).map_err(|_| BuildError::InvalidUserAgent)?;
        let tls_config = self.tls.into_client_config()?;
        let policy = Arc::new(self.endpoint_policy);
        // No connect timeout of its own: the kick's deadline bounds the whole exchange.
        let resolver = PolicyResolver::new(Arc::clone(&policy));
        let connector = unique_tls::connector_with_resolver(tls_config, None, resolver);

        let pool = Pool::new(Limits {
            idle_timeout: self.pool_idle_timeout,
            max_idle_per_host: self.pool_max_idle_per_host,
            max_idle: self.pool_max_idle,
        });

        Ok(HttpKicker::from_inner(Inner {
            connector,
            policy,
            pool,
            in_flight: InFlight::new(self.max_kicks_in_flight),
            metrics: KickerMetrics::new(),
            user_agent,
            max_response_body: self.max_response_body,
            signing_keys: std::sync::RwLock::new(self.signing_keys),
            accepted: AcceptedEndpoints::new(),
        }))
    }
}

/// The TLS settings a builder collected.
#[derive(Debug, Default)]
struct TlsOptions {
    /// Extra trust anchors added to the webpki roots.
    extra_roots: Vec<CertificateDer<'static>>,
    /// PEM bundles of extra trust anchors, parsed at build time.
    extra_roots_pem: Vec<Vec<u8>>,
    /// A complete replacement configuration (its ALPN list is replaced by
    /// [`unique_tls::connector`]).
    custom: Option<ClientConfig>,
}

impl TlsOptions {
    /// The client configuration the connector uses: the custom one, or the webpki
    /// roots plus the extra roots under [`unique_tls::client_config`].
    fn into_client_config(self) -> Result<ClientConfig, BuildError> {
        if let Some(custom) = self.custom {
            if !self.extra_roots.is_empty() || !self.extra_roots_pem.is_empty() {
                return Err(BuildError::ConflictingTlsOptions);
            }
            return Ok(custom);
        }

        let mut roots = unique_tls::webpki_roots();
        let invalid = |e: &dyn std::fmt::Display| BuildError::InvalidRootCertificate(e.to_string());
        for cert in self.extra_roots {
            roots.add(cert).map_err(|e| invalid(&e))?;
        }
        for pem in &self.extra_roots_pem {
            let mut found = false;
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(cert.map_err(|e| invalid(&e))?)
                    .map_err(|e| invalid(&e))?;
                found = true;
            }
            if !found {
                return Err(invalid(&"no certificate in pem input"));
            }
        }
        unique_tls::client_config(roots).map_err(BuildError::Tls)
    }
}
