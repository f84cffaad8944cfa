//! Routing and the tower service around an [`Arbiter`].

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::audit::{AuditEvent, AuditSink, Auditor, RefusalReason};
use crate::auth::{Grant, Role, SharedTokens, Unauthenticated};
pub use crate::body::ResponseBody;
use crate::info::{Facts, NO_PUSH_KICKS, NO_SESSIONS, Told};
use crate::leases::{self, LeaseService};
use crate::peer::{self, PeerSecret, Peers, StreamDirectory};
use crate::push::{KickHub, OpenRefused};
use crate::request_id::RequestId;
use crate::telemetry::{self, Refusal};
use bytes::Bytes;
use http::header::{
    ALLOW, CACHE_CONTROL, CONNECTION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE,
};
use http::{Request, Response, StatusCode};
use http_body::Body;
use serde::Serialize;
use tracing::Instrument;
use unique_core::{
    Arbiter, ClaimInput, DEFAULT_SESSIONS_PAGE, Error, Key, LogoutInput, PoolRequest, SlotLogout,
    Store, UserKey, UserLogoutInput, check_node_id,
};
use unique_listener::PeerAddr;
use unique_wire::push::NDJSON_CONTENT_TYPE;
use unique_wire::{
    BatchAnswer, BatchBody, BatchView, BodyError, CurrentAnswer, ErrorBody, ErrorCode, InfoAnswer,
    InfoKicks, KeyBody, LogoutAllAnswer, LogoutAnswer, LogoutBody, ReleaseAnswer, ReleaseBody,
    Route, SessionEntry, SessionsAnswer, SlotLogoutEntry, UserBody, UserLogoutBody, parse,
    parse_claim, read_body, write_claim_answer, write_pooled_claim_answer,
};
use unique_wire::{KickAckAnswer, KickAckBody, PeerRoute, parse_node_kicks_path};

/// Largest request body accepted; larger bodies get 413.
pub use unique_wire::MAX_REQUEST_BODY_BYTES as MAX_BODY_BYTES;

/// How long `/readyz` waits for the store's [`Store::check_ready`] by default.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves the wire contract over an [`Arbiter`].
///
/// A [`tower_service::Service`] for any request body whose data is [`Bytes`]: mount it in
/// axum or any tower stack, or on a bare hyper connection through
/// `hyper_util::service::TowerToHyperService` (what [`serve`](crate::serve) does). Cloning is
/// cheap.
pub struct ArbiterService<S> {
    arbiter: Arbiter<S>,
    /// `None`: every caller may act on every key (a network where every host is trusted).
    tokens: Option<SharedTokens>,
    /// `None`: no audit log; a session event costs this check only.
    audit: Option<Auditor>,
    /// `None`: the lease routes answer 501.
    leases: Option<Arc<dyn LeaseService>>,
    ready_timeout: Duration,
    /// Kick signing, store kind, sessions on or off: what `/v1/info` says beyond the above.
    told: Told,
    /// `None`: the kick-stream routes answer 501.
    push: Option<KickHub>,
    /// `None`: the peer routes are not served (404), acks are never forwarded.
    peers: Option<Peers>,
}

impl<S> Clone for ArbiterService<S> {
    fn clone(&self) -> Self {
        Self {
            arbiter: self.arbiter.clone(),
            tokens: self.tokens.clone(),
            audit: self.audit.clone(),
            leases: self.leases.clone(),
            ready_timeout: self.ready_timeout,
            told: self.told.clone(),
            push: self.push.clone(),
            peers: self.peers.clone(),
        }
    }
}

impl<S: Store> ArbiterService<S> {
    /// Wraps an arbiter. Without [`with_tokens`](Self::with_tokens) every caller is
    /// trusted: serve it only where every host that can reach it is.
    ///
    /// Releases that name a reason are counted in `unique_releases_by_reason_total{reason,
    /// released}` through the `metrics` facade; the series are registered here (install a
    /// recorder first for them to read 0 before the first such release).
    pub fn new(arbiter: Arbiter<S>) -> Self {
        telemetry::register_release_reasons();
        telemetry::register_pool_evictions();
        Self {
            arbiter,
            tokens: None,
            audit: None,
            leases: None,
            ready_timeout: DEFAULT_READY_TIMEOUT,
            told: Told::default(),
            push: None,
            peers: None,
        }
    }

