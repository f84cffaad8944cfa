#![doc = include_str!("../README.md")]

mod accepted;
mod builder;
mod classify;
mod kicker;
mod policy;
mod pool;
mod resolve;
mod telemetry;

pub use builder::{
    BuildError, DEFAULT_MAX_IDLE, DEFAULT_MAX_IDLE_PER_HOST, DEFAULT_MAX_KICKS_IN_FLIGHT,
    DEFAULT_MAX_RESPONSE_BODY, DEFAULT_POOL_IDLE_TIMEOUT, HttpKickerBuilder,
};
pub use kicker::HttpKicker;
pub use policy::{EndpointPolicy, EndpointRule, Refusal, ReservedRange, RuleError};
pub use telemetry::KICKS_SHED_TOTAL;
/// The keys [`HttpKickerBuilder::signing_keys`] signs with (from `unique-kick-signature`).
pub use unique_kick_signature::SigningKeys;

/// The rustls version this crate builds on, so a custom [`rustls::ClientConfig`] or a
/// [`rustls::pki_types::CertificateDer`] passed to the builder has the matching type.
pub use rustls;
