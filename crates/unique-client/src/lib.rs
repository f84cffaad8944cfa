#![doc = include_str!("../README.md")]

mod batch;
mod claimer;
mod drain;
mod event;
mod heartbeat;
mod jitter;
mod kick;
mod node;
mod notice;
mod push;
mod session;
mod sessions;
mod transport;

pub use claimer::{Claimer, ClaimerOptions, Login, LoginError, PooledLogin};
pub use drain::Drain;
pub use event::{NodeEvent, NodeEvents, NodeLoginError};
pub use heartbeat::{Heartbeat, HeartbeatExit, HeartbeatHandle, HeartbeatOptions};
pub use jitter::Jitter;
pub use kick::{
    Admission, IgnoreReason, KickAck, KickCause, KickHandler, KickOptions, MAX_CAUSE_BYTES,
    PendingLogin,
};
pub use node::{Node, NodeBuilder, Shutdown};
pub use notice::{EndNotice, MAX_CLOSE_REASON_BYTES, SSE_EVENT};
pub use push::{
    ACK_OK, DEFAULT_PING, KickStream, MAX_LINE_BYTES, PushOptions, PushStatus, PushTransport,
};
pub use session::{Ending, Session};
pub use sessions::Sessions;
pub use transport::Transport;

/// Re-exported so transports implement [`Transport`] with the same macro version.
pub use async_trait::async_trait;
/// Re-exported core types every client needs.
pub use unique_core::{
    ClaimInput, ClaimOutcome, CurrentView, Error, EvictReason, Key, KickPayload, KickReason, Owner,
    PoolPolicy, PoolRequest, PooledOutcome, PooledSession, UserKey,
};
