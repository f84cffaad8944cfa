#![doc = include_str!("../README.md")]

mod reply;
mod serve;
mod service;

pub use serve::{DEFAULT_HEADER_READ_TIMEOUT, serve};
pub use service::{KickService, MAX_BODY_BYTES};
