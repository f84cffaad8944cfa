#![doc = include_str!("../README.md")]

mod activity;
mod body;
mod drain;
mod limit;
mod options;
mod serve;
mod service;
mod telemetry;

pub use body::{BodyTimeout, RequestBody};
pub use options::{
    DEFAULT_BACKLOG, DEFAULT_BODY_TIMEOUT, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HEADER_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_IP, ServeOptions,
};
pub use serve::{bind, serve};
pub use telemetry::{CONNECTIONS_OPEN, CONNECTIONS_REFUSED_TOTAL, REQUESTS_IN_FLIGHT};
