#![doc = include_str!("../README.md")]

mod builder;
mod directory;
mod push;
mod status;
mod transport;

pub use builder::{
    DEFAULT_MAX_RESPONSE_BODY, DEFAULT_POOL_IDLE_TIMEOUT, DEFAULT_TIMEOUT, HttpTransportBuilder,
};
pub use directory::HttpDirectory;
pub use transport::HttpTransport;