    /// Requires a bearer token from [`Tokens`](crate::Tokens) on every `/v1/*` request: a
    /// missing or unknown token gets 401 `unauthenticated`, a key outside the token's scope
    /// 403 `forbidden`, both before the arbiter is called. `/healthz` and `/readyz` stay open.
    ///
    /// Pass a [`SharedTokens`] (and keep a clone) to replace the set later while the service
    /// runs ([`SharedTokens::replace`]); a plain `Tokens` is fixed for the service's life.
    ///
    /// Refusals are counted in `unique_auth_rejections_total{reason}` through the `metrics`
    /// facade, with handles registered here: install a recorder before calling this.
    #[must_use]
    pub fn with_tokens(mut self, tokens: impl Into<SharedTokens>) -> Self {
        telemetry::rejections();
        self.tokens = Some(tokens.into());
        self
    }

    /// How long `/readyz` waits for the store's [`Store::check_ready`] before answering 503
    /// (default [`DEFAULT_READY_TIMEOUT`]).
    #[must_use]
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Records every session event in `sink`, and waits for [`AuditSink::sync`], before its
    /// answer is sent: first logins, takeovers, replays and superseded retries of claims,
    /// releases and admin logouts, one record each. Callers refused with 401 or 403 are
    /// tallied per source address, reason, path and token, and each tally is one record
    /// written every [`REFUSAL_INTERVAL`](crate::REFUSAL_INTERVAL) (by a task on the runtime
    /// of the first refusal) and by [`flush_audit`](Self::flush_audit): a flood of refusals
    /// costs a bounded number of lines. Reads and probes are not recorded. See
    /// [`AuditRecord`](crate::AuditRecord) for the line format.
    ///
    /// Fails closed: when `sink` cannot record a session event, the request is answered 503
    /// `unavailable` ([`AUDIT_UNAVAILABLE`](crate::AUDIT_UNAVAILABLE)) although the event
    /// already took effect in the store (the claim was written, the session released), so no
    /// caller hears of an event the log does not hold. A claimer retries with the same
    /// claim_id and is answered by the replay, which is recorded once the sink works again;
    /// a release retried with the same gen is `released` again. A refused caller is refused
    /// whether or not its record is written. Failures are counted in
    /// [`unique_audit_write_errors_total`](crate::AUDIT_WRITE_ERRORS_TOTAL) (handle
    /// registered here: install a recorder first) and logged with the record, at most
    /// [`LOGGED_FAILURES_PER_INTERVAL`](crate::LOGGED_FAILURES_PER_INTERVAL) an interval and
    /// one line saying how many more.
    #[must_use]
    pub fn with_audit(mut self, sink: impl AuditSink) -> Self {
        self.audit = Some(Auditor::new(sink));
        self
    }

    /// Writes the refusals tallied so far to the audit sink and waits for it to make them
    /// durable (for a shutdown: call it once the server has stopped serving). Without an
    /// audit sink, nothing.
    pub async fn flush_audit(&self) {
        if let Some(audit) = &self.audit {
            audit.flush().await;
        }
    }

    /// Serves the lease routes (`POST /v1/lease/ensure`, `/v1/lease/verify`,
    /// `/v1/lease/release`, `/v1/lease/lookup`, `/v1/nodes/register`, `/v1/nodes/lookup`,
    /// `/v1/nodes/deregister`) on `leases`; without it they answer 501 `not_implemented`.
    ///
    /// Each project's rooms and nodes are its own (stored as `<project>#<id>`). With
    /// tokens, a request needs a token whose scope holds the project with every env (403
    /// `forbidden` otherwise, recorded in the audit log like every refusal); ttls are
    /// `1..=`[`MAX_LEASE_TTL_MS`](unique_wire::MAX_LEASE_TTL_MS) milliseconds and ids at most
    /// [`MAX_LEASE_ID_CHARS`](unique_wire::MAX_LEASE_ID_CHARS) characters (400 otherwise). The
    /// directory's `InvalidParams` is 400, `Unavailable` 503, `Corrupt` 500 `corrupt` and
    /// `Backend` 500 `internal`.
    #[must_use]
    pub fn with_leases(mut self, leases: Arc<dyn LeaseService>) -> Self {
        self.leases = Some(leases);
        self
    }

