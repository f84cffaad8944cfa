//! The binary on `--store postgres` against a real PostgreSQL that accepts only TLS over TCP
//! (started by the test tooling with a CA made at test time): serving claims over
//! `sslmode=verify-full`, and refusing to start, with a message naming the cause, when the
//! URL trusts the wrong CA, asks for no TLS, or names a root file that does not exist.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use unique_testsupport::postgres::{self, PASSWORD, PostgresServer};

use common::{announced_addr, http, postgres_command, stop_with_sigterm};

const TABLE: &str = "server_tls_test";

/// The server on the TLS-only database with `params` as the URL's query, the URL passed
/// through the environment as a deployment would. Without `--create-table`, a refusal comes
/// from the startup check.
fn server_command(db: &PostgresServer, params: &str) -> Command {
    postgres_command(&format!("{}?{params}", db.url()), TABLE)
}

/// Runs the server to its exit, which must be a refusal within the startup check's bound;
/// returns its stderr, which must not hold the password.
fn refused_startup(command: &mut Command) -> String {
    let started = Instant::now();
    let out = command.stdin(Stdio::null()).output().unwrap();
    assert!(!out.status.success(), "the server must refuse to start");
    assert!(
        started.elapsed() < Duration::from_mins(1),
        "took {:?}",
        started.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !err.contains(PASSWORD),
        "the password reached the log: {err}"
    );
    err
}

#[test]
fn serves_claims_over_verify_full_with_the_right_ca() {
    let db = postgres::shared_tls();
    let ca = db
        .tls()
        .expect("a TLS server")
        .ca_file
        .display()
        .to_string();
    let mut child = server_command(&db, &format!("sslmode=verify-full&sslrootcert={ca}"))
        .arg("--create-table")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    let claim = r#"{"project":"tls","env":"pg","uid":7,"owner":{"endpoint":"http://127.0.0.1:9/k"},"claim_id":"c1"}"#;
    let first = http(&addr, "/v1/claim", claim);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.contains(r#""gen":1"#), "{first}");
    let current = http(
        &addr,
        "/v1/current",
        r#"{"project":"tls","env":"pg","uid":7}"#,
    );
    assert!(current.contains(r#""exists":true"#), "{current}");
    let logs = stop_with_sigterm(child);
    assert!(logs.contains("postgres store ready"), "{logs}");
    assert!(
        !logs.contains(PASSWORD),
        "the password reached the log: {logs}"
    );
}

#[test]
fn a_wrong_ca_is_refused_at_startup_naming_the_certificate_problem() {
    let db = postgres::shared_tls();
    let other = db
        .tls()
        .expect("a TLS server")
        .other_ca_file
        .display()
        .to_string();
    let err = refused_startup(&mut server_command(
        &db,
        &format!("sslmode=verify-full&sslrootcert={other}"),
    ));
    assert!(
        err.contains("TLS: the server's certificate is not signed by a trusted CA"),
        "{err}"
    );
    assert!(
        err.contains(&format!("sslmode=verify-full, sslrootcert={other}")),
        "{err}"
    );
}

#[test]
fn sslmode_disable_is_refused_at_startup_saying_the_server_wants_tls() {
    let db = postgres::shared_tls();
    let err = refused_startup(&mut server_command(&db, "sslmode=disable"));
    assert!(err.contains("no pg_hba.conf entry"), "{err}");
    assert!(
        err.contains("the connection did not use TLS (sslmode=disable)"),
        "{err}"
    );
    assert!(err.contains("needs sslmode=verify-full"), "{err}");
}

#[test]
fn a_missing_root_file_is_refused_before_connecting() {
    let db = postgres::shared_tls();
    let err = refused_startup(&mut server_command(
        &db,
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
    ));
    assert!(err.contains("cannot configure the postgres store"), "{err}");
    assert!(
        err.contains("sslrootcert /nonexistent/ca.pem: cannot read it"),
        "{err}"
    );
}
