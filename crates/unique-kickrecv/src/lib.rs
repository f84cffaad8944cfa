#![doc = include_str!("../README.md")]

mod reply;
mod serve;
mod service;

pub use serve::{DEFAULT_HEADER_READ_TIMEOUT, serve, serve_with};
pub use service::{KickService, MAX_BODY_BYTES};
/// The guards of [`serve_with`]: connection caps, timeouts, TLS (from `unique-serve`).
pub use unique_serve::ServeOptions;
