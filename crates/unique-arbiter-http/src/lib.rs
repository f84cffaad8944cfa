#![doc = include_str!("../README.md")]

mod audit;
mod auth;
mod body;
mod info;
mod leases;
mod peer;
pub mod push;
mod request_id;
pub mod secret_file;
mod serve;
mod service;
mod telemetry;

pub use audit::{
    AUDIT_UNAVAILABLE, AUDIT_WRITE_ERRORS_TOTAL, AuditEvent, AuditFile, AuditRecord, AuditSink,
    AuditSync, DEFAULT_AUDIT_KEEP, DEFAULT_AUDIT_MAX_BYTES, LOGGED_FAILURES_PER_INTERVAL,
    MAX_REFUSAL_GROUPS, REFUSAL_INTERVAL, RefusalReason, Rotation,
};
pub use auth::{
    Grant, MIN_TOKEN_BYTES, Role, SharedTokens, Tokens, TokensDiff, TokensError, Unauthenticated,
};
pub use leases::LeaseService;
pub use peer::{
    MAX_PEER_KICK_WAIT, MIN_PEER_SECRET_BYTES, PeerSecret, PeerSecretError, StreamDirectory,
};
pub use push::{KICK_STREAMS_OPEN, KickDelivery, KickHub, PushConfig, PushedKick};
pub use serve::{serve, serve_with};
pub use service::{ArbiterService, DEFAULT_READY_TIMEOUT, MAX_BODY_BYTES, ResponseBody};
pub use telemetry::{AUTH_REJECTIONS_TOTAL, POOL_EVICTIONS_TOTAL, RELEASES_BY_REASON_TOTAL};
/// The guards of [`serve_with`]: connection caps, timeouts, TLS (from `unique-listener`).
pub use unique_listener::ServeOptions;
