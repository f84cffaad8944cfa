//! The `unique-server` binary as a real process: help, flags, env, startup, shutdown.

mod common;

use std::process::{Command, Stdio};

use common::{BIN, announced_addr, exchange, stop_with_sigterm, write_secret};

#[test]
fn help_explains_every_flag_and_its_env_var() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "--listen",
        "UNIQUE_LISTEN",
        "--store",
        "UNIQUE_STORE",
        "--kick-timeout",
        "UNIQUE_KICK_TIMEOUT",
        "--max-claim-attempts",
        "UNIQUE_MAX_CLAIM_ATTEMPTS",
        "--log-format",
        "UNIQUE_LOG_FORMAT",
        "--db",
        "UNIQUE_DB",
        "--db-cache-records",
        "UNIQUE_DB_CACHE_RECORDS",
        "--auth-tokens",
        "UNIQUE_AUTH_TOKENS",
        "--insecure-no-auth",
        "UNIQUE_INSECURE_NO_AUTH",
        "--insecure-unsigned-kicks",
        "UNIQUE_INSECURE_UNSIGNED_KICKS",
        "--kick-signing-keys",
        "UNIQUE_KICK_SIGNING_KEYS",
        "--store-connect-timeout",
        "UNIQUE_STORE_CONNECT_TIMEOUT",
        "--store-attempt-timeout",
        "UNIQUE_STORE_ATTEMPT_TIMEOUT",
        "--store-operation-timeout",
        "UNIQUE_STORE_OPERATION_TIMEOUT",
        "--store-max-attempts",
        "UNIQUE_STORE_MAX_ATTEMPTS",
        "--ready-timeout",
        "UNIQUE_READY_TIMEOUT",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
}

#[test]
fn bad_flag_values_exit_non_zero_with_a_message() {
    for args in [
        &["--kick-timeout", "soon"][..],
        &["--listen", "nowhere"],
        &["--log-format", "xml"],
        &["--store", "floppy"],
        &["--store-attempt-timeout", "0s"],
        &["--store-operation-timeout", "soon"],
        &["--store-max-attempts", "0"],
        &["--ready-timeout", "0ms"],
        &["--db-cache-records", "many"],
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(args[0]), "{args:?}: {err}");
    }
}

#[test]
fn env_var_is_read_and_invalid_env_is_refused() {
    let out = Command::new(BIN)
        .env("UNIQUE_KICK_TIMEOUT", "never")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("kick-timeout"));
}

#[test]
fn prints_address_serves_and_stops_on_sigterm() {
    let mut child = Command::new(BIN)
        .env("UNIQUE_LISTEN", "127.0.0.1:0")
        .args(["--store", "memory", "--log-format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);

    let answer = exchange(
        &addr,
        "GET /healthz HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");

    let logs = stop_with_sigterm(child);
    // JSON log lines, one object each.
    for l in logs.lines() {
        assert!(
            l.starts_with('{') && l.ends_with('}'),
            "not a json log line: {l}"
        );
    }
    assert!(logs.contains("shutdown requested"), "{logs}");
}

fn current_request(authorization: Option<&str>) -> String {
    let body = r#"{"project":"game","env":"prod","uid":1}"#;
    let auth = authorization.map_or(String::new(), |a| format!("authorization: {a}\r\n"));
    format!(
        "POST /v1/current HTTP/1.1\r\nhost: t\r\nconnection: close\r\n{auth}\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn auth_tokens_file_guards_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.json");
    write_secret(
        &file,
        r#"{"tokens": [{"name": "game", "token": "bin-test-token-0123456789", "projects": ["game"]}]}"#,
    );
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--auth-tokens",
        ])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    let refused = exchange(&addr, &current_request(None));
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(refused.contains("unauthenticated"), "{refused}");
    let allowed = exchange(
        &addr,
        &current_request(Some("Bearer bin-test-token-0123456789")),
    );
    assert!(allowed.starts_with("HTTP/1.1 200"), "{allowed}");
    for probe in ["/healthz", "/readyz"] {
        let answer = exchange(
            &addr,
            &format!("GET {probe} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n"),
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{probe}: {answer}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_bad_tokens_file_stops_startup_without_echoing_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.json");
    write_secret(
        &file,
        r#"{"tokens": [{"name": "weak", "token": "tiny-secret", "projects": ["game"]}]}"#,
    );
    let out = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--auth-tokens",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--auth-tokens") && err.contains("shorter than 16"),
        "{err}"
    );
    assert!(!err.contains("tiny-secret"), "{err}");
    let missing = Command::new(BIN)
        .args([
            "--store",
            "memory",
            "--auth-tokens",
            "/nonexistent/tokens.json",
        ])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let both = Command::new(BIN)
        .args(["--insecure-no-auth", "--auth-tokens", "x.json"])
        .output()
        .unwrap();
    assert!(!both.status.success(), "the two flags exclude each other");
}

/// Starts the server on `store_args` (it panics when no address is announced) and stops it.
fn start_and_stop(store_args: &[&std::ffi::OsStr]) {
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0"])
        .args(store_args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    announced_addr(&mut child);
    stop_with_sigterm(child);
}

#[test]
fn the_default_store_will_not_start_empty_beside_an_earlier_default_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unique.db");
    let fjall = dir.path().join("unique.fjall");
    let (db_flag, fjall_flag) = (
        std::ffi::OsStr::new("--db"),
        std::ffi::OsStr::new("--fjall-dir"),
    );
    // What an earlier build's default left: a SQLite store at --db.
    start_and_stop(&[
        "--store".as_ref(),
        "sqlite".as_ref(),
        db_flag,
        db.as_os_str(),
    ]);

    let out = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0"])
        .arg(db_flag)
        .arg(&db)
        .arg(fjall_flag)
        .arg(&fjall)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the default must not start empty");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--store sqlite") && err.contains(&db.display().to_string()),
        "{err}"
    );
    assert!(!fjall.exists(), "a refused start creates nothing");

    // Naming either store starts it.
    for store in ["sqlite", "fjall"] {
        start_and_stop(&[
            "--store".as_ref(),
            store.as_ref(),
            db_flag,
            db.as_os_str(),
            fjall_flag,
            fjall.as_os_str(),
        ]);
    }
    assert!(fjall.is_dir(), "--store fjall made its directory");
}

#[test]
fn the_default_store_is_fjall_at_fjall_dir() {
    let dir = tempfile::tempdir().unwrap();
    let fjall = dir.path().join("sessions.fjall");
    start_and_stop(&["--fjall-dir".as_ref(), fjall.as_os_str()]);
    assert!(fjall.is_dir(), "the default store made --fjall-dir");
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["sessions.fjall"],
        "the fjall directory holds the leases too: no lease file beside it"
    );
}
