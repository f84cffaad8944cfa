//! Configuration of an [`HttpTransport`]: base URL, timeouts, pool and TLS.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use unique_core::Error;

use crate::transport::{Endpoints, HttpTransport, Inner};

/// Per-request timeout by default: long enough for a claim that waits for a kick (the
/// server's kick timeout is 3 s by default) and retries its CAS, short enough to leave the
/// claimer's 25 s budget room for retries.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle pooled connections older than this are closed.
pub const DEFAULT_POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Responses larger than this are refused (`Unavailable`): every valid answer is tiny.
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 64 * 1024;

/// Builds an [`HttpTransport`]; start with [`HttpTransport::builder`].
///
/// `Debug` leaves out the base URL (its path may hold a secret) and the bearer token.
#[must_use]
pub struct HttpTransportBuilder {
    base_url: String,
    timeout: Duration,
    connect_timeout: Option<Duration>,
    pool_idle_timeout: Option<Duration>,
    pool_max_idle_per_host: usize,
    user_agent: String,
    bearer_token: Option<String>,
    max_response_body: usize,
    tls_config: Option<rustls::ClientConfig>,
}

impl std::fmt::Debug for HttpTransportBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTransportBuilder")
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("pool_max_idle_per_host", &self.pool_max_idle_per_host)
            .field("user_agent", &self.user_agent)
            .field("has_bearer_token", &self.bearer_token.is_some())
            .field("max_response_body", &self.max_response_body)
            .field("has_tls_config", &self.tls_config.is_some())
            .finish_non_exhaustive()
    }
}

impl HttpTransportBuilder {
    pub(crate) fn new(base_url: String) -> Self {
        Self {
            base_url,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: None,
            pool_idle_timeout: Some(DEFAULT_POOL_IDLE_TIMEOUT),
            pool_max_idle_per_host: usize::MAX,
            user_agent: concat!("unique-client-http/", env!("CARGO_PKG_VERSION")).to_owned(),
            bearer_token: None,
            max_response_body: DEFAULT_MAX_RESPONSE_BODY,
            tls_config: None,
        }
    }

    /// Bounds each call, from sending the request to the last byte of the answer
    /// (connecting included). Default [`DEFAULT_TIMEOUT`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Bounds the TCP connect alone (it is always bounded by [`timeout`](Self::timeout)).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Closes idle pooled connections after this long; `None` keeps them until the server
    /// closes them. Default [`DEFAULT_POOL_IDLE_TIMEOUT`].
    pub fn pool_idle_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.pool_idle_timeout = timeout.into();
        self
    }

    /// Keeps at most this many idle connections; 0 turns keep-alive reuse off. Default
    /// unbounded.
    pub fn pool_max_idle_per_host(mut self, max: usize) -> Self {
        self.pool_max_idle_per_host = max;
        self
    }

    /// The `user-agent` header. Default `unique-client-http/<version>`.
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// Reads at most this many response bytes. Default [`DEFAULT_MAX_RESPONSE_BODY`].
    pub fn max_response_body(mut self, bytes: usize) -> Self {
        self.max_response_body = bytes;
        self
    }

    /// Sends `Authorization: Bearer <token>` with every call, for a server that requires
    /// callers to authenticate (`unique-server --auth-tokens`). The header is marked
    /// sensitive, so it is never logged by the HTTP stack. Default: no token.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
        self
    }

    /// The TLS configuration for `https` base URLs (private roots, client certificates).
    /// Default: the webpki roots with rustls' safe defaults. Its ALPN list is replaced:
    /// the transport speaks HTTP/1.1.
    pub fn tls_config(mut self, config: rustls::ClientConfig) -> Self {
        self.tls_config = Some(config);
        self
    }

    /// Builds the transport. Needs no runtime; calls must run inside a tokio runtime.
    ///
    /// Errors (`InvalidParams`): the base URL is not an absolute `http`/`https` URL with a
    /// host, or carries credentials, a query or a fragment; the user agent or the bearer
    /// token is not a valid header value; the default TLS configuration cannot be built.
    pub fn build(self) -> Result<HttpTransport, Error> {
        let endpoints = Endpoints::parse(&self.base_url)?;
        let user_agent = HeaderValue::try_from(self.user_agent)
            .map_err(|_| Error::invalid("user agent is not a valid header value"))?;
        let authorization = self
            .bearer_token
            .map(|token| {
                let mut value = HeaderValue::try_from(format!("Bearer {token}"))
                    .map_err(|_| Error::invalid("bearer token is not a valid header value"))?;
                value.set_sensitive(true);
                Ok::<_, Error>(value)
            })
            .transpose()?;
        let tls = match self.tls_config {
            Some(config) => config,
            None => unique_tls::client_config(unique_tls::webpki_roots())
                .map_err(|_| Error::invalid("tls configuration could not be built"))?,
        };
        let connector = unique_tls::connector(tls, self.connect_timeout);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(self.pool_idle_timeout)
            .pool_max_idle_per_host(self.pool_max_idle_per_host)
            .build(connector);

        Ok(HttpTransport::from_inner(Arc::new(Inner {
            client,
            endpoints,
            timeout: self.timeout,
            user_agent,
            authorization,
            max_response_body: self.max_response_body,
        })))
    }
}

