//! [`HttpTransport`]: the three calls of the wire contract over a pooled HTTP/1.1 client.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use serde::Serialize;
use serde::de::DeserializeOwned;
use unique_client::{ClaimInput, ClaimOutcome, Transport, async_trait};
use unique_core::{
    CurrentView, Error, Key, LogoutInput, LogoutOutcome, MAX_BATCH_KEYS, PoolRequest,
    PooledOutcome, ReleaseReason, SessionsPage, UserKey, UserSession,
};
use unique_wire::{
    BatchAnswer, BatchBody, BatchView, ClaimAnswer, ClaimBody, CurrentAnswer, InfoAnswer, KeyBody,
    LeaseRoute, LogoutAnswer, LogoutBody, PooledClaimAnswer, ReleaseAnswer, ReleaseBody,
    SessionsAnswer, UserBody,
};

use crate::builder::HttpTransportBuilder;
use crate::status::classify;

const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// A [`Transport`] speaking the `unique-server` wire contract: `POST /v1/claim`,
/// `/v1/current`, `/v1/release` with JSON bodies, over HTTP/1.1 keep-alive connections
/// (`http` or `https` with rustls).
///
/// Cheap to clone; clones share the connection pool. Each call is bounded by the
/// per-request timeout. Errors: 400 → `InvalidParams` (the server's message); 401 →
/// `Unauthenticated`; 403 → `Forbidden`; 404, 405 and 413 → `InvalidParams` naming the
/// status; 409 by the answer's `error` code: `superseded` → `Superseded` with the answer's
/// `gen` and `current_gen` (both 0 when it does not carry them readably), `too_many_slots`
/// → `TooManySlots` with its `limit`, `limit_reached` (a full `deny-new` pool) →
/// `LimitReached` with its `limit` and `sessions`, any other → `Unavailable`; 501 (a
/// lease-only server) → `InvalidParams` with the server's message; 429 → `Throttled`; 503,
/// other 5xx, any other status, connection failures, timeouts and unparseable or oversized
/// answers → `Unavailable`. Messages never contain the URL.
#[derive(Clone)]
pub struct HttpTransport {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: Client<unique_tls::Connector, Full<Bytes>>,
    pub(crate) endpoints: Endpoints,
    pub(crate) timeout: Duration,
    pub(crate) user_agent: HeaderValue,
    /// `Bearer <token>`, when the builder was given one.
    pub(crate) authorization: Option<HeaderValue>,
    pub(crate) max_response_body: usize,
}

/// The request URIs, derived once from the base URL.
#[derive(Debug)]
pub(crate) struct Endpoints {
    /// `scheme://authority` and the base URL's path prefix, without a trailing `/`: the
    /// node routes (`/v1/nodes/{node}/…`) are formed from it per node.
    pub(crate) base: String,
    pub(crate) claim: Uri,
    pub(crate) current: Uri,
    pub(crate) current_batch: Uri,
    pub(crate) release: Uri,
    pub(crate) logout: Uri,
    pub(crate) logout_all: Uri,
    pub(crate) sessions: Uri,
    pub(crate) info: Uri,
    pub(crate) ready: Uri,
    /// One per lease route, in the order of [`LeaseRoute::ALL`].
    pub(crate) leases: Vec<Uri>,
}

impl Endpoints {
    pub(crate) fn lease(&self, route: LeaseRoute) -> &Uri {
        // Built from LeaseRoute::ALL, so every route has its URI.
        &self.leases[route as usize]
    }

    /// `path` under the base URL; `path` is built from a checked node id, so it parses.
    pub(crate) fn at(&self, path: &str) -> Result<Uri, Error> {
        format!("{}{path}", self.base)
            .parse()
            .map_err(|_| Error::invalid("node route is not a valid url"))
    }
}

impl HttpTransport {
    /// A transport to the server at `base_url` (e.g. `http://127.0.0.1:7420`) with the
    /// default options. Errors as [`HttpTransportBuilder::build`].
    pub fn new(base_url: &str) -> Result<Self, Error> {
        Self::builder(base_url).build()
    }

    /// Starts configuring a transport to the server at `base_url`; a path in it is kept
    /// as a prefix (`https://h/unique` → `https://h/unique/v1/claim`).
    pub fn builder(base_url: impl Into<String>) -> HttpTransportBuilder {
        HttpTransportBuilder::new(base_url.into())
    }

