//! `promtool check metrics`: validates a Prometheus text exposition the way Prometheus' own
//! linter does (syntax, types, `HELP`, naming conventions such as `_total` counters and base
//! units).
//!
//! When `promtool` is not installed, the first caller installs Debian's `prometheus` package
//! with `apt-get` (once, under a lock file). If that fails the test panics saying what is
//! missing; there is no switch to skip.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::apt;

/// The path of `promtool`, installing Debian's `prometheus` package when it is missing.
///
/// # Panics
///
/// When it is missing and cannot be installed.
pub fn promtool_path() -> PathBuf {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| apt::locate_or_install("promtool", "prometheus"))
        .clone()
        .unwrap_or_else(|missing| panic!("{missing}"))
}

/// Runs `promtool check metrics` on `exposition`.
///
/// # Errors
///
/// Every problem promtool reports (its output), when it finds any.
///
/// # Panics
///
/// When promtool cannot be installed or run.
pub fn check_metrics(exposition: &str) -> Result<(), String> {
    let promtool = promtool_path();
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", promtool.display()));
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(exposition.as_bytes())
        .unwrap_or_else(|e| panic!("cannot write to promtool: {e}"));
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("promtool did not finish: {e}"));
    let reported = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // promtool exits non-zero on errors and prints lint problems (also non-zero since 2.x).
    if output.status.success() && reported.trim().is_empty() {
        Ok(())
    } else {
        Err(format!(
            "promtool check metrics ({}): {reported}",
            output.status
        ))
    }
}

/// Runs `promtool <args>` in `dir` (`check rules FILE`, `test rules FILE`).
///
/// # Errors
///
/// What promtool printed, when it exits with a failure.
///
/// # Panics
///
/// When promtool cannot be installed or run.
pub fn run_in(dir: &std::path::Path, args: &[&str]) -> Result<String, String> {
    let promtool = promtool_path();
    let output = Command::new(&promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", promtool.display()));
    let reported = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(reported)
    } else {
        Err(format!(
            "promtool {} ({}):\n{reported}",
            args.join(" "),
            output.status
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_exposition_passes_and_a_badly_named_counter_does_not() {
        let clean = "# HELP jobs_total Jobs done.\n# TYPE jobs_total counter\njobs_total 3\n";
        assert_eq!(check_metrics(clean), Ok(()));
        let unsuffixed = "# HELP jobs Jobs done.\n# TYPE jobs counter\njobs 3\n";
        let problems = check_metrics(unsuffixed).unwrap_err();
        assert!(problems.contains("_total"), "{problems}");
    }
}
