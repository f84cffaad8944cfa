//! [`HttpKicker`]: one POST per kick over pooled HTTP/1.1 connections.

use std::error::Error as StdError;
use std::fmt;
use std::future::poll_fn;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, USER_AGENT};
use http::uri::{Authority, Scheme};
use http::{HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::time::{Instant, timeout_at};
use tower_service::Service;
use unique_core::{KickDetail, KickOutcome, KickPayload, Kicker, async_trait};
use unique_kick_signature::SigningKeys;

use crate::accepted::AcceptedEndpoints;
use crate::builder::HttpKickerBuilder;
use crate::classify::status_outcome;
use crate::policy::EndpointPolicy;
use crate::pool::{Pool, PoolKey, Sender};
use crate::resolve::PolicyResolver;
use crate::telemetry::KickerMetrics;

/// The TLS connector over the policy's resolver.
pub(crate) type Connector = unique_tls::ConnectorWith<PolicyResolver>;

/// A [`Kicker`] that POSTs the JSON [`KickPayload`] to the old session's endpoint.
///
/// - 2xx → [`KickOutcome::Confirmed`]; any other status, redirects included (never
///   followed) → `Failed(Non2xx)`.
/// - No complete answer (status and body) within the deadline → `Failed(Timeout)`.
///   The deadline covers the whole exchange: DNS, connect, TLS, request, response.
/// - Any failure before a complete answer (invalid URI, a scheme other than
///   `http`/`https`, DNS, refused, reset, TLS, garbled response, a body cut short)
///   → `Failed(ConnectError)`; so is a kick past the cap on kicks in flight
///   ([`HttpKickerBuilder::max_kicks_in_flight`]), which is not attempted at all.
///
/// Kicks reach only the endpoints its [`EndpointPolicy`] allows: the policy decides
/// an IP-literal host before connecting and every address a host name resolves to
/// before connecting to it (no second lookup between check and connect). A refused
/// endpoint is `Failed(ConnectError)` with no connection made, and
/// [`Kicker::check_endpoint`] refuses it at claim time, as far as it can tell
/// without resolving the name.
///
/// Connections are HTTP/1.1 with keep-alive and pooled per `scheme://host:port`; a
/// kick hands its connection back to the pool before it returns, so the next kick
/// to the same host reuses it. The pool is capped per host and across all hosts
/// (least recently used out first). Cloning is cheap and clones share the pool and
/// the cap on kicks in flight. Kicks must run inside a tokio runtime (each
/// connection is driven by a spawned task).
#[derive(Clone)]
pub struct HttpKicker {
    inner: Arc<Inner>,
}

/// What a kicker holds; the builder fills it in.
pub(crate) struct Inner {
    pub(crate) connector: Connector,
    pub(crate) policy: Arc<EndpointPolicy>,
    pub(crate) pool: Pool,
    pub(crate) in_flight: InFlight,
    pub(crate) metrics: KickerMetrics,
    pub(crate) user_agent: HeaderValue,
    pub(crate) max_response_body: usize,
    /// Replaced whole by [`HttpKicker::replace_signing_keys`]; read once per request.
    pub(crate) signing_keys: RwLock<Option<SigningKeys>>,
    /// Endpoints the policy accepted lately, so a node's repeated endpoint is checked once.
    pub(crate) accepted: AcceptedEndpoints,
}

impl HttpKicker {
    /// A kicker with the default options (see [`HttpKickerBuilder`]).
    ///
    /// # Panics
    ///
    /// Never in practice: the default options are always valid. Use
    /// [`builder`](Self::builder) to handle errors explicitly.
    pub fn new() -> Self {
        Self::builder()
            .build()
            .expect("the default kicker options are valid")
    }

    /// Starts a builder with the default options.
    pub fn builder() -> HttpKickerBuilder {
        HttpKickerBuilder::default()
    }

    pub(crate) fn from_inner(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The keys kicks are signed with now (`None`: unsigned).
    pub fn signing_keys(&self) -> Option<SigningKeys> {
        self.inner.signing_keys().clone()
    }

    /// Signs every kick from now on with `keys` (a key file reloaded, say); returns the keys
    /// it replaced. Shared by every clone; the pool, its idle connections and the count of
    /// kicks in flight are kept. A request already signed goes out as it was.
    pub fn replace_signing_keys(&self, keys: SigningKeys) -> Option<SigningKeys> {
        let mut current = self
            .inner
            .signing_keys
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        current.replace(keys)
    }
}

impl Default for HttpKicker {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for HttpKicker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpKicker")
            .field("user_agent", &self.inner.user_agent)
            .field("max_response_body", &self.inner.max_response_body)
            .field("max_kicks_in_flight", &self.inner.in_flight.max)
            .field("endpoint_policy", &self.inner.policy)
            .field("signing_keys", &*self.inner.signing_keys())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Kicker for HttpKicker {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        let deadline = deadline_after(timeout);
        let target = match Target::parse(endpoint) {
            Ok(target) => target,
            Err(failure) => return failed(endpoint, &failure),
        };
        // Held until the kick returns, its connection back in the pool; a kick
        // dropped midway (its caller gave up) releases it too.
        let Some(_slot) = self.inner.in_flight.enter() else {
            self.inner.metrics.shed_in_flight();
            let reason = "the kicks in flight reached max_kicks_in_flight; not attempted";
            return failed(endpoint, &Failure::message("in-flight cap", reason));
        };
        match timeout_at(deadline, self.inner.exchange(&target, payload)).await {
            Ok(Ok(answer)) => {
                if let Some(sender) = answer.reusable {
                    // Hand the connection back before returning, so the next kick
                    // finds it idle; it is ready once hyper has finished the
                    // response. Still bounded by the deadline; the outcome is
                    // already decided and does not depend on it.
                    self.inner
                        .checkin_when_ready(target.key, sender, deadline)
                        .await;
                }
                status_outcome(answer.status)
            }
            Ok(Err(failure)) => failed(endpoint, &failure),
            Err(_elapsed) => {
                tracing::debug!(endpoint = %redacted(endpoint), ?timeout, "kick timed out");
                KickOutcome::Failed(KickDetail::Timeout)
            }
        }
    }

    /// Refuses an endpoint this kicker could never reach: one that does not parse
    /// as an `http`/`https` URI, or whose host the policy refuses before any lookup
    /// ([`EndpointPolicy::check_host`]). No DNS lookup happens here: a name whose
    /// addresses the policy refuses is refused at kick time.
    fn check_endpoint(&self, endpoint: &str) -> Result<(), String> {
        // Runs on every claim: only the URI, its scheme and host are checked here,
        // not the request parts a kick builds from them (`Target::parse`), which
        // cannot fail once these have passed and cost two allocations more.
        if self.inner.accepted.contains(endpoint) {
            return Ok(());
        }
        let uri =
            http_uri(endpoint).map_err(|_| "not a uri the http kicker can send to".to_owned())?;
        self.inner
            .policy
            .check_host(uri.host().unwrap_or_default())
            .map_err(|refusal| refusal.to_string())?;
        self.inner.accepted.remember(endpoint);
        Ok(())
    }
}

/// The cap on kicks in flight, shared by a kicker's clones.
pub(crate) struct InFlight {
    count: AtomicUsize,
    max: usize,
}

impl InFlight {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            count: AtomicUsize::new(0),
            max,
        }
    }

    /// A slot for one more kick, or `None` when `max` are in flight. Never counts
    /// past `max`, even for a moment, so a kick is shed only when `max` others
    /// really hold a slot.
    fn enter(&self) -> Option<Slot<'_>> {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(&self.count))
    }
}

