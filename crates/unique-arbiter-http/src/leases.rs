//! The lease routes (`/v1/lease/*`, `/v1/nodes/*`): a lease directory and node registry
//! over HTTP, scoped by project.
//!
//! Every room and node id is stored as `<project>#<id>` (see `unique_wire::lease`), so
//! the projects sharing one store never meet; answers carry the ids as the caller sent
//! them. A request is parsed, then scoped (403 when the token does not cover its project,
//! with every env), then checked (400), and only then does the directory see it. The
//! directory's own front (`unique_lease`'s `Directory` and `NodeRegistry`) checks what it
//! checks for every backend: control characters, tokens, addresses.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Response, StatusCode};
use tracing::Instrument;
use unique_core::{Error, LogBudget, ValidationLimits};
use unique_lease::{Directory, Lease, LeaseError, NodeRegistration, NodeRegistry};
use unique_wire::lease::{check_id, check_project, check_ttl_ms, scoped_id};
use unique_wire::{
    ErrorBody, ErrorCode, LeaseAnswer, LeaseEnsureBody, LeaseLookupAnswer, LeaseRoomBody,
    LeaseRoute, LeaseTokenBody, LeaseVerifyAnswer, NodeAnswer, NodeDeregisterAnswer, NodeKeyBody,
    NodeLookupAnswer, NodeRegisterBody, ReleaseAnswer, parse,
};

use crate::audit::{Auditor, RefusalReason};
use crate::auth::Grant;
use crate::request_id::RequestId;
use crate::service::{ResponseBody, error, error_body, json};
use crate::telemetry::{self, Refusal};

/// Failed lease calls logged whole per 10 s (a lease store that is down fails every call;
/// the metrics count them all).
static LEASE_FAILURES_LOGGED: LogBudget = LogBudget::new(20, Duration::from_secs(10));

/// What the lease routes serve: a lease [`Directory`] and a [`NodeRegistry`], usually one
/// value (every `unique_lease::LeaseBackend` is both: `MemoryDirectory`, `RedisDirectory`,
/// the SQL and DynamoDB directories). Implemented for every type that is both; give one to
/// [`ArbiterService::with_leases`](crate::ArbiterService::with_leases).
pub trait LeaseService: Directory + NodeRegistry {}

impl<T: Directory + NodeRegistry + ?Sized> LeaseService for T {}

/// The message of a lease route on a service without a lease directory (501).
pub(crate) const NO_LEASES: &str = "this server has no lease directory for its store";

/// What one lease request brings besides its route.
pub(crate) struct Call<'a> {
    pub(crate) body: &'a [u8],
    pub(crate) grant: Option<&'a Grant>,
    pub(crate) audit: Option<&'a Auditor>,
    pub(crate) request_id: &'a RequestId,
    pub(crate) limits: &'a ValidationLimits,
}

/// Answers one lease request. Never fails: every problem is an HTTP answer.
pub(crate) async fn answer(
    leases: Option<&Arc<dyn LeaseService>>,
    route: LeaseRoute,
    call: Call<'_>,
) -> Response<ResponseBody> {
    let Some(leases) = leases else {
        return error(ErrorCode::NotImplemented, NO_LEASES);
    };
    match serve(&**leases, route, &call).await {
        Ok(answer) => answer,
        Err(Failure::Forbidden(message)) => error(ErrorCode::Forbidden, &message),
        Err(Failure::Request(e)) => error_body(ErrorBody::from_error(&e)),
        Err(Failure::Lease(e)) => {
            let (code, message) = lease_error(&e);
            if code != ErrorCode::InvalidParams && LEASE_FAILURES_LOGGED.admit("lease call failed")
            {
                tracing::warn!(error = %e, "lease call failed");
            }
            error(code, &message)
        }
    }
}

/// Why a lease request got no 200.
enum Failure {
    /// A 403 (already counted and recorded), with its message.
    Forbidden(String),
    /// A request the wire layer refused (400).
    Request(Error),
    /// The directory failed.
    Lease(LeaseError),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Self::Request(e)
    }
}

impl From<LeaseError> for Failure {
    fn from(e: LeaseError) -> Self {
        Self::Lease(e)
    }
}

