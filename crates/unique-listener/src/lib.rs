#![doc = include_str!("../README.md")]
// A loom build (`--cfg loom`) compiles only what its models check, the connection's activity
// word: the rest needs `tokio::net`, which tokio leaves out under loom.
#![cfg_attr(loom, allow(dead_code))]

mod activity;
#[cfg(not(loom))]
mod body;
#[cfg(not(loom))]
mod drain;
#[cfg(not(loom))]
mod limit;
#[cfg(not(loom))]
mod options;
#[cfg(not(loom))]
mod serve;
#[cfg(not(loom))]
mod service;
mod sync;
#[cfg(not(loom))]
mod telemetry;

#[cfg(not(loom))]
pub use body::{BodyTimeout, RequestBody};
#[cfg(not(loom))]
pub use options::{
    DEFAULT_BACKLOG, DEFAULT_BODY_TIMEOUT, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HEADER_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_IP, ServeOptions,
};
#[cfg(not(loom))]
pub use serve::{bind, serve};
#[cfg(not(loom))]
pub use service::{LONG_LIVED_SEND_BUFFER, LONG_LIVED_UNSENT, LongLived, PeerAddr};
#[cfg(not(loom))]
pub use telemetry::{CONNECTIONS_OPEN, CONNECTIONS_REFUSED_TOTAL, REQUESTS_IN_FLIGHT};