/// One kick in flight; leaving frees its slot.
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A complete answer: its status, and the connection when it can carry another kick.
struct Answer {
    status: StatusCode,
    reusable: Option<Sender>,
}

impl Inner {
    fn signing_keys(&self) -> RwLockReadGuard<'_, Option<SigningKeys>> {
        // A write is one whole replacement: a poisoned lock still holds whole keys.
        self.signing_keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The exchange without its deadline.
    async fn exchange(&self, target: &Target, payload: &KickPayload) -> Result<Answer, Failure> {
        let body = Bytes::from(unique_wire::encode_kick(payload));
        let mut pooled = self.pool.checkout(&target.key);
        loop {
            let reused = pooled.is_some();
            let mut sender = match pooled.take() {
                Some(sender) => sender,
                None => self.connect(target).await?,
            };
            match sender
                .try_send_request(self.request(target, body.clone())?)
                .await
            {
                Ok(response) => {
                    let status = response.status();
                    let complete = drain(response.into_body(), self.max_response_body)
                        .await
                        .map_err(|e| Failure::new("response body", e))?;
                    return Ok(Answer {
                        status,
                        reusable: complete.then_some(sender),
                    });
                }
                Err(error) => {
                    // A pooled connection can be closed by the server at the moment
                    // we reuse it (an HTTP/1.1 keep-alive race), before any status
                    // arrives. Kicks are idempotent (receivers fence on gen), so the
                    // kick is sent once more on a fresh connection rather than
                    // reported as a connect error. A fresh connection is never retried.
                    if reused {
                        tracing::trace!(error = %error.error(), "pooled kick connection failed, retrying on a new one");
                        continue;
                    }
                    return Err(Failure::new("request", error.into_error()));
                }
            }
        }
    }

