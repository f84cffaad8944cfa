#![doc = include_str!("../README.md")]

mod record;
mod store;
mod writer;

pub use store::{FjallStore, FjallStoreBuilder};