    /// Tells `GET /v1/info` how the arbiter's kicker signs kicks: `signing` is called on
    /// every info request, so keys replaced while the service runs show at once. The service
    /// cannot see its kicker: without this call `/v1/info` says kicks are unsigned, and a
    /// node whose receiver verifies signatures refuses to start against it.
    #[must_use]
    pub fn with_kick_signing(
        mut self,
        signing: impl Fn() -> InfoKicks + Send + Sync + 'static,
    ) -> Self {
        self.told.kick_signing = Some(Arc::new(signing));
        self
    }

    /// Serves push kicks through `hub` (`docs/design.md#push-kicks`): `GET
    /// /v1/nodes/{node}/kicks` opens the node's kick stream, `POST /v1/nodes/{node}/kicks/ack`
    /// answers a pushed kick, and `/v1/info` lists `push_kicks`. Give the same hub (behind
    /// [`KickDelivery`](crate::KickDelivery)) to the arbiter's kicker so it pushes the kicks
    /// of node owners. Without it both routes answer 501 `not_implemented`.
    ///
    /// The stream needs a token like every `/v1` route; a kick is pushed only to a stream
    /// whose token covers the kick's key, and acked only with a token that covers it.
    #[must_use]
    pub fn with_push_kicks(mut self, hub: KickHub) -> Self {
        self.told.push_kicks = true;
        self.push = Some(hub);
        self
    }

    /// Joins this server's kick streams to the other servers of the deployment
    /// (`docs/design.md#push-kicks-across-servers`): the hub given to
    /// [`with_push_kicks`](Self::with_push_kicks) registers its streams in `directory`, an ack
    /// for a kick not waiting here is forwarded through it, and `POST /v1/peer/kick` and
    /// `POST /v1/peer/ack` are served to callers holding `secret` (401 otherwise; 404 without
    /// this). `epoch` names this run of the server: a forwarded kick naming another is
    /// `connect-error`. Call it after `with_push_kicks`; without a hub it does nothing.
    #[must_use]
    pub fn with_peers(
        mut self,
        secret: PeerSecret,
        epoch: impl Into<String>,
        directory: Arc<dyn StreamDirectory>,
    ) -> Self {
        if let Some(hub) = &self.push {
            hub.attach_directory(Arc::clone(&directory));
            self.peers = Some(Peers {
                secret,
                epoch: epoch.into(),
                directory,
            });
        }
        self
    }

    /// Names the kind of store in `GET /v1/info` (`fjall`, `postgres`, …); without it the
    /// answer's `store` is null.
    #[must_use]
    pub fn store_kind(mut self, kind: impl Into<String>) -> Self {
        self.told.store = Some(kind.into().into());
        self
    }

    /// A lease-only service: the session routes (`/v1/claim`, `/v1/current`,
    /// `/v1/current/batch`, `/v1/release`, `/v1/logout`, `/v1/logout/all`, `/v1/sessions`)
    /// answer 501 `not_implemented`, before authentication and without reading the body, and
    /// `/v1/info` says `sessions: false` and unsigned kicks (none are ever sent). The
    /// arbiter is kept only for `/readyz`, which asks its store.
    #[must_use]
    pub fn without_sessions(mut self) -> Self {
        self.told.sessions = false;
        self
    }

    /// What `GET /v1/info` answers now: the version, whether callers need a token, the kick
    /// signing key ids (never keys), the features and the limits.
    pub fn info(&self) -> InfoAnswer {
        Facts {
            told: &self.told,
            auth: self.tokens.is_some(),
            leases: self.leases.is_some(),
            limits: self.arbiter.validation_limits(),
            max_slots_per_user: self.arbiter.max_slots_per_user(),
            session_limit: self.arbiter.default_session_limit(),
            project_session_limits: self
                .arbiter
                .project_session_limits()
                .map(|(project, limit)| (project.to_owned(), limit))
                .collect(),
        }
        .answer()
    }