    fn request(&self, target: &Target, body: Bytes) -> Result<Request<Full<Bytes>>, Failure> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(target.origin_form.clone())
            .header(HOST, target.host.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(USER_AGENT, self.user_agent.clone());
        if let Some(keys) = &*self.signing_keys() {
            // Over the very bytes this request carries, stamped now (a retry on a fresh
            // connection is stamped again).
            let signature = keys.sign(&body, SystemTime::now());
            request = request.header(unique_kick_signature::HEADER, signature);
        }
        request
            .body(Full::new(body))
            .map_err(|e| Failure::new("request", e))
    }

    /// A new connection (TCP, then TLS for `https`), driven by a spawned task.
    async fn connect(&self, target: &Target) -> Result<Sender, Failure> {
        // The connector connects to an IP-literal host without calling the policy's
        // resolver, so the literal is decided here; a name is decided again, per
        // address, by the resolver.
        self.policy
            .check_host(target.host_name())
            .map_err(|refusal| Failure::new("endpoint policy", refusal))?;
        let mut connector = self.connector.clone();
        poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(|e| Failure::new("connect", e))?;
        let io = connector
            .call(target.uri.clone())
            .await
            .map_err(|e| Failure::new("connect", e))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| Failure::new("handshake", e))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::trace!(%error, "kick connection ended with an error");
            }
        });
        Ok(sender)
    }

    async fn checkin_when_ready(&self, key: PoolKey, mut sender: Sender, deadline: Instant) {
        if let Ok(Ok(())) = timeout_at(deadline, sender.ready()).await {
            self.pool.checkin(key, sender);
        }
    }
}

/// What a kick needs from its endpoint, parsed once.
struct Target {
    /// The endpoint as given, for the connector.
    uri: Uri,
    /// Path and query, for the request line.
    origin_form: Uri,
    /// `host[:port]` without any userinfo, for the `host` header.
    host: HeaderValue,
    key: PoolKey,
}

impl Target {
    /// The URI's host: a name, an IPv4 literal or a bracketed IPv6 literal.
    fn host_name(&self) -> &str {
        self.uri.host().unwrap_or_default()
    }

    fn parse(endpoint: &str) -> Result<Self, Failure> {
        let uri = http_uri(endpoint)?;
        // `http_uri` checked both.
        let scheme = uri.scheme().cloned().unwrap_or(Scheme::HTTP);
        let host = uri.host().unwrap_or_default();
        let host = match uri.port_u16() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let authority: Authority = host.parse().map_err(|e| Failure::new("endpoint uri", e))?;
        let origin_form: Uri = uri
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .parse()
            .map_err(|e| Failure::new("endpoint uri", e))?;
        let host = HeaderValue::try_from(host).map_err(|e| Failure::new("endpoint uri", e))?;
        Ok(Self {
            uri,
            origin_form,
            host,
            key: PoolKey { scheme, authority },
        })
    }
}

/// `endpoint` as an absolute `http` or `https` URI with a non-empty host.
fn http_uri(endpoint: &str) -> Result<Uri, Failure> {
    let uri: Uri = endpoint
        .parse()
        .map_err(|e| Failure::new("endpoint uri", e))?;
    if !uri
        .scheme()
        .is_some_and(|s| *s == Scheme::HTTP || *s == Scheme::HTTPS)
    {
        return Err(Failure::message(
            "endpoint uri",
            "not an absolute http or https uri",
        ));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(Failure::message("endpoint uri", "no host"));
    }
    Ok(uri)
}

/// The kick's deadline; a timeout too large to represent means "no deadline".
fn deadline_after(timeout: Duration) -> Instant {
    const FAR_FUTURE: Duration = Duration::from_hours(24 * 365 * 30);
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or_else(|| now + FAR_FUTURE)
}

fn failed(endpoint: &str, failure: &Failure) -> KickOutcome {
    tracing::debug!(
        endpoint = %redacted(endpoint),
        stage = failure.stage,
        error = %failure,
        "kick failed before a complete answer"
    );
    KickOutcome::Failed(KickDetail::ConnectError)
}

