//! Runnable examples of unique; see the binaries in `src/bin`.
//!
//! - `quickstart`: two logins for one user on the in-memory store, in one process.
//! - `duel`: a server and two client nodes in one process, over real HTTP on loopback,
//!   telling the story of a kick, a heartbeat, a logout and a self-eviction.
//! - `smoke-client`: one node as its own process, driven by commands on stdin and
//!   reporting events on stdout, one line each.
//! - `smoke`: the S1–S6 runner of the specification over real processes.
//!
//! The library holds what the binaries share: a [`node::Node`] (the `unique_sessions::node::Node`
//! runtime with its kick receiver, for one key), its [`events::Report`]s and their line
//! format, and the runner's process handling in [`smoke`].

pub mod events;
pub mod node;
mod receiver;
pub mod smoke;

/// The top-level README's Rust blocks, compiled (and run, unless `no_run`) as doctests of this
/// crate, which has every dependency they name; `tests/readme.rs` runs its shell blocks.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
