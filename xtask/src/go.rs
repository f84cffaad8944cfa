//! `cargo xtask go`: the Go module in `clients/go` — gofmt, `go vet`, and `go test` against
//! the real `unique-server` (the tests also run `unique-node-check` against the Go kick
//! receiver). Go comes from Debian's `golang-go` (Go 1.19), installed with `apt-get` when `go`
//! is missing, so a fresh machine passes; the module uses the standard library only, and the
//! module proxy is switched off so nothing is ever downloaded.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Run, cargo, root};

/// Where the module lives, from the workspace root.
pub(crate) const MODULE: &str = "clients/go";

/// The Debian package that provides `go`.
const PACKAGE: &str = "golang-go";

/// The binaries the Go tests run, each named to them by an environment variable.
const BINARIES: &[(&str, &str)] = &[
    ("unique-server", "UNIQUE_SERVER_BIN"),
    ("unique-node-check", "UNIQUE_NODE_CHECK_BIN"),
];

pub(crate) fn run(run: &mut Run) {
    if !installed() {
        install(run);
        if !installed() {
            eprintln!("xtask: go is still missing after installing {PACKAGE}");
            run.record("go (the Go module)", false, Duration::ZERO);
            return;
        }
    }
    let mut build = cargo(&["build"]);
    for (package, _) in BINARIES {
        build.args(["-p", package, "--bin", package]);
    }
    run.step("go: build unique-server and unique-node-check", build);
    gofmt(run);
    run.step("go vet ./... (clients/go)", go(&["vet", "./..."]));
    // -count=1: the results depend on binaries outside Go's view, so none is cached.
    let mut test = go(&["test", "-count=1", "./..."]);
    let target = target_dir();
    for (package, var) in BINARIES {
        test.env(var, target.join("debug").join(package));
    }
    run.step(
        "go test ./... (clients/go, against unique-server; unique-node-check on the Go receiver)",
        test,
    );
}

fn installed() -> bool {
    Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn install(run: &mut Run) {
    for args in [
        &["update"][..],
        &["install", "-y", "--no-install-recommends", PACKAGE][..],
    ] {
        let mut cmd = Command::new("apt-get");
        cmd.args(["-o", "DPkg::Lock::Timeout=600", "-q"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null());
        run.step(&format!("go: apt-get {}", args.join(" ")), cmd);
    }
}

/// `go` in the module's directory, with the module proxy and checksum database off: the
/// module needs no download, and must not start to.
fn go(args: &[&str]) -> Command {
    let mut cmd = Command::new("go");
    cmd.args(args)
        .current_dir(root().join(MODULE))
        .env("GOPROXY", "off")
        .env("GOSUMDB", "off");
    cmd
}

/// Fails when `gofmt -l` lists a file.
fn gofmt(run: &mut Run) {
    let name = "gofmt (clients/go)";
    eprintln!("\n==> xtask: {name}");
    let started = Instant::now();
    let ok = match Command::new("gofmt")
        .args(["-l", "."])
        .current_dir(root().join(MODULE))
        .output()
    {
        Ok(out) if out.status.success() && out.stdout.is_empty() => true,
        Ok(out) => {
            eprintln!(
                "xtask: gofmt would change:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            false
        }
        Err(e) => {
            eprintln!("xtask: cannot run gofmt: {e}");
            false
        }
    };
    run.record(name, ok, started.elapsed());
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (relative to the workspace root) or `target`.
pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root().join(Path::new(&dir)),
        None => root().join("target"),
    }
}
