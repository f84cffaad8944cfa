#![doc = include_str!("../README.md")]

mod check;
mod clause;
mod push;
mod report;
mod send;

pub use check::{CLOCK_MARGIN, DEFAULT_PROJECT, DEFAULT_TIMEOUT, GENERATION, NodeCheck};
pub use clause::{Clause, Expected};
pub use push::{DEFAULT_PING, DEFAULT_WAIT};
pub use report::{ClauseResult, Report};
pub use send::{Answer, UrlError};
/// The keys a check signs its kicks with (from `unique-kick-signature`).
pub use unique_kick_signature::SigningKeys;
