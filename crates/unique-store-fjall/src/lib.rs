#![doc = include_str!("../README.md")]

mod lease;
mod lease_record;
mod record;
mod store;
mod writer;

pub use lease::FjallDirectory;
pub use store::{FjallStore, FjallStoreBuilder};
