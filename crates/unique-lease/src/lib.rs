#![doc = include_str!("../README.md")]

mod directory;
mod error;
mod keepalive;
mod memory;
#[cfg(feature = "redis")]
mod redis;
mod rules;
mod step;
mod sweep;
pub mod time;
mod types;
mod validate;

pub use directory::{
    Directory, LeaseBackend, NodeRegistry, STORE_CLOCK_RESOLUTION, StoredLease, StoredNode,
    new_lease_token,
};
pub use error::{BoxError, LeaseError};
pub use keepalive::{KeepAlive, LeaseLost, LeaseState};
pub use memory::MemoryDirectory;
#[cfg(feature = "redis")]
pub use redis::{DEFAULT_GC_GRACE, DEFAULT_KEY_PREFIX, RedisDirectory, RedisDirectoryBuilder};
pub use rules::{
    Grant, LeaseDump, LeaseRow, LeaseRows, NodeDecision, NodeOp, NodeRow, NodeWrite, RoomDecision,
    RoomOp, RoomOutcome, RoomWrite,
};
pub use step::{Expectation, ForwardStep, STEP_TOLERANCE_MS, StepGuard, StoreNow};
pub use sweep::{
    DEFAULT_SWEEP_GRACE, DEFAULT_SWEEP_INTERVAL, SWEEP_BATCH, SweepCursor, SweepTable, Swept,
    grace_millis, sweep_pass,
};
pub use time::{
    Clock, DEFAULT_TTL, MAX_TIME_MILLIS, MAX_TTL, ManualClock, SystemClock, clock_millis,
};
pub use types::{Lease, NodeRegistration};
pub use validate::{MAX_ADDR_LEN, MAX_ID_LEN, MAX_TOKEN_LEN};

/// Re-exported so backends outside this crate implement the traits with the same
/// macro version.
pub use async_trait::async_trait;