    pub(crate) fn from_inner(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The user's online sessions, one per slot, sorted by slot: `POST /v1/sessions`, an
    /// operator's question (no node needs it), page after page until the server says no
    /// more remain.
    ///
    /// # Errors
    ///
    /// As every call: `InvalidParams` for a refused request, `Unauthenticated` /
    /// `Forbidden` for refused credentials, `Throttled`, `Unavailable` (also for a server
    /// whose `next` does not move forward, which would page forever).
    pub async fn sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let mut sessions = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.sessions_page(user, after.as_deref(), None).await?;
            sessions.extend(page.sessions);
            match page.next {
                Some(next) if after.as_ref().is_none_or(|a| *a < next) => after = Some(next),
                Some(_) => {
                    return Err(Error::unavailable(
                        "sessions: the server's next page does not move forward",
                    ));
                }
                None => return Ok(sessions),
            }
        }
    }

    /// One page of the user's online sessions: at most `limit` (the server's default, 100,
    /// when `None`; at most 1000) whose slot sorts after `after`, and the `next` page's
    /// `after` when more remain.
    ///
    /// # Errors
    ///
    /// As [`sessions`](Self::sessions); a `limit` or `after` the server refuses is
    /// `InvalidParams`.
    pub async fn sessions_page(
        &self,
        user: &UserKey,
        after: Option<&str>,
        limit: Option<u64>,
    ) -> Result<SessionsPage, Error> {
        let body = UserBody {
            limit,
            after: after.map(Cow::Borrowed),
            ..UserBody::from(user)
        };
        let answer: SessionsAnswer = self
            .post("sessions", &self.inner.endpoints.sessions, &body)
            .await?;
        Ok(SessionsPage {
            sessions: answer.sessions.into_iter().map(UserSession::from).collect(),
            next: answer.next,
        })
    }

    /// An admin logout of the key's current session: `POST /v1/logout`, which needs a token
    /// with the `admin` role when the server has tokens (a 403 is `InvalidParams`).
    ///
    /// # Errors
    ///
    /// As [`sessions`](Self::sessions).
    pub async fn logout(&self, input: &LogoutInput) -> Result<LogoutOutcome, Error> {
        let answer: LogoutAnswer = self
            .post(
                "logout",
                &self.inner.endpoints.logout,
                &LogoutBody::from(input),
            )
            .await?;
        Ok(answer.into())
    }

    /// An admin logout of every online session of the user (the default slot, named slots and
    /// pool places): `POST /v1/logout/all`, which needs a token with the `admin` role when the
    /// server has tokens. One `(slot, outcome)` per session the server's listing found, in
    /// listing order, each as [`logout`](Self::logout) of that slot answers; empty for none.
    ///
    /// # Errors
    ///
    /// As [`logout`](Self::logout); a server older than the route answers 404, which is
    /// `InvalidParams`.
    pub async fn logout_all(
        &self,
        input: &unique_core::UserLogoutInput,
    ) -> Result<Vec<(String, LogoutOutcome)>, Error> {
        let answer: unique_wire::LogoutAllAnswer = self
            .post(
                "logout_all",
                &self.inner.endpoints.logout_all,
                &unique_wire::UserLogoutBody::from(input),
            )
            .await?;
        Ok(answer
            .sessions
            .into_iter()
            .map(unique_wire::SlotLogoutEntry::into_parts)
            .collect())
    }

    /// What the server says about itself: `GET /v1/info` (version, caller authentication,
    /// kick signing key ids, features, limits). Open on every server: no token needed, though
    /// the transport's is sent. Check it at start, before serving: a node whose kick receiver
    /// verifies signatures hands it to `unique_kickrecv::KickReceiverBuilder::server_info`.
    ///
    /// # Errors
    ///
    /// As every call; a server older than the route answers 404, which is `InvalidParams`.
    pub async fn info(&self) -> Result<InfoAnswer, Error> {
        let (status, body) = self
            .exchange(
                "info",
                Request::get(self.inner.endpoints.info.clone()),
                None,
            )
            .await?;
        classify("info", status, &body)
    }

    /// Whether the server's store answers: `GET /readyz`, open on every server. `Ok` for 200;
    /// 503 is `Unavailable` with the server's reason (`store not ready: …`).
    ///
    /// # Errors
    ///
    /// `Unavailable` when not ready, unreachable or answering anything but 200 or 503.
    pub async fn ready(&self) -> Result<(), Error> {
        let (status, body) = self
            .exchange(
                "ready",
                Request::get(self.inner.endpoints.ready.clone()),
                None,
            )
            .await?;
        match status {
            StatusCode::OK => Ok(()),
            StatusCode::SERVICE_UNAVAILABLE => Err(Error::unavailable(
                unique_wire::error_message(&body).unwrap_or_else(|| "not ready".to_owned()),
            )),
            other => Err(Error::unavailable(format!(
                "ready: unexpected status {}",
                other.as_u16()
            ))),
        }
    }

    /// POSTs `body` as JSON to `uri` and classifies the answer.
    pub(crate) async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        op: &'static str,
        uri: &Uri,
        body: &B,
    ) -> Result<T, Error> {
        let (status, body) = self.send(op, uri, body).await?;
        let result = classify(op, status, &body);
        if let Err(error) = &result {
            tracing::debug!(op, status = status.as_u16(), %error, "unique server call failed");
        }
        result
    }

    /// POSTs `body` as JSON to `uri` and reads the whole answer, whatever its status. Every
    /// failure is `Unavailable`: the request may or may not have reached the server.
    pub(crate) async fn send<B: Serialize>(
        &self,
        op: &'static str,
        uri: &Uri,
        body: &B,
    ) -> Result<(StatusCode, Bytes), Error> {
        let json = serde_json::to_vec(body).map_err(|e| {
            Error::unavailable_with(format!("{op} request could not be encoded"), e)
        })?;
        self.exchange(op, Request::post(uri.clone()), Some(Bytes::from(json)))
            .await
    }

    /// Sends `request` (with `json` as its body, when given) and reads the whole answer,
    /// whatever its status; every failure is `Unavailable`.
    async fn exchange(
        &self,
        op: &'static str,
        request: http::request::Builder,
        json: Option<Bytes>,
    ) -> Result<(StatusCode, Bytes), Error> {
        let inner = &*self.inner;
        let mut request = request
            .header(ACCEPT, JSON)
            .header(USER_AGENT, inner.user_agent.clone());
        if json.is_some() {
            request = request.header(CONTENT_TYPE, JSON);
        }
        if let Some(authorization) = &inner.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let request = request
            .body(Full::new(json.unwrap_or_default()))
            .map_err(|e| Error::unavailable_with(format!("{op} request could not be built"), e))?;

        let exchange = async {
            let response = inner.client.request(request).await.map_err(|e| {
                let what = if e.is_connect() {
                    "connection failed"
                } else {
                    "request failed"
                };
                Error::unavailable_with(format!("{op}: {what}"), e)
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), inner.max_response_body)
                .collect()
                .await
                .map_err(|e| {
                    Error::unavailable_with(format!("{op}: response body could not be read"), e)
                })?
                .to_bytes();
            Ok::<(StatusCode, Bytes), Error>((status, body))
        };
        tokio::time::timeout(inner.timeout, exchange)
            .await
            .map_err(|_| {
                Error::unavailable(format!("{op}: no answer within {:?}", inner.timeout))
            })?
    }

    /// The URI of a lease route.
    pub(crate) fn lease_uri(&self, route: LeaseRoute) -> &Uri {
        self.inner.endpoints.lease(route)
    }
}