/// Reads and discards the body. `Ok(true)` when it ended (the connection can be
/// reused), `Ok(false)` when it passed `cap` bytes and reading stopped (the
/// connection is closed with the rest of the body).
async fn drain(mut body: Incoming, cap: usize) -> Result<bool, hyper::Error> {
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame?.data_ref() {
            seen = seen.saturating_add(data.len());
            if seen > cap {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Why an exchange ended without a complete answer, with its whole error chain
/// for the debug log (hyper keeps the useful part in `source()`).
#[derive(Debug)]
struct Failure {
    stage: &'static str,
    error: Box<dyn StdError + Send + Sync>,
}

impl Failure {
    fn new(stage: &'static str, error: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self {
            stage,
            error: error.into(),
        }
    }

    fn message(stage: &'static str, message: &'static str) -> Self {
        Self::new(stage, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.error)?;
        let mut source = self.error.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// The endpoint as `scheme://host[:port]`: the query string and any userinfo may
/// carry a secret, so neither is ever logged.
fn redacted(endpoint: &str) -> String {
    let Ok(uri) = endpoint.parse::<Uri>() else {
        return "<invalid uri>".to_owned();
    };
    match (uri.scheme_str(), uri.host()) {
        (Some(scheme), Some(host)) => match uri.port_u16() {
            Some(port) => format!("{scheme}://{host}:{port}"),
            None => format!("{scheme}://{host}"),
        },
        _ => "<relative uri>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_keeps_scheme_and_authority_only() {
        assert_eq!(
            redacted("https://node-7.internal:8443/kick?token=secret"),
            "https://node-7.internal:8443"
        );
        assert_eq!(
            redacted("http://user:pass@10.0.0.1/kick"),
            "http://10.0.0.1"
        );
        assert_eq!(redacted("/kick?token=secret"), "<relative uri>");
        assert_eq!(redacted("http://exa mple/"), "<invalid uri>");
    }

    #[test]
    fn a_target_drops_userinfo_and_keeps_path_and_query() {
        let target = Target::parse("https://user:pw@[::1]:8443/kick/s?t=1").expect("valid");
        assert_eq!(target.host, "[::1]:8443");
        assert_eq!(target.origin_form, "/kick/s?t=1");
        assert_eq!(target.key.scheme, Scheme::HTTPS);
        assert_eq!(target.key.authority, "[::1]:8443");

        let bare = Target::parse("http://node").expect("valid");
        assert_eq!(
            (
                bare.host.to_str().unwrap(),
                bare.origin_form.to_string().as_str()
            ),
            ("node", "/")
        );
    }

    #[test]
    fn a_target_needs_an_absolute_http_or_https_uri_with_a_host() {
        for endpoint in [
            "",
            "not a uri",
            "/relative",
            "ftp://node/kick",
            "http://",
            "node:80",
        ] {
            assert!(
                Target::parse(endpoint).is_err(),
                "{endpoint:?} was accepted"
            );
        }
    }

    #[test]
    fn check_endpoint_applies_the_policy_to_the_host_without_a_lookup() {
        let kicker = HttpKicker::new();
        for accepted in [
            "http://127.0.0.1:9/kick",
            "https://[::1]:8443/kick",
            // A name is not looked up at claim time.
            "http://node.invalid/kick",
        ] {
            assert_eq!(kicker.check_endpoint(accepted), Ok(()), "{accepted}");
        }
        for refused in [
            "http://169.254.169.254/latest?token=s3cr3t",
            "http://[::ffff:169.254.169.254]/latest?token=s3cr3t",
            "http://0.0.0.0:9/kick",
            "http://[fe80::1]/kick",
            "http://[fd00:ec2::254]/latest?token=s3cr3t",
            "http://100.100.100.200/latest?token=s3cr3t",
            "http://168.63.129.16/machine?token=s3cr3t",
        ] {
            let reason = kicker.check_endpoint(refused).unwrap_err();
            assert!(
                !reason.contains("s3cr3t") && !reason.contains("169.254"),
                "{reason}"
            );
            assert!(
                !reason.contains("ec2") && !reason.contains("168.63"),
                "{reason}"
            );
        }
        assert_eq!(
            kicker.check_endpoint("http://exa mple/"),
            Err("not a uri the http kicker can send to".to_owned())
        );

        let deny = crate::EndpointPolicy::new().deny(["*.internal".parse().expect("a rule")]);
        let picky = HttpKicker::builder()
            .endpoint_policy(deny)
            .build()
            .expect("valid options");
        // Accepted by the default kicker on this thread first: the other kicker's memo
        // must not answer for the picky one, the first time or the second.
        for _ in 0..2 {
            assert_eq!(kicker.check_endpoint("http://Node.Internal:9/kick"), Ok(()));
            assert_eq!(
                picky.check_endpoint("http://Node.Internal:9/kick"),
                Err("matches the kick-endpoint deny list".to_owned())
            );
        }
        assert_eq!(picky.check_endpoint("http://node.external/kick"), Ok(()));
    }

    #[test]
    fn an_unrepresentable_timeout_is_far_in_the_future() {
        let deadline = deadline_after(Duration::MAX);
        assert!(deadline > Instant::now() + Duration::from_hours(24 * 365));
    }
}
