//! Debian packages that tests need, installed with `apt-get` when their binary is missing.

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::tools_dir;

/// The path of `binary` (on `PATH` or in the usual system directories), installing Debian's
/// `package` first when it is missing: once per package at a time across processes, under a
/// lock file, so parallel test binaries do not race each other.
///
/// # Errors
///
/// What is missing and how to install it, when `apt-get` fails or installs no such binary.
pub(crate) fn locate_or_install(binary: &str, package: &str) -> Result<PathBuf, String> {
    find_or_install(binary, package, || locate(binary))
}

/// As [`locate_or_install`], with `find` saying where the binary is: for packages that
/// install outside `PATH` (PostgreSQL's server binaries live in a versioned directory).
pub(crate) fn find_or_install(
    binary: &str,
    package: &str,
    find: impl Fn() -> Option<PathBuf>,
) -> Result<PathBuf, String> {
    if let Some(found) = find() {
        return Ok(found);
    }
    // Parallel test binaries may all find it missing; the lock file makes one of
    // them install while the others wait and then find it.
    let dir = tools_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let lock_path = dir.join(format!("{package}-install.lock"));
    let lock = File::create(&lock_path)
        .map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    if let Some(found) = find() {
        return Ok(found);
    }
    apt_get(&["update"], binary, package)?;
    apt_get(
        &["install", "-y", "--no-install-recommends", package],
        binary,
        package,
    )?;
    find().ok_or_else(|| {
        format!(
            "{binary} is missing: apt-get installed {package} but no {binary} binary \
             is where it was looked for"
        )
    })
}

pub(crate) fn locate(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/sbin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
}

fn apt_get(args: &[&str], binary: &str, package: &str) -> Result<(), String> {
    let output = Command::new("apt-get")
        // Wait for another apt run (another test binary, another tool) instead of failing.
        .args(["-o", "DPkg::Lock::Timeout=600", "-q"])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "{binary} is missing and apt-get could not run ({e}); \
                 install Debian's {package} package"
            )
        })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(format!(
        "{binary} is missing and `apt-get {}` failed with {}: {}; \
         install Debian's {package} package (apt-get install {package})",
        args.join(" "),
        output.status,
        tail(&stderr, 800)
    ))
}

/// The last `max` bytes of `text`, trimmed, cut on a character boundary.
pub(crate) fn tail(text: &str, max: usize) -> &str {
    let text = text.trim();
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        assert_eq!(tail("  abcdef \n", 3), "def");
        assert_eq!(tail("ab", 10), "ab");
        assert_eq!(tail("é-é", 2), "é");
    }
}