    /// Answers one request. Never fails: every problem is an HTTP answer.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<unique_core::BoxError>,
    {
        if let Some(route) = PeerRoute::from_path(req.uri().path()) {
            return self.peer(route, req).await;
        }
        let route = match Route::from_path(req.uri().path()) {
            Some(route) if !route.allows(req.method()) => {
                return method_not_allowed(route.allowed_methods());
            }
            Some(Route::Health) => return text(StatusCode::OK, "ok"),
            Some(Route::Ready) => return self.ready().await,
            // Open like the probes: it holds no secret, and a 401 would tell as much.
            Some(Route::Info) => return json(StatusCode::OK, &self.info()),
            Some(Route::Lease(route)) => Route::Lease(route),
            Some(Route::NodeKicks | Route::NodeKicksAck)
                if self.push.is_none() || !self.told.sessions =>
            {
                return error(ErrorCode::NotImplemented, NO_PUSH_KICKS);
            }
            Some(_) if !self.told.sessions => {
                return error(ErrorCode::NotImplemented, NO_SESSIONS);
            }
            Some(route) => route,
            None => return error(ErrorCode::NotFound, "no such path"),
        };
        let source = req.extensions().get::<PeerAddr>().map(|peer| peer.ip());
        let request_id = RequestId::of(req.headers()).with_source(source);
        // Authenticated before the body is read: a refused caller costs no more than this.
        // The request keeps the set in force now, even if it is replaced meanwhile.
        let tokens = self.tokens.as_ref().map(SharedTokens::get);
        let grant = match tokens.as_deref().map(|t| t.authenticate(req.headers())) {
            None => None,
            Some(Ok(grant)) => Some(grant),
            Some(Err(why)) => {
                self.refused(why.into(), route, None, &request_id);
                return unauthenticated(why);
            }
        };
        // The node of a push route, checked before the body is read.
        let node = match route {
            Route::NodeKicks | Route::NodeKicksAck => {
                let node = parse_node_kicks_path(req.uri().path()).map_or("", |(_, node)| node);
                if let Err(e) = check_node_id(node) {
                    return error_body(ErrorBody::from_error(&e));
                }
                node.to_owned()
            }
            _ => String::new(),
        };
        if route == Route::NodeKicks {
            return self.kick_stream(&node, grant);
        }
        let body = match request_body(req.into_body()).await {
            Ok(body) => body,
            Err(refused) => return refused,
        };
        let result = match route {
            Route::Claim => self.claim(&body, grant, &request_id).await,
            Route::Current => self.current(&body, grant, &request_id).await,
            Route::CurrentBatch => self.current_batch(&body, grant, &request_id).await,
            Route::Release => self.release(&body, grant, &request_id).await,
            Route::Logout => self.logout(&body, grant, &request_id).await,
            Route::LogoutAll => self.logout_all(&body, grant, &request_id).await,
            Route::Sessions => self.sessions(&body, grant, &request_id).await,
            Route::Lease(route) => {
                let call = leases::Call {
                    body: &body,
                    grant,
                    audit: self.audit.as_ref(),
                    request_id: &request_id,
                    limits: self.arbiter.validation_limits(),
                };
                return leases::answer(self.leases.as_ref(), route, call).await;
            }
            // Answered above, before authentication and without reading a body.
            Route::Health => return text(StatusCode::OK, "ok"),
            Route::Ready => return self.ready().await,
            Route::Info => return json(StatusCode::OK, &self.info()),
            Route::NodeKicksAck => Ok(self.kick_ack(&node, &body, grant).await),
            // Answered above, before the body is read.
            Route::NodeKicks => return self.kick_stream(&node, grant),
        };
        result.unwrap_or_else(|e| error_body(ErrorBody::from_error(&e)))
    }