async fn serve(
    leases: &dyn LeaseService,
    route: LeaseRoute,
    call: &Call<'_>,
) -> Result<Response<ResponseBody>, Failure> {
    match route {
        LeaseRoute::Ensure => {
            let body: LeaseEnsureBody = parse(call.body)?;
            let room = call.room(route, &body.project, &body.room)?;
            check_id("node", &body.node)?;
            check_ttl_ms(body.ttl_ms)?;
            let ttl = Duration::from_millis(body.ttl_ms);
            let lease = leases
                .ensure_owner(&room, &body.node, SystemTime::now(), ttl)
                .instrument(call.span(route, &body.project))
                .await?;
            Ok(json(StatusCode::OK, &lease_answer(&body.room, &lease)))
        }
        LeaseRoute::Verify => {
            let body: LeaseTokenBody = parse(call.body)?;
            let room = call.room(route, &body.project, &body.room)?;
            check_id("node", &body.node)?;
            let valid = leases
                .verify_owner(&room, &body.node, &body.token, SystemTime::now())
                .instrument(call.span(route, &body.project))
                .await?;
            Ok(json(StatusCode::OK, &LeaseVerifyAnswer { valid }))
        }
        LeaseRoute::Release => {
            let body: LeaseTokenBody = parse(call.body)?;
            let room = call.room(route, &body.project, &body.room)?;
            check_id("node", &body.node)?;
            let released = leases
                .release_owner(&room, &body.node, &body.token)
                .instrument(call.span(route, &body.project))
                .await?;
            Ok(json(StatusCode::OK, &ReleaseAnswer { released }))
        }
        LeaseRoute::Lookup => {
            let body: LeaseRoomBody = parse(call.body)?;
            let room = call.room(route, &body.project, &body.room)?;
            let lease = leases
                .lookup(&room)
                .instrument(call.span(route, &body.project))
                .await?;
            let lease = lease.map(|lease| lease_answer(&body.room, &lease));
            Ok(json(StatusCode::OK, &LeaseLookupAnswer { lease }))
        }
        LeaseRoute::RegisterNode => {
            let body: NodeRegisterBody = parse(call.body)?;
            let node = call.node(route, &body.project, &body.node)?;
            check_ttl_ms(body.ttl_ms)?;
            let ttl = Duration::from_millis(body.ttl_ms);
            let registered = leases
                .register_node(&node, &body.addr, ttl)
                .instrument(call.span(route, &body.project))
                .await?;
            Ok(json(StatusCode::OK, &node_answer(&body.node, &registered)))
        }
        LeaseRoute::LookupNode => {
            let body: NodeKeyBody = parse(call.body)?;
            let node = call.node(route, &body.project, &body.node)?;
            let registered = leases
                .lookup_node(&node)
                .instrument(call.span(route, &body.project))
                .await?;
            let node = registered.map(|r| node_answer(&body.node, &r));
            Ok(json(StatusCode::OK, &NodeLookupAnswer { node }))
        }
        LeaseRoute::DeregisterNode => {
            let body: NodeKeyBody = parse(call.body)?;
            let node = call.node(route, &body.project, &body.node)?;
            leases
                .unregister_node(&node)
                .instrument(call.span(route, &body.project))
                .await?;
            Ok(json(
                StatusCode::OK,
                &NodeDeregisterAnswer { removed: true },
            ))
        }
    }
}

impl Call<'_> {
    /// The stored id of `room` in `project`, once the token covers the project and both
    /// are well formed.
    fn room(&self, route: LeaseRoute, project: &str, room: &str) -> Result<String, Failure> {
        self.scoped(route, project, "room", room)
    }

    /// The stored id of `node` in `project`, as [`room`](Self::room).
    fn node(&self, route: LeaseRoute, project: &str, node: &str) -> Result<String, Failure> {
        self.scoped(route, project, "node", node)
    }

    fn scoped(
        &self,
        route: LeaseRoute,
        project: &str,
        field: &str,
        id: &str,
    ) -> Result<String, Failure> {
        // Scoped before checked, as the session routes are: a caller learns nothing about
        // a project its token does not cover.
        self.permit(route, project)?;
        check_project(self.limits, project)?;
        check_id(field, id)?;
        Ok(scoped_id(project, id))
    }

    /// 403 when the caller's token does not cover `project` with every env (`Ok` without
    /// authentication), recorded in the audit log.
    fn permit(&self, route: LeaseRoute, project: &str) -> Result<(), Failure> {
        let Some(grant) = self.grant else {
            return Ok(());
        };
        if grant.permits_project(project) {
            return Ok(());
        }
        telemetry::count(Refusal::Forbidden);
        if let Some(audit) = self.audit {
            let path = route.path();
            audit.refused(RefusalReason::Forbidden, path, Some(grant), self.request_id);
        }
        let message = format!(
            "token {:?} may not act on the leases of project {project:?} \
             (it needs the project with every env)",
            grant.name()
        );
        Err(Failure::Forbidden(message))
    }

    fn span(&self, route: LeaseRoute, project: &str) -> tracing::Span {
        tracing::info_span!(
            "request",
            request_id = %self.request_id,
            operation = route.operation(),
            project = %project,
        )
    }
}

