#![doc = include_str!("../README.md")]

mod builder;
mod status;
mod transport;

pub use builder::{
    DEFAULT_MAX_RESPONSE_BODY, DEFAULT_POOL_IDLE_TIMEOUT, DEFAULT_TIMEOUT, HttpTransportBuilder,
};
pub use transport::HttpTransport;