#[async_trait]
impl Transport for HttpTransport {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        let answer: ClaimAnswer = self
            .post(
                "claim",
                &self.inner.endpoints.claim,
                &ClaimBody::from(request),
            )
            .await?;
        Ok(answer.into())
    }

    /// `POST /v1/claim` with `"pool"`; the answer's `slot` and `evicted` are read into the
    /// [`PooledOutcome`]. A 409 `limit_reached` is `LimitReached` with the places online.
    async fn claim_pooled(
        &self,
        request: &ClaimInput,
        pool: &PoolRequest,
    ) -> Result<PooledOutcome, Error> {
        let answer: PooledClaimAnswer = self
            .post(
                "claim",
                &self.inner.endpoints.claim,
                &ClaimBody::from(request).with_pool(pool),
            )
            .await?;
        Ok(answer.into())
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        let answer: CurrentAnswer = self
            .post(
                "current",
                &self.inner.endpoints.current,
                &KeyBody::from(key),
            )
            .await?;
        Ok(answer.into())
    }

    /// One `POST /v1/current/batch` per [`MAX_BATCH_KEYS`] keys, one after another.
    async fn current_batch(&self, keys: &[Key]) -> Result<Vec<Result<CurrentView, Error>>, Error> {
        let mut views = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MAX_BATCH_KEYS) {
            let answer: BatchAnswer = self
                .post(
                    "current_batch",
                    &self.inner.endpoints.current_batch,
                    &BatchBody::new(chunk),
                )
                .await?;
            if answer.views.len() != chunk.len() {
                return Err(Error::unavailable(format!(
                    "current_batch: {} views for {} keys",
                    answer.views.len(),
                    chunk.len()
                )));
            }
            views.extend(answer.views.into_iter().map(BatchView::into_result));
        }
        Ok(views)
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.post::<_, ReleaseAnswer>(
            "release",
            &self.inner.endpoints.release,
            &ReleaseBody::new(key, generation),
        )
        .await
        .map(|r| r.released)
    }

    /// `POST /v1/release` with `reason`. A server older than the field refuses it as an
    /// unknown field (400, `InvalidParams`): then the release is sent again without it, so a
    /// draining node still hands its keys back during a rolling upgrade (a key the server
    /// finds invalid is refused by the plain release too).
    async fn release_with_reason(
        &self,
        key: &Key,
        generation: i64,
        reason: ReleaseReason,
    ) -> Result<bool, Error> {
        let body = ReleaseBody::new(key, generation).with_reason(Some(reason));
        let told = self
            .post::<_, ReleaseAnswer>("release", &self.inner.endpoints.release, &body)
            .await;
        match told {
            Err(Error::InvalidParams(_)) => self.release(key, generation).await,
            told => told.map(|r| r.released),
        }
    }
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL is left out on purpose: it may carry a secret in its path.
        f.debug_struct("HttpTransport")
            .field("timeout", &self.inner.timeout)
            .field("max_response_body", &self.inner.max_response_body)
            .finish_non_exhaustive()
    }
}
