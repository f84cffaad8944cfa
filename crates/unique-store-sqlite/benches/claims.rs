//! Claims per second through the Arbiter.
fn main() {}
