//! Schemathesis, pinned, in a Python virtual environment under `.tools/`, and the tools that
//! give a run a network namespace with only loopback (`unshare`, `ip`).
//!
//! The first caller creates `.tools/schemathesis-<VERSION>/` with `python3 -m venv` and
//! installs `schemathesis==<VERSION>` into it with pip (once, under a lock file); Debian's
//! `python3`, `python3-venv`, `util-linux` and `iproute2` are installed with `apt-get` when
//! missing. If any step fails the caller panics saying what is missing; there is no switch to
//! skip.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::apt::{self, tail};
use crate::tools_dir;

/// The schemathesis release the tests run; its CLI flags and checks are what they rely on.
pub const VERSION: &str = "4.32.5";

/// The path of the pinned `schemathesis` command, installing it when it is missing.
///
/// # Panics
///
/// When it is missing and cannot be installed (no Python, no venv, pip failed).
pub fn schemathesis_path() -> PathBuf {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    INSTALLED
        .get_or_init(install)
        .clone()
        .unwrap_or_else(|missing| panic!("{missing}"))
}

/// The paths of `unshare` and `ip`, installing Debian's `util-linux` and `iproute2` when
/// they are missing.
///
/// # Panics
///
/// When one is missing and cannot be installed.
pub fn namespace_tools() -> (PathBuf, PathBuf) {
    let unshare = apt::locate_or_install("unshare", "util-linux").unwrap_or_else(|m| panic!("{m}"));
    let ip = apt::locate_or_install("ip", "iproute2").unwrap_or_else(|m| panic!("{m}"));
    (unshare, ip)
}

fn install() -> Result<PathBuf, String> {
    let venv = tools_dir().join(format!("schemathesis-{VERSION}"));
    let bin = venv.join("bin").join("schemathesis");
    // Written last: a venv without it is a broken install, made again.
    let stamp = venv.join("installed");
    if stamp.is_file() && bin.is_file() {
        return Ok(bin);
    }
    let dir = tools_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let lock_path = dir.join("schemathesis-install.lock");
    let lock = File::create(&lock_path)
        .map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    if stamp.is_file() && bin.is_file() {
        return Ok(bin);
    }
    let python = apt::locate_or_install("python3", "python3")?;
    // Debian's python3 makes venvs only with python3-venv (ensurepip) installed.
    apt::find_or_install("python3 -m venv", "python3-venv", || {
        can_make_venvs(&python).then(|| python.clone())
    })?;
    if venv.exists() {
        fs::remove_dir_all(&venv)
            .map_err(|e| format!("cannot remove the broken {}: {e}", venv.display()))?;
    }
    run(
        Command::new(&python).arg("-m").arg("venv").arg(&venv),
        "python3 -m venv",
    )?;
    run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("schemathesis=={VERSION}")),
        &format!("pip install schemathesis=={VERSION}"),
    )?;
    let version = run(
        Command::new(&bin).arg("--version"),
        "schemathesis --version",
    )?;
    if !version.contains(VERSION) {
        return Err(format!(
            "schemathesis is not {VERSION} after installing it: {version}"
        ));
    }
    fs::write(&stamp, VERSION).map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    Ok(bin)
}

fn can_make_venvs(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import venv, ensurepip"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `command`, returning its stdout; what it printed when it fails.
fn run(command: &mut Command, what: &str) -> Result<String, String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("schemathesis cannot be installed: {what} could not run ({e})"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        return Ok(stdout);
    }
    Err(format!(
        "schemathesis cannot be installed: {what} failed with {}: {}{}",
        output.status,
        tail(&stdout, 400),
        tail(&String::from_utf8_lossy(&output.stderr), 800)
    ))
}
