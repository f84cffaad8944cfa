#![doc = include_str!("../README.md")]

mod serve;
mod service;

pub use serve::{DRAIN_TIMEOUT, serve};
pub use service::{ArbiterService, MAX_BODY_BYTES, ResponseBody};