    /// `/readyz`: `ok` when the store answers within the ready timeout; any failure is 503
    /// `unavailable` with its reason (a throttle too: the store cannot take this server's
    /// traffic now).
    async fn ready(&self) -> Response<ResponseBody> {
        let within = self.ready_timeout;
        match tokio::time::timeout(within, self.arbiter.store().check_ready()).await {
            Ok(Ok(())) => text(StatusCode::OK, "ok"),
            Ok(Err(e)) => {
                let reason = ErrorBody::from_error(&e).message;
                error(
                    ErrorCode::Unavailable,
                    &format!("store not ready: {reason}"),
                )
            }
            Err(_) => error(
                ErrorCode::Unavailable,
                &format!("store not ready: no answer within {within:?}"),
            ),
        }
    }

    async fn claim(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let (input, pool) = parse_claim(body)?.into_claim()?;
        if let Some(refused) = self.scope(Route::Claim, grant, &input.key, request_id) {
            return Ok(refused);
        }
        if let Some(pool) = pool {
            return self.claim_pooled(&input, &pool, grant, request_id).await;
        }
        let span = request_id.span("claim", &input.key);
        let outcome = match self.arbiter.claim(&input).instrument(span).await {
            Ok(outcome) => outcome,
            Err(e) => {
                if let Error::Superseded {
                    generation,
                    current,
                } = e
                {
                    let event = AuditEvent::Superseded {
                        generation,
                        current_generation: current,
                    };
                    self.audit(event, &input.key, grant, request_id).await?;
                }
                return Err(e);
            }
        };
        self.audit(
            AuditEvent::of_claim(&outcome),
            &input.key,
            grant,
            request_id,
        )
        .await?;
        Ok(answer(StatusCode::OK, |out| {
            write_claim_answer(out, &outcome);
        }))
    }

    /// A pooled claim: audited under the place taken (an eviction, a first login, a replay)
    /// or, refused, under the user's key (`limit-reached`, `superseded`).
    async fn claim_pooled(
        &self,
        input: &ClaimInput,
        pool: &PoolRequest,
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let span = request_id.span("claim", &input.key);
        let outcome = match self
            .arbiter
            .claim_pooled(input, pool)
            .instrument(span)
            .await
        {
            Ok(outcome) => outcome,
            Err(e) => {
                let event = match e {
                    Error::Superseded {
                        generation,
                        current,
                    } => Some(AuditEvent::Superseded {
                        generation,
                        current_generation: current,
                    }),
                    Error::LimitReached { limit, .. } => Some(AuditEvent::LimitReached { limit }),
                    _ => None,
                };
                if let Some(event) = event {
                    self.audit(event, &input.key, grant, request_id).await?;
                }
                return Err(e);
            }
        };
        if outcome.evicted && !outcome.claim.replayed {
            telemetry::count_pool_eviction();
        }
        let limit = pool
            .limit
            .unwrap_or_else(|| self.arbiter.session_limit(&input.key.project));
        let place = input.key.user().key(outcome.slot.as_str());
        let event = AuditEvent::of_pooled_claim(&outcome, limit);
        self.audit(event, &place, grant, request_id).await?;
        Ok(answer(StatusCode::OK, |out| {
            write_pooled_claim_answer(out, &outcome);
        }))
    }

    async fn current(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let key: Key = parse::<KeyBody>(body)?.into();
        if let Some(refused) = self.scope(Route::Current, grant, &key, request_id) {
            return Ok(refused);
        }
        let span = request_id.span("current", &key);
        let view = self.arbiter.current(&key).instrument(span).await?;
        Ok(json(StatusCode::OK, &CurrentAnswer::from(view)))
    }

    /// Every key is checked (count, fields, scope) before the one store round trip.
    async fn current_batch(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let keys = parse::<BatchBody>(body)?.into_keys()?;
        let refused = keys
            .iter()
            .find_map(|key| self.scope(Route::CurrentBatch, grant, key, request_id));
        if let Some(refused) = refused {
            return Ok(refused);
        }
        let span = request_id.batch_span("current_batch", keys.len());
        let results = self.arbiter.current_batch(&keys).instrument(span).await?;
        let answer = BatchAnswer {
            views: results.iter().map(BatchView::from_result).collect(),
        };
        Ok(json(StatusCode::OK, &answer))
    }

