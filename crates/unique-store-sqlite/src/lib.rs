#![doc = include_str!("../README.md")]

mod cache;
mod checkpoint;
mod error;
mod exclusive;
mod lease;
mod options;
mod readers;
mod records;
mod schema;
mod store;
mod writer;

pub use lease::{SqliteDirectory, SqliteDirectoryBuilder};
pub use options::{
    DEFAULT_BUSY_TIMEOUT, DEFAULT_MAX_BATCH, DEFAULT_READERS, ReadsOn, SqliteStoreBuilder,
    Synchronous,
};
pub use store::SqliteStore;
