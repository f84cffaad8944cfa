//! The binary on `--store dynamodb` against a real DynamoDB-compatible server
//! (dynalite, started by the test tooling), and its bounded startup errors.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use unique_testsupport::dynalite::Dynalite;
use unique_testsupport::proxy::StallProxy;
use unique_testsupport::{ChildGuard, free_port};

use common::{dynamodb_command as server_command, http, request, start};

/// Starts the server with `--create-table` and waits for its address.
fn serve(mut command: Command) -> (String, ChildGuard) {
    start(command.arg("--create-table"))
}

#[test]
fn serves_claims_on_dynamodb_and_creates_the_table() {
    let dynalite = Dynalite::shared();
    let (addr, _server) = serve(server_command(
        &dynalite.endpoint_url(),
        "server-binary-test",
    ));

    let claim = r#"{"project":"srv","env":"ddb","uid":7,"owner":{"endpoint":"http://127.0.0.1:9/k"},"claim_id":"c1"}"#;
    let first = http(&addr, "/v1/claim", claim);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.contains(r#""gen":1"#), "{first}");
    let replay = http(&addr, "/v1/claim", claim);
    assert!(replay.contains(r#""replayed":true"#), "{replay}");
    let current = http(
        &addr,
        "/v1/current",
        r#"{"project":"srv","env":"ddb","uid":7}"#,
    );
    assert!(current.contains(r#""exists":true"#), "{current}");
}

#[test]
fn missing_table_without_create_is_a_clear_startup_error() {
    let dynalite = Dynalite::shared();
    let out = server_command(&dynalite.endpoint_url(), "no-such-table")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-table"), "{err}");
}

#[test]
fn unreachable_endpoint_fails_within_the_startup_bound() {
    let dead = format!("http://127.0.0.1:{}", free_port());
    let started = Instant::now();
    let out = server_command(&dead, "t").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dynamodb"), "{err}");
    // Bounded: the startup check gives up, it does not hang (10 s bound plus process start).
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

/// The store stops answering (a proxy in front of dynalite swallows every byte, on new
/// and pooled connections alike): a claim answers 503 within the documented bound,
/// `max_claim_attempts × (operation timeout + kick timeout + operation timeout)`, and
/// `/readyz` answers 503. Once the store answers again both recover, on new connections:
/// the silenced pooled ones never answer again, so the attempt timeout must drop them.
#[test]
fn a_stalled_store_answers_503_within_the_bound_and_recovers() {
    let proxy = StallProxy::start(Dynalite::shared().addr());
    // Short store timeouts, with room for a loaded machine's slow answers while forwarding.
    let (operation, kick, claim_attempts) =
        (Duration::from_millis(1500), Duration::from_millis(500), 1);
    let mut command = server_command(&proxy.url(), "server-stall-test");
    command
        .args(["--store-attempt-timeout", "500ms"])
        .args(["--store-operation-timeout", "1500ms"])
        .args(["--store-max-attempts", "3"])
        .args(["--kick-timeout", "500ms"])
        .args(["--max-claim-attempts", "1"]);
    let (addr, _server) = serve(command);
    let bound = (operation + kick + operation) * claim_attempts;
    let claim = |uid: u32| {
        format!(
            r#"{{"project":"srv","env":"stall","uid":{uid},"owner":{{"endpoint":"http://127.0.0.1:9/k"}},"claim_id":"c{uid}"}}"#
        )
    };
    let ok = |answer: &str| answer.starts_with("HTTP/1.1 200");

    // Answering: claims and readiness go through, and leave pooled connections behind.
    let first = http(&addr, "/v1/claim", &claim(1));
    assert!(ok(&first), "{first}");
    let ready = request(&addr, "GET", "/readyz", "");
    assert!(ok(&ready) && ready.ends_with("ok"), "{ready}");

    proxy.stall();
    let started = Instant::now();
    let stalled = http(&addr, "/v1/claim", &claim(2));
    let took = started.elapsed();
    assert!(stalled.starts_with("HTTP/1.1 503"), "{stalled}");
    assert!(stalled.contains(r#""error":"unavailable""#), "{stalled}");
    // A correctness ceiling (the claim is bounded at all), not a speed measurement.
    assert!(
        took < bound * 3,
        "a stalled claim took {took:?}; bound {bound:?}"
    );
    let not_ready = request(&addr, "GET", "/readyz", "");
    assert!(not_ready.starts_with("HTTP/1.1 503"), "{not_ready}");
    assert!(not_ready.contains("store not ready"), "{not_ready}");

    proxy.forward();
    let retried = http(&addr, "/v1/claim", &claim(2));
    assert!(ok(&retried), "{retried}");
    assert!(retried.contains(r#""gen":1"#), "{retried}");
    let ready = request(&addr, "GET", "/readyz", "");
    assert!(ok(&ready), "{ready}");
}