    async fn release(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let request = parse::<ReleaseBody>(body)?;
        let reason = request.reason;
        let (key, generation) = request.into_parts();
        if let Some(refused) = self.scope(Route::Release, grant, &key, request_id) {
            return Ok(refused);
        }
        let span = request_id.span("release", &key);
        let released = self
            .arbiter
            .release(&key, generation)
            .instrument(span)
            .await?;
        if let Some(reason) = reason {
            telemetry::count_release(reason, released);
        }
        let event = AuditEvent::Release {
            generation,
            released,
            reason,
        };
        self.audit(event, &key, grant, request_id).await?;
        Ok(json(StatusCode::OK, &ReleaseAnswer { released }))
    }

    /// A user's online sessions: scoped by the token like any key of the user (a token
    /// covers a user's slots together, since scopes name projects and envs).
    async fn sessions(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let mut request = parse::<UserBody>(body)?;
        let (limit, after) = (request.limit, request.after.take());
        let user = UserKey::from(request);
        let key = user.key("");
        if let Some(refused) = self.scope(Route::Sessions, grant, &key, request_id) {
            return Ok(refused);
        }
        // A limit past usize is past the page's maximum too.
        let limit = limit.map_or(DEFAULT_SESSIONS_PAGE, |l| {
            usize::try_from(l).unwrap_or(usize::MAX)
        });
        let span = request_id.span("sessions", &key);
        let page = self
            .arbiter
            .sessions_page(&user, after.as_deref(), limit)
            .instrument(span)
            .await?;
        let sessions = page.sessions.into_iter().map(SessionEntry::from).collect();
        Ok(json(
            StatusCode::OK,
            &SessionsAnswer {
                sessions,
                next: page.next,
            },
        ))
    }

    /// An admin logout: the token must hold the admin role and cover the key (both 403
    /// `forbidden`, decided after the body is parsed, before the arbiter is called).
    async fn logout(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let input: LogoutInput = parse::<LogoutBody>(body)?.into();
        if let Some(refused) = lacks_role(grant, Role::Admin) {
            let reason = RefusalReason::MissingRole;
            self.refused(reason, Route::Logout, grant, request_id);
            return Ok(refused);
        }
        if let Some(refused) = self.scope(Route::Logout, grant, &input.key, request_id) {
            return Ok(refused);
        }
        let span = request_id.span("logout", &input.key);
        let outcome = self.arbiter.logout(&input).instrument(span).await?;
        self.audit(
            AuditEvent::of_logout(&outcome),
            &input.key,
            grant,
            request_id,
        )
        .await?;
        Ok(json(StatusCode::OK, &LogoutAnswer::from(outcome)))
    }

