//! The binary's connection guards and TLS flags, on real processes.

mod common;

use std::process::{Command, Stdio};

use common::{BIN, announced_addr, announced_with_scheme};
use tokio::io::AsyncWriteExt;
use unique_testsupport::ChildGuard;
use unique_testsupport::net::{answer, closed_by_peer, connect_from, tls_answer};
use unique_testsupport::pki::TestPki;

const HEALTH: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";

#[test]
fn help_lists_the_guard_and_tls_flags_with_their_env_vars() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "tls-cert",
        "tls-key",
        "tls-client-ca",
        "max-connections",
        "max-connections-per-ip",
        "header-timeout",
        "idle-timeout",
        "body-timeout",
        "backlog",
    ] {
        let env = format!("UNIQUE_{}", flag.to_uppercase().replace('-', "_"));
        assert!(help.contains(&format!("--{flag}")), "--help lacks --{flag}");
        assert!(help.contains(&env), "--help lacks {env}");
    }
}

#[test]
fn incomplete_or_invalid_guard_flags_are_refused() {
    for (args, needle) in [
        (&["--tls-client-ca", "ca.pem"][..], "--tls-cert"),
        (&["--tls-cert", "cert.pem"], "--tls-key"),
        (&["--tls-key", "key.pem"], "--tls-cert"),
        (&["--header-timeout", "0s"], "--header-timeout"),
        (&["--idle-timeout", "soon"], "--idle-timeout"),
        (&["--max-connections", "0"], "--max-connections"),
        (&["--backlog", "0"], "--backlog"),
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn unusable_tls_files_are_a_startup_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let missing = dir.path().join("missing.pem");
    for (cert, key, needle) in [
        (&missing, &missing, "cannot read certificate chain"),
        (&garbage, &garbage, "certificate chain:"),
    ] {
        let out = Command::new(BIN)
            .args(["--store", "memory", "--listen", "127.0.0.1:0"])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot set up TLS"), "{err}");
        assert!(err.contains(needle), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(out.stdout.is_empty(), "announced despite the error");
    }
}

/// Starts the binary on the memory store with `args`; returns it and the address announced with
/// `scheme`.
fn start(args: &[&std::ffi::OsStr], scheme: &str) -> (ChildGuard, String) {
    let mut child = Command::new(BIN)
        .args(["--store", "memory", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = if scheme == "http" {
        announced_addr(&mut child)
    } else {
        announced_with_scheme(&mut child, scheme)
    };
    (ChildGuard::new(child, "unique-server"), addr)
}

#[tokio::test]
async fn the_guard_flags_reach_the_server() {
    let (_server, addr) = start(
        &[
            "--max-connections-per-ip".as_ref(),
            "1".as_ref(),
            "--header-timeout".as_ref(),
            "300ms".as_ref(),
            "--backlog".as_ref(),
            "64".as_ref(),
        ],
        "http",
    );
    let addr = addr.parse().unwrap();
    let local = std::net::Ipv4Addr::LOCALHOST.into();
    let mut first = connect_from(local, addr).await;
    let health = answer(&mut first, HEALTH).await.unwrap();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    // One connection per address: a second one is closed unanswered.
    let mut second = connect_from(local, addr).await;
    assert_eq!(answer(&mut second, HEALTH).await, None);
    // The first, now idle, still gets a half-sent head closed by the header timeout.
    first.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    assert_eq!(closed_by_peer(&mut first).await, b"");
}

/// The binary serving HTTPS with `pki`'s server identity, and with mutual TLS when `mutual`;
/// returns it, its address, and the directory holding the PEM files (keep it until the end).
fn start_tls(pki: &TestPki, mutual: bool) -> (ChildGuard, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = Vec::new();
    let mut flag = |name: &str, file: &str, pem: &str| {
        let path = dir.path().join(file);
        std::fs::write(&path, pem).unwrap();
        args.push(std::ffi::OsString::from(name));
        args.push(path.into_os_string());
    };
    flag("--tls-cert", "chain.pem", &pki.server_chain);
    flag("--tls-key", "key.pem", &pki.server_key);
    if mutual {
        flag("--tls-client-ca", "client-ca.pem", &pki.client_ca);
    }
    let args: Vec<&std::ffi::OsStr> = args.iter().map(AsRef::as_ref).collect();
    let (server, addr) = start(&args, "https");
    (server, addr, dir)
}

/// GET /healthz over TLS; `None` when the handshake or the exchange fails.
async fn tls_health(addr: &str, pki: &TestPki, with_certificate: bool) -> Option<String> {
    let addr = addr.parse().unwrap();
    tls_answer(addr, pki.client_config(with_certificate), HEALTH).await
}

#[tokio::test]
async fn with_a_certificate_and_key_it_serves_https() {
    let pki = TestPki::generate();
    let (_server, addr, _pem) = start_tls(&pki, false);
    let health = tls_health(&addr, &pki, false).await.unwrap();
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("ok"),
        "{health}"
    );
}

#[tokio::test]
async fn with_a_client_ca_it_serves_only_clients_with_a_certificate() {
    let pki = TestPki::generate();
    let (_server, addr, _pem) = start_tls(&pki, true);
    assert_eq!(tls_health(&addr, &pki, false).await, None);
    let health = tls_health(&addr, &pki, true).await.unwrap();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
}
