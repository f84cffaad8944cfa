//! Shared by the tests that run the `unique-server` binary as a real process.

use std::io::{BufRead, BufReader};
use std::process::Child;

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_unique-server");

/// Reads the server's first stdout line and returns the address it announces
/// (`unique-server listening on http://ADDR`); panics with that line otherwise.
pub(crate) fn announced_addr(child: &mut Child) -> String {
    announced_with_scheme(child, "http")
}

/// As [`announced_addr`], for a server announcing `scheme://ADDR` (`https` with TLS).
pub(crate) fn announced_with_scheme(child: &mut Child, scheme: &str) -> String {
    let stdout = child.stdout.take().expect("spawned with stdout piped");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    line.trim()
        .strip_prefix(&format!("unique-server listening on {scheme}://"))
        .unwrap_or_else(|| panic!("server did not start: {line:?}"))
        .to_owned()
}
