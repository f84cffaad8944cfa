#![doc = include_str!("../README.md")]

mod arbiter;
mod error;
mod evict;
mod fence;
mod kicker;
mod log_budget;
mod observer;
mod pool;
mod queue;
mod recent;
mod release;
mod store;
mod sync;
mod types;
mod validate;
mod write_health;

pub use arbiter::{
    Arbiter, ArbiterBuilder, DEFAULT_CLAIM_TIMEOUT, DEFAULT_KICK_TIMEOUT,
    DEFAULT_MAX_CLAIM_ATTEMPTS, DEFAULT_MAX_QUEUED_CLAIMS, DEFAULT_SESSIONS_PAGE,
    LOGOUT_ALL_CONCURRENCY, MAX_SESSIONS_PAGE,
};
pub use error::{BoxError, Error};
pub use evict::decide_evict;
pub use fence::{CasOutcome, Fence, Pins, VacantClaim, VacantClaims};
pub use kicker::{KickOutcome, Kicker};
pub use log_budget::{LogBudget, LogVerdict};
pub use observer::{NoopObserver, Observer, ShedReason, TracingObserver};
pub use pool::{
    DEFAULT_SESSION_LIMIT, MAX_POOL_PLACES, PoolPolicy, PoolRequest, PooledOutcome, PooledSession,
    place_index, place_slot,
};
pub use recent::{RECENT_CLAIMS, RecentClaims};
pub use release::{MAX_RELEASE_REASON_BYTES, ReleaseReason};
pub use store::{
    MAX_BATCH_KEYS, Store, StoreAnswer, StoreCall, StoreLayer, StoreOperation, decode_owner,
    encode_owner, listed_session, ready_key,
};
pub use types::{
    ClaimInput, ClaimOutcome, CurrentView, EvictReason, Key, KickDetail, KickPayload, KickReason,
    LogoutInput, LogoutOutcome, Owner, OwnerState, SessionsPage, SlotLogout, StoredOwner, UserKey,
    UserLogoutInput, UserSession,
};
pub use validate::{
    MAX_LOGOUT_REASON_CHARS, MAX_NODE_ID_CHARS, OWNER_TARGET_RULE, ValidationLimits, check_node_id,
};
pub use write_health::{WRITE_PROBE_BYTES, WriteHealth, probe_writable};

/// Re-exported so backends implement the traits with the same macro version.
pub use async_trait::async_trait;
