#![doc = include_str!("../README.md")]

/// `From` both ways between a wire shape and the core type it mirrors, field for field.
/// Both sides are destructured in full, so a field added to either fails to compile here
/// until the other gains it.
macro_rules! mirror {
    ($wire:ident <=> $core:ident { $($field:ident),+ $(,)? }) => {
        impl From<$core> for $wire {
            fn from(value: $core) -> Self {
                let $core { $($field),+ } = value;
                Self { $($field),+ }
            }
        }

        impl From<$wire> for $core {
            fn from(value: $wire) -> Self {
                let $wire { $($field),+ } = value;
                Self { $($field),+ }
            }
        }
    };
}

mod answer;
mod body;
mod error;
mod fast_claim;
mod info;
mod integer;
mod kick;
pub mod lease;
mod limit;
mod parse;
pub mod push;
mod route;

pub use answer::{
    ClaimAnswer, CurrentAnswer, LogoutAllAnswer, LogoutAnswer, PooledClaimAnswer, SessionEntry,
    SlotLogoutEntry, write_claim_answer, write_pooled_claim_answer,
};
pub use body::{
    BatchAnswer, BatchBody, BatchView, ClaimBody, KeyBody, LogoutBody, OwnerBody, PoolBody,
    ReleaseAnswer, ReleaseBody, SessionsAnswer, UserBody, UserLogoutBody,
};
pub use error::{
    ErrorBody, ErrorCode, LIMIT_REACHED_MESSAGE, PooledSessionEntry, PooledSessions,
    SUPERSEDED_MESSAGE, TOO_MANY_SLOTS_MESSAGE, error_code, error_message, limit_reached,
    superseded_generations, too_many_slots_limit,
};
pub use info::{INFO_PATH, InfoAnswer, InfoAuth, InfoFeatures, InfoKicks, InfoLimits};
pub use kick::{KickBody, decode_kick, encode_kick};
pub use lease::{
    LEASE_ENSURE_PATH, LEASE_LOOKUP_PATH, LEASE_RELEASE_PATH, LEASE_VERIFY_PATH, LeaseAnswer,
    LeaseEnsureBody, LeaseLookupAnswer, LeaseRoomBody, LeaseRoute, LeaseTokenBody,
    LeaseVerifyAnswer, MAX_LEASE_ID_CHARS, MAX_LEASE_TTL_MS, NODE_DEREGISTER_PATH,
    NODE_LOOKUP_PATH, NODE_REGISTER_PATH, NodeAnswer, NodeDeregisterAnswer, NodeKeyBody,
    NodeLookupAnswer, NodeRegisterBody,
};
pub use limit::{BodyError, MAX_KICK_BODY_BYTES, MAX_REQUEST_BODY_BYTES, read_body};
pub use parse::{parse, parse_claim};
pub use push::{
    ClosedReason, KickAckAnswer, KickAckBody, KickLine, NODE_KICKS_ACK_PATH, NODE_KICKS_PATH,
    PEER_ACK_PATH, PEER_KICK_PATH, PeerAckBody, PeerKickAnswer, PeerKickBody, PeerRoute, PushRoute,
    StreamLine, node_kicks_ack_path, node_kicks_path, parse_node_kicks_path,
};
pub use route::{
    CLAIM_PATH, CURRENT_BATCH_PATH, CURRENT_PATH, HEALTH_PATH, LOGOUT_ALL_PATH, LOGOUT_PATH,
    READY_PATH, RELEASE_PATH, Route, SESSIONS_PATH,
};
/// The most keys one batch request carries (re-exported from `unique_core`).
pub use unique_core::MAX_BATCH_KEYS;