impl Endpoints {
    /// Splits a base URL such as `http://127.0.0.1:7420` or `https://host/prefix/` into the
    /// three operation URIs. Messages never echo the URL (it may hold a secret).
    pub(crate) fn parse(base_url: &str) -> Result<Self, Error> {
        let uri: Uri = base_url
            .parse()
            .map_err(|_| Error::invalid("base url is not a valid url"))?;
        let scheme = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => "http",
            Some(s) if s.eq_ignore_ascii_case("https") => "https",
            _ => {
                return Err(Error::invalid(
                    "base url must be an absolute http or https url",
                ));
            }
        };
        let authority = uri
            .authority()
            .filter(|a| !a.host().is_empty())
            .ok_or_else(|| Error::invalid("base url must have a host"))?;
        if authority.as_str().contains('@') {
            return Err(Error::invalid("base url must not carry credentials"));
        }
        if uri.query().is_some() || base_url.contains('#') {
            return Err(Error::invalid(
                "base url must not have a query or a fragment",
            ));
        }
        let prefix = uri.path().trim_end_matches('/');
        let at = |path: &str| -> Result<Uri, Error> {
            format!("{scheme}://{authority}{prefix}{path}")
                .parse()
                .map_err(|_| Error::invalid("base url is not a valid url"))
        };
        Ok(Self {
            base: format!("{scheme}://{authority}{prefix}"),
            claim: at(unique_wire::CLAIM_PATH)?,
            current: at(unique_wire::CURRENT_PATH)?,
            current_batch: at(unique_wire::CURRENT_BATCH_PATH)?,
            release: at(unique_wire::RELEASE_PATH)?,
            logout: at(unique_wire::LOGOUT_PATH)?,
            logout_all: at(unique_wire::LOGOUT_ALL_PATH)?,
            sessions: at(unique_wire::SESSIONS_PATH)?,
            info: at(unique_wire::INFO_PATH)?,
            ready: at(unique_wire::READY_PATH)?,
            leases: unique_wire::LeaseRoute::ALL
                .iter()
                .map(|route| at(route.path()))
                .collect::<Result<_, _>>()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_map_to_the_three_routes() {
        for (base, claim) in [
            ("http://127.0.0.1:7420", "http://127.0.0.1:7420/v1/claim"),
            ("http://127.0.0.1:7420/", "http://127.0.0.1:7420/v1/claim"),
            ("HTTP://h:1/api/", "http://h:1/api/v1/claim"),
            (
                "https://unique.example/a/b",
                "https://unique.example/a/b/v1/claim",
            ),
            ("http://[::1]:9", "http://[::1]:9/v1/claim"),
        ] {
            let e = Endpoints::parse(base).unwrap();
            assert_eq!(e.claim.to_string(), claim, "{base}");
            assert!(e.current.to_string().ends_with("/v1/current"));
            assert!(e.release.to_string().ends_with("/v1/release"));
            for route in unique_wire::LeaseRoute::ALL {
                let uri = e.lease(route).to_string();
                assert_eq!(uri, claim.replace("/v1/claim", route.path()), "{base}");
            }
        }
    }

    #[test]
    fn bad_base_urls_are_invalid_params_without_echo() {
        for base in [
            "",
            "not a url",
            "/relative",
            "ftp://h/",
            "http://",
            "http://user:secret@h/",
            "http://h/?token=secret",
            "http://h/#secret",
        ] {
            let e = Endpoints::parse(base).unwrap_err();
            assert!(e.is_invalid_params(), "{base}: {e}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
    }

    #[test]
    fn builder_debug_hides_the_url_and_the_token() {
        let builder =
            HttpTransport::builder("http://h:1/secret-path").bearer_token("tok-secret-123");
        let shown = format!("{builder:?}");
        assert!(shown.contains("has_bearer_token: true"), "{shown}");
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn builder_rejects_a_bad_bearer_token() {
        let e = HttpTransport::builder("http://h:1")
            .bearer_token("bad\ntoken")
            .build()
            .unwrap_err();
        assert!(e.is_invalid_params());
        assert!(!e.to_string().contains("bad"), "{e}");
    }

    #[test]
    fn builder_rejects_a_bad_user_agent() {
        let e = HttpTransport::builder("http://h:1")
            .user_agent("bad\nagent")
            .build()
            .unwrap_err();
        assert!(e.is_invalid_params());
    }
}