/// The wire form of a lease of `room` (the caller's name for it), with the time the store
/// said was left.
///
/// Not less the time this server spent since: the caller counts the lease from the instant
/// before it sent the request ([`Lease::deadline`]), which is before the store decided, so
/// every delay on the way (the network both ways, this server) already comes off the
/// holder's time. Answering the store's figure keeps two answers about one holding equal
/// while the store's clock stands still.
fn lease_answer(room: &str, lease: &Lease) -> LeaseAnswer {
    LeaseAnswer {
        room: room.to_owned(),
        node: lease.node_id.clone(),
        token: lease.lease_token.clone(),
        epoch: lease.epoch,
        ttl_left_ms: whole_ms(lease.ttl_left),
    }
}

/// The wire form of a registration of `node` (the caller's name for it): what is left of
/// it now, rounded down, and its age, so that the two still add up to the ttl it was
/// written with. A registration has no deadline on a monotonic clock: its times are placed
/// on this server's wall clock, which also measures what is left.
fn node_answer(node: &str, registered: &NodeRegistration) -> NodeAnswer {
    let span = whole_ms(
        registered
            .expires_at
            .duration_since(registered.updated_at)
            .unwrap_or_default(),
    );
    let left = registered
        .expires_at
        .duration_since(SystemTime::now())
        .map_or(0, whole_ms)
        .min(span);
    NodeAnswer {
        node: node.to_owned(),
        addr: registered.grpc_addr.clone(),
        age_ms: span - left,
        ttl_left_ms: left,
    }
}

/// `d` in whole milliseconds, rounded down: a holder told less than what is left stops
/// early, never late.
fn whole_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The code and message of a failed directory call: `InvalidParams` → 400 (named by the
/// wire's fields), `Unavailable` → 503, `Corrupt` → 500 `corrupt`, `Backend` → 500
/// `internal`.
fn lease_error(e: &LeaseError) -> (ErrorCode, String) {
    match e {
        LeaseError::InvalidParams(reason) => (ErrorCode::InvalidParams, wire_names(reason)),
        LeaseError::Unavailable { reason, .. } => (ErrorCode::Unavailable, reason.clone()),
        LeaseError::Corrupt(reason) => (ErrorCode::Corrupt, format!("corrupt record: {reason}")),
        LeaseError::Backend { reason, .. } => (ErrorCode::Internal, reason.clone()),
        _ => (ErrorCode::Internal, "lease store failed".to_owned()),
    }
}

/// The directory names its inputs as its API does (`room_id`, `grpc_addr`, …); the caller
/// sent the wire's fields.
fn wire_names(reason: &str) -> String {
    for (api, wire) in [
        ("room_id", "room"),
        ("node_id", "node"),
        ("lease_token", "token"),
        ("grpc_addr", "addr"),
    ] {
        if let Some(rest) = reason.strip_prefix(api) {
            return format!("{wire}{rest}");
        }
    }
    reason.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_codes() {
        let cases = [
            (
                LeaseError::invalid("room_id must not contain control characters"),
                400,
            ),
            (
                LeaseError::unavailable_with(
                    "redis connection dropped",
                    std::io::Error::other("x"),
                ),
                503,
            ),
            (LeaseError::Corrupt("lease hash".into()), 500),
            (LeaseError::backend("epoch counter exhausted"), 500),
        ];
        for (e, status) in cases {
            let (code, _) = lease_error(&e);
            assert_eq!(code.status().as_u16(), status, "{e}");
        }
        assert_eq!(
            lease_error(&LeaseError::invalid(
                "room_id must not contain control characters"
            )),
            (
                ErrorCode::InvalidParams,
                "room must not contain control characters".to_owned()
            )
        );
        assert_eq!(
            lease_error(&LeaseError::Corrupt("x".into())).0,
            ErrorCode::Corrupt
        );
        assert_eq!(
            lease_error(&LeaseError::backend("x")).0,
            ErrorCode::Internal
        );
        assert_eq!(
            wire_names("grpc_addr must not contain whitespace"),
            "addr must not contain whitespace"
        );
        assert_eq!(
            wire_names("lease_token must not be empty"),
            "token must not be empty"
        );
        assert_eq!(
            wire_names("ttl is longer than ten years"),
            "ttl is longer than ten years"
        );
    }

    #[test]
    fn times_round_down_to_the_millisecond() {
        assert_eq!(whole_ms(Duration::from_micros(1_999)), 1);
        assert_eq!(whole_ms(Duration::ZERO), 0);
    }
}
