//! The secret files and what an exposed address demands, on the real binary: a tokens or
//! keys file open to group or others stops startup with the fix; an exposed server with
//! tokens needs signing keys or `--insecure-unsigned-kicks`.
//!
//! The exposed cases listen on `0.0.0.0:0` (every local address); the tests only ever
//! connect to 127.0.0.1.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{BIN, announced_addr, request, stop_with_sigterm, write_secret};

const TOKEN: &str = "secrets-test-token-0123456789";
const KEY: &str = "secrets-test-key-0123456789abcdef0123456789";

fn tokens_json() -> String {
    format!(r#"{{"tokens": [{{"name": "game", "token": "{TOKEN}", "projects": ["game"]}}]}}"#)
}

/// A scratch directory with an owner-only tokens file and keys file.
fn secret_files() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (tokens, keys) = (dir.path().join("tokens.json"), dir.path().join("kick.keys"));
    write_secret(&tokens, &tokens_json());
    write_secret(&keys, &format!("{KEY}\n"));
    (dir, tokens, keys)
}

fn server(listen: &str) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["--listen", listen, "--store", "memory"])
        .env("RUST_LOG", "warn");
    command
}

/// Runs a server that must refuse to start; returns its stderr. A server that starts
/// instead (it announces its address) fails the test at once rather than running on.
fn refused(command: &mut Command) -> String {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first line, or nothing once the server has exited (its stdout closes).
    let mut announced = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut announced)
        .unwrap();
    if !announced.is_empty() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("started instead of refusing: {announced}");
    }
    let Output { status, stderr, .. } = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&stderr).into_owned();
    assert!(!status.success(), "exited with success: {stderr}");
    stderr
}

/// Starts a server that must start, checks it answers on 127.0.0.1, stops it and returns
/// its stderr.
fn served(command: &mut Command) -> String {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let announced = announced_addr(&mut child);
    let port = announced.rsplit_once(':').unwrap().1;
    let health = request(&format!("127.0.0.1:{port}"), "GET", "/healthz", "");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    stop_with_sigterm(child)
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_secret_file_open_to_group_or_others_stops_startup_with_the_fix() {
    let (_dir, tokens, keys) = secret_files();
    for (flag, file, mode) in [
        ("--auth-tokens", &tokens, 0o644),
        ("--auth-tokens", &tokens, 0o660),
        ("--kick-signing-keys", &keys, 0o620),
        ("--kick-signing-keys", &keys, 0o604),
    ] {
        set_mode(file, mode);
        let err = refused(server("127.0.0.1:0").arg(flag).arg(file));
        let path = file.display();
        assert!(err.contains(&format!("{flag}: refusing {path}")), "{err}");
        assert!(err.contains(&format!("mode {mode:04o}")), "{err}");
        assert!(err.contains(&format!("chmod 600 {path}")), "{err}");
        assert!(!err.contains(TOKEN) && !err.contains(KEY), "{err}");
        set_mode(file, 0o600);
    }
    set_mode(&keys, 0o400);
    let logs = served(
        server("127.0.0.1:0")
            .arg("--auth-tokens")
            .arg(&tokens)
            .arg("--kick-signing-keys")
            .arg(&keys),
    );
    assert!(!logs.contains(TOKEN) && !logs.contains(KEY), "{logs}");
}

#[test]
fn an_exposed_server_with_tokens_needs_signing_keys_or_the_waiver() {
    let (_dir, tokens, keys) = secret_files();
    let err = refused(server("0.0.0.0:0").arg("--auth-tokens").arg(&tokens));
    assert!(
        err.contains("refusing to send unsigned kicks")
            && err.contains("--kick-signing-keys FILE")
            && err.contains("--insecure-unsigned-kicks"),
        "{err}"
    );

    let logs = served(
        server("0.0.0.0:0")
            .arg("--auth-tokens")
            .arg(&tokens)
            .arg("--insecure-unsigned-kicks"),
    );
    assert!(logs.contains("sending unsigned kicks"), "{logs}");
    let logs = served(
        server("0.0.0.0:0")
            .arg("--auth-tokens")
            .arg(&tokens)
            .env("UNIQUE_INSECURE_UNSIGNED_KICKS", "true"),
    );
    assert!(logs.contains("sending unsigned kicks"), "{logs}");

    let logs = served(
        server("0.0.0.0:0")
            .arg("--auth-tokens")
            .arg(&tokens)
            .arg("--kick-signing-keys")
            .arg(&keys),
    );
    assert!(!logs.contains("WARN"), "{logs}");

    let both = refused(
        server("127.0.0.1:0")
            .arg("--kick-signing-keys")
            .arg(&keys)
            .arg("--insecure-unsigned-kicks"),
    );
    assert!(both.contains("cannot be used with"), "{both}");
}

#[test]
fn an_exposed_server_without_auth_warns_that_kicks_are_unsigned_too() {
    let logs = served(server("0.0.0.0:0").arg("--insecure-no-auth"));
    assert!(
        logs.contains("serving without caller authentication") && logs.contains("unsigned kicks"),
        "{logs}"
    );
    let (_dir, _tokens, keys) = secret_files();
    let logs = served(
        server("0.0.0.0:0")
            .arg("--insecure-no-auth")
            .arg("--kick-signing-keys")
            .arg(&keys),
    );
    assert!(
        logs.contains("serving without caller authentication") && !logs.contains("unsigned kicks"),
        "{logs}"
    );
    // On loopback every combination starts without a warning.
    let logs = served(server("127.0.0.1:0").arg("--insecure-unsigned-kicks"));
    assert!(!logs.contains("WARN"), "{logs}");
}
