#![doc = include_str!("../README.md")]

mod batch;
mod builder;
mod client;
mod codec;
mod error;
mod lease;
mod metrics;
mod schema;

pub use builder::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_OPERATION_TIMEOUT, DEFAULT_RETRY_BACKOFF, DEFAULT_TABLE, DynamoStoreBuilder,
    https_client,
};
pub use client::DynamoStore;
pub use lease::{DEFAULT_MAX_OBSERVATIONS, DynamoDirectory, DynamoDirectoryBuilder, GC_AT};
pub use metrics::RequestCounts;

/// The SDK this store is built on, re-exported so callers can build a
/// [`Client`](aws_sdk_dynamodb::Client) with the same version.
pub use aws_sdk_dynamodb;
