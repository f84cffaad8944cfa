#![doc = include_str!("../README.md")]

mod builder;
mod error;
mod schema;
mod sql;
mod store;

pub use builder::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_OPERATION_TIMEOUT, DEFAULT_TABLE,
    PostgresStoreBuilder,
};
pub use store::PostgresStore;

/// The driver this store is built on, re-exported so callers can name its types.
pub use tokio_postgres;