    /// An admin logout of every online session of a user: authorised as [`logout`](Self::logout)
    /// (the admin role, and the token's scope covering the user: a scope names projects and
    /// envs, so it covers all of a user's slots). Each listed session's logout is recorded as
    /// `/v1/logout` records it, under its slot. When a slot's store call failed, the others
    /// are recorded all the same and the first failure is the answer (429 or 503): a repeat
    /// logs out what is still online.
    async fn logout_all(
        &self,
        body: &[u8],
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<Response<ResponseBody>, Error> {
        let input: UserLogoutInput = parse::<UserLogoutBody>(body)?.into();
        if let Some(refused) = lacks_role(grant, Role::Admin) {
            let reason = RefusalReason::MissingRole;
            self.refused(reason, Route::LogoutAll, grant, request_id);
            return Ok(refused);
        }
        let user_key = input.user.key("");
        if let Some(refused) = self.scope(Route::LogoutAll, grant, &user_key, request_id) {
            return Ok(refused);
        }
        let span = request_id.span("logout_all", &user_key);
        let logouts = self.arbiter.logout_all(&input).instrument(span).await?;
        let mut sessions = Vec::with_capacity(logouts.len());
        let mut failed = None;
        for SlotLogout { slot, result } in logouts {
            match result {
                Ok(outcome) => {
                    let key = input.user.key(slot.as_str());
                    let event = AuditEvent::of_logout(&outcome);
                    self.audit(event, &key, grant, request_id).await?;
                    sessions.push(SlotLogoutEntry::new(slot, outcome));
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(json(StatusCode::OK, &LogoutAllAnswer { sessions }))
    }

    /// Records a session event in the audit log, when there is one, and waits until it is
    /// durable, before its answer: `Unavailable` (503) when it cannot be written, though the
    /// event took effect (see [`with_audit`](Self::with_audit)). Without an audit log, one
    /// `Option` check.
    #[inline]
    async fn audit(
        &self,
        event: AuditEvent,
        key: &Key,
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<(), Error> {
        match &self.audit {
            None => Ok(()),
            Some(audit) => audit.session(event, key, grant, request_id).await,
        }
    }

    /// Tallies a caller refused with 401 or 403 on `route`, when there is an audit log (one
    /// record per source, reason, path and token each interval); the caller is refused
    /// whether or not the record is written.
    /// `GET /v1/nodes/{node}/kicks`: the node's kick stream, an NDJSON body that ends only
    /// when the server ends the stream (a newer stream, a slow reader, shutdown) or the
    /// connection closes. The connection is not reused after it (`Connection: close`), and
    /// the listener keeps it out of its idle timeout while the body lasts.
    fn kick_stream(&self, node: &str, grant: Option<&Grant>) -> Response<ResponseBody> {
        let Some(hub) = &self.push else {
            return error(ErrorCode::NotImplemented, NO_PUSH_KICKS);
        };
        let handle = match hub.open(node, grant) {
            Ok(handle) => handle,
            Err(OpenRefused::Full) => {
                let mut refused = error(
                    ErrorCode::Unavailable,
                    "too many kick streams on this server; retry",
                );
                refused
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static("1"));
                return refused;
            }
            Err(OpenRefused::TokenFull) => {
                return error(
                    ErrorCode::Throttled,
                    "too many kick streams for this token (--max-kick-streams-per-token)",
                );
            }
        };
        let mut res = Response::new(ResponseBody::stream(handle));
        let headers = res.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(NDJSON_CONTENT_TYPE));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
        res.extensions_mut().insert(unique_listener::LongLived);
        res
    }

    /// `POST /v1/nodes/{node}/kicks/ack`: `{"accepted": true}` when the kick was waiting
    /// here for this node and the caller's token covers its key.
    /// An ack no kick here waits for is handed to the server holding the node's stream, when
    /// this server has peers.
    async fn kick_ack(
        &self,
        node: &str,
        body: &[u8],
        grant: Option<&Grant>,
    ) -> Response<ResponseBody> {
        let Some(hub) = &self.push else {
            return error(ErrorCode::NotImplemented, NO_PUSH_KICKS);
        };
        let ack: KickAckBody = match parse(body) {
            Ok(ack) => ack,
            Err(e) => return error_body(ErrorBody::from_error(&e)),
        };
        let mut accepted = hub.ack(node, &ack.id, ack.status, grant);
        if !accepted && let Some(peers) = &self.peers {
            accepted = peers.directory.forward_ack(node, &ack.id, ack.status).await;
        }
        json(StatusCode::OK, &KickAckAnswer { accepted })
    }

    /// `POST /v1/peer/kick`, `POST /v1/peer/ack`: another server's request, with the peer
    /// secret. Not served (404) without [`with_peers`](Self::with_peers).
    async fn peer<B>(&self, route: PeerRoute, req: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<unique_core::BoxError>,
    {
        let (Some(peers), Some(hub)) = (&self.peers, &self.push) else {
            return error(ErrorCode::NotFound, "no such path");
        };
        if req.method() != http::Method::POST {
            return method_not_allowed("POST");
        }
        if !peers.secret.admits(req.headers()) {
            return peer::refused();
        }
        match request_body(req.into_body()).await {
            Ok(body) => peers.answer(route, hub, &body).await,
            Err(refused) => refused,
        }
    }

    fn refused(
        &self,
        reason: RefusalReason,
        route: Route,
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) {
        if let Some(audit) = &self.audit {
            audit.refused(reason, route.path(), grant, request_id);
        }
    }

    /// [`forbidden`], recorded in the audit log.
    fn scope(
        &self,
        route: Route,
        grant: Option<&Grant>,
        key: &Key,
        request_id: &RequestId,
    ) -> Option<Response<ResponseBody>> {
        let refused = forbidden(grant, key)?;
        self.refused(RefusalReason::Forbidden, route, grant, request_id);
        Some(refused)
    }
}

/// 405 naming the methods the path allows.
fn method_not_allowed(allowed: &'static str) -> Response<ResponseBody> {
    let mut refused = error(
        ErrorCode::MethodNotAllowed,
        "method not allowed on this path",
    );
    refused
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allowed));
    refused
}

/// A request's body, at most [`MAX_BODY_BYTES`]; the 413 or 400 answer otherwise.
async fn request_body<B>(body: B) -> Result<Bytes, Response<ResponseBody>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<unique_core::BoxError>,
{
    read_body(body, MAX_BODY_BYTES).await.map_err(|e| match e {
        BodyError::TooLarge => error(
            ErrorCode::TooLarge,
            &format!("request body exceeds {MAX_BODY_BYTES} bytes"),
        ),
        BodyError::Unreadable(e) => error(
            ErrorCode::InvalidParams,
            &format!("cannot read request body: {e}"),
        ),
    })
}

/// 401 with the bearer challenge.
fn unauthenticated(why: Unauthenticated) -> Response<ResponseBody> {
    telemetry::count(Refusal::Unauthenticated(why));
    let mut answer = error(ErrorCode::Unauthenticated, why.message());
    answer
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    answer
}

/// 403 when the caller's token does not cover `key` (`None`: no authentication configured).
fn forbidden(grant: Option<&Grant>, key: &Key) -> Option<Response<ResponseBody>> {
    let grant = grant?;
    if grant.permits(key) {
        return None;
    }
    telemetry::count(Refusal::Forbidden);
    let message = format!(
        "token {:?} may not act on project {:?} env {:?}",
        grant.name(),
        key.project,
        key.env
    );
    Some(error(ErrorCode::Forbidden, &message))
}

/// 403 when the caller's token does not hold `role` (`None`: no authentication configured,
/// every caller trusted).
fn lacks_role(grant: Option<&Grant>, role: Role) -> Option<Response<ResponseBody>> {
    let grant = grant?;
    if grant.has_role(role) {
        return None;
    }
    telemetry::count(Refusal::Forbidden);
    let message = format!(
        "token {:?} may not log users out: it lacks the {role:?} role",
        grant.name(),
        role = role.as_str()
    );
    Some(error(ErrorCode::Forbidden, &message))
}

pub(crate) fn error(code: ErrorCode, message: &str) -> Response<ResponseBody> {
    error_body(ErrorBody::new(code, message))
}

pub(crate) fn error_body(body: ErrorBody<'_>) -> Response<ResponseBody> {
    json(body.status(), &body)
}

pub(crate) fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<ResponseBody> {
    answer(status, |scratch| {
        // Serialising our own answer types cannot fail (no maps with non-string keys).
        serde_json::to_writer(scratch, value).expect("answer types serialise");
    })
}

/// A JSON answer whose body `write` appends to an empty buffer.
fn answer(status: StatusCode, write: impl FnOnce(&mut Vec<u8>)) -> Response<ResponseBody> {
    thread_local! {
        /// Serialisation scratch, reused by every answer of this thread.
        static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
    }
    // One exact-size allocation per answer: a growing Vec would reallocate as it
    // fills, and `Bytes::from` a Vec with spare capacity allocates a header too.
    let body = SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        write(scratch);
        Bytes::copy_from_slice(scratch)
    });
    let mut res = Response::new(ResponseBody::new(body));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

fn text(status: StatusCode, body: &'static str) -> Response<ResponseBody> {
    let mut res = Response::new(ResponseBody::new(Bytes::from_static(body.as_bytes())));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    res
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower_service::Service<Request<B>> for ArbiterService<S>
where
    S: Store,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<unique_core::BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.handle(req).await) })
    }
}
