#![doc = include_str!("../README.md")]

mod decide;
mod lease;
mod lease_record;
mod opened;
mod record;
mod store;
mod writer;

pub use lease::FjallDirectory;
pub use store::{FjallStore, FjallStoreBuilder};
