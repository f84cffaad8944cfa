#![doc = include_str!("../README.md")]

mod agreement;
mod receiver;
mod reply;
mod serve;
mod service;
mod telemetry;

pub use receiver::{KickReceiver, KickReceiverBuilder};
pub use serve::{serve, serve_with};
pub use service::{KickService, MAX_BODY_BYTES};
pub use telemetry::KICK_SIGNATURE_REJECTIONS_TOTAL;
/// The guards of [`serve_with`]: connection caps, timeouts, TLS (from `unique-listener`).
pub use unique_listener::ServeOptions;
