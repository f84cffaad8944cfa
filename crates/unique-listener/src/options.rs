//! What a server accepts: timeouts, connection caps, TLS.

use std::sync::Arc;
use std::time::Duration;

/// Default [`ServeOptions::header_timeout`].
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`ServeOptions::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_mins(2);
/// Default [`ServeOptions::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`ServeOptions::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default [`ServeOptions::max_connections_per_ip`].
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 1_000;
/// Default [`ServeOptions::drain_timeout`].
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Default listen backlog of [`bind`](crate::bind).
pub const DEFAULT_BACKLOG: u32 = 4096;

/// How [`serve`](crate::serve) treats connections. `ServeOptions::default()` gives the
/// documented defaults; each setter replaces one.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub(crate) header_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_connections_per_ip: usize,
    pub(crate) drain_timeout: Duration,
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: DEFAULT_MAX_CONNECTIONS_PER_IP,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            tls: None,
        }
    }
}

impl ServeOptions {
    /// How long a request head may take, from its first byte (for a connection's first request:
    /// from the accept, TLS handshake included) to its blank line. A connection past it is closed
    /// without an answer. Default [`DEFAULT_HEADER_TIMEOUT`] (10 s).
    #[must_use]
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// How long a keep-alive connection may sit between an answer and the first byte of its next
    /// request before it is closed. Default [`DEFAULT_IDLE_TIMEOUT`] (120 s: longer than the pool
    /// idle timeouts of unique's clients, so a client drops an idle connection before the server
    /// does and never reuses one the server is closing).
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// How long a request body may take to arrive in full, counted from the end of its head. Past
    /// it the service's body read fails, the request is answered 408 with `Connection: close`,
    /// and the connection is closed. Default [`DEFAULT_BODY_TIMEOUT`] (10 s).
    #[must_use]
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Most connections open at once; a connection past it is closed as soon as it is accepted,
    /// before a byte is read. Keep it below the process's descriptor limit (`ulimit -n`), so the
    /// cap is reached before the kernel refuses descriptors. Default
    /// [`DEFAULT_MAX_CONNECTIONS`] (10 000). Values below 1 mean 1.
    #[must_use]
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// Most connections open at once from one client IP address; past it, as
    /// [`max_connections`](Self::max_connections). Behind a proxy every client has the proxy's
    /// address: raise it to `max_connections` there. Default
    /// [`DEFAULT_MAX_CONNECTIONS_PER_IP`] (1 000). Values below 1 mean 1.
    #[must_use]
    pub fn max_connections_per_ip(mut self, max: usize) -> Self {
        self.max_connections_per_ip = max.max(1);
        self
    }

    /// How long requests in flight get to finish once shutdown is requested; connections still
    /// open after it are left to end on their own and `serve` returns. Default
    /// [`DEFAULT_DRAIN_TIMEOUT`] (10 s).
    #[must_use]
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Serves TLS with `config` (build it with `unique_tls::server_config_from_files`) instead of
    /// plain HTTP. The handshake counts against the header timeout of the first request; with a
    /// client CA configured, a client without a valid certificate is refused in the handshake.
    #[must_use]
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(config);
        self
    }

    /// Whether [`tls`](Self::tls) was set.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }
}
