//! `GET /v1/info`: what the service tells a client about itself, and the settings it is built
//! from that the service cannot see for itself (the kicker's keys, the store's kind).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use unique_core::{MAX_BATCH_KEYS, MAX_SESSIONS_PAGE, ValidationLimits};
use unique_wire::{
    InfoAnswer, InfoAuth, InfoFeatures, InfoKicks, InfoLimits, MAX_LEASE_ID_CHARS,
    MAX_LEASE_TTL_MS, MAX_REQUEST_BODY_BYTES,
};

/// Reads the kicker's signing state when `/v1/info` is asked (so a reload of the keys shows).
pub(crate) type KickSigning = Arc<dyn Fn() -> InfoKicks + Send + Sync>;

/// What the service is told about itself beyond the arbiter, the tokens and the leases.
#[derive(Clone)]
pub(crate) struct Told {
    /// `None`: the service was not told, and reports unsigned kicks.
    pub(crate) kick_signing: Option<KickSigning>,
    pub(crate) store: Option<Arc<str>>,
    /// `false`: a lease-only service; the session routes answer 501.
    pub(crate) sessions: bool,
    /// `true`: the kick-stream routes are served (`/v1/info`'s `push_kicks`).
    pub(crate) push_kicks: bool,
}

impl Default for Told {
    fn default() -> Self {
        Self {
            kick_signing: None,
            store: None,
            sessions: true,
            push_kicks: false,
        }
    }
}

impl fmt::Debug for Told {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Told")
            .field("kick_signing", &self.kick_signing.is_some())
            .field("store", &self.store)
            .field("sessions", &self.sessions)
            .field("push_kicks", &self.push_kicks)
            .finish()
    }
}

/// What the session routes of a lease-only service answer (501 `not_implemented`).
pub(crate) const NO_SESSIONS: &str = "this server serves leases only (unique-server \
    --no-sessions): the session routes are off; log users in on a server that serves sessions";

/// What the kick-stream routes answer on a service without push kicks (501).
pub(crate) const NO_PUSH_KICKS: &str = "this server does not serve push kicks: \
    name an endpoint in the owner, or use a server that lists push_kicks in /v1/info";

/// The facts the service is built with, as the wire carries them.
pub(crate) struct Facts<'a> {
    pub(crate) told: &'a Told,
    pub(crate) auth: bool,
    pub(crate) leases: bool,
    pub(crate) limits: &'a ValidationLimits,
    pub(crate) max_slots_per_user: Option<usize>,
    /// The default session limit and the projects' own.
    pub(crate) session_limit: usize,
    pub(crate) project_session_limits: BTreeMap<String, usize>,
}

impl Facts<'_> {
    pub(crate) fn answer(&self) -> InfoAnswer {
        let kicks = match (&self.told.kick_signing, self.told.sessions) {
            (Some(read), true) => read(),
            // A lease-only server sends no kicks at all.
            _ => InfoKicks::default(),
        };
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        InfoAnswer {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            auth: InfoAuth {
                required: self.auth,
            },
            kicks,
            features: InfoFeatures {
                sessions: self.told.sessions,
                leases: self.leases,
                store: self.told.store.as_deref().map(str::to_owned),
                push_kicks: self.told.push_kicks && self.told.sessions,
            },
            limits: InfoLimits {
                max_request_body_bytes: count(MAX_REQUEST_BODY_BYTES),
                max_batch_keys: count(MAX_BATCH_KEYS),
                max_sessions_page: count(MAX_SESSIONS_PAGE),
                max_slots_per_user: self.max_slots_per_user.map(count),
                session_limit: Some(count(self.session_limit)),
                project_session_limits: self
                    .project_session_limits
                    .iter()
                    .map(|(project, limit)| (project.clone(), count(*limit)))
                    .collect(),
                max_name_chars: count(self.limits.tenant),
                max_claim_id_chars: count(self.limits.claim_id),
                max_endpoint_chars: count(self.limits.endpoint),
                max_lease_ttl_ms: MAX_LEASE_TTL_MS,
                max_lease_id_chars: count(MAX_LEASE_ID_CHARS),
            },
        }
    }
}
