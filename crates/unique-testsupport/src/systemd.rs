//! `systemd-analyze verify`: checks a unit file offline (its syntax, every setting's value, the
//! binary its `ExecStart` names).
//!
//! When `systemd-analyze` is not installed, the first caller installs Debian's `systemd` package
//! with `apt-get` (once, under a lock file). If that fails the test panics saying what is
//! missing; there is no switch to skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::apt;

/// The path of `systemd-analyze`, installing Debian's `systemd` package when it is missing.
///
/// # Panics
///
/// When it is missing and cannot be installed.
pub fn analyze_path() -> PathBuf {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| apt::locate_or_install("systemd-analyze", "systemd"))
        .clone()
        .unwrap_or_else(|missing| panic!("{missing}"))
}

/// Runs `systemd-analyze verify` on the unit file at `unit`.
///
/// # Errors
///
/// Everything it reported, when it failed or reported anything at all: it exits 0 on a setting it
/// could not parse and ignored, so any output counts as a problem.
///
/// # Panics
///
/// When `systemd-analyze` cannot be installed or run.
pub fn verify(unit: &Path) -> Result<(), String> {
    let analyze = analyze_path();
    let output = Command::new(&analyze)
        .arg("verify")
        .arg(unit)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", analyze.display()));
    let reported = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() && reported.trim().is_empty() {
        Ok(())
    } else {
        Err(format!(
            "systemd-analyze verify {} ({}):\n{reported}",
            unit.display(),
            output.status
        ))
    }
}
