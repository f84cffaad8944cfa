#![doc = include_str!("../README.md")]

mod builder;
mod error;
mod lease;
mod schema;
mod sql;
mod store;
mod tls;

/// The integration tests' punctuation-blind database, for the unit tests of plans.
#[cfg(test)]
#[allow(dead_code, unreachable_pub)]
#[path = "../tests/common/icu.rs"]
mod test_icu;

pub use builder::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_OPERATION_TIMEOUT, DEFAULT_TABLE,
    PostgresStoreBuilder,
};
pub use lease::{DEFAULT_LEASE_PREFIX, PostgresDirectory, PostgresDirectoryBuilder};
pub use store::PostgresStore;

/// The driver this store is built on, re-exported so callers can name its types.
pub use tokio_postgres;
