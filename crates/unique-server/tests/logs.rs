//! What the binary logs: plain text when stderr is not a terminal, a request id and
//! the key's fields on every claim, kick and release event, never an endpoint's
//! query string.

mod common;

use std::process::{Child, Command, Stdio};

use common::{BIN, announced_addr, exchange, stop_with_sigterm};

/// An endpoint nobody listens on (port 1 of loopback refuses), with a secret in its
/// query string that must never reach a log line.
const OLD_ENDPOINT: &str = "http://127.0.0.1:1/kick?token=s3cr3t-query";

fn start(format: &str) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--log-format",
            format,
        ])
        .args(["--kick-timeout", "2s"])
        .env("RUST_LOG", "info,unique=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    (child, addr)
}

/// A first login, a takeover whose kick to the old endpoint fails, and a release with
/// a caller-chosen request id; then stops the server and returns its logs.
fn scripted_session(format: &str) -> String {
    let (child, addr) = start(format);
    let claim = |endpoint: &str, claim_id: &str| {
        format!(
            r#"{{"project":"game","env":"prod","uid":7,"owner":{{"endpoint":"{endpoint}"}},"claim_id":"{claim_id}"}}"#
        )
    };
    let first = exchange(
        &addr,
        &post("/v1/claim", "", &claim(OLD_ENDPOINT, "login-1")),
    );
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let new_endpoint = "http://127.0.0.1:2/kick";
    let second = exchange(
        &addr,
        &post("/v1/claim", "", &claim(new_endpoint, "login-2")),
    );
    assert!(
        second.contains(r#""kick_detail":"connect-error""#),
        "{second}"
    );
    let release = post(
        "/v1/release",
        "x-request-id: trace-abc-123\r\n",
        r#"{"project":"game","env":"prod","uid":7,"gen":2}"#,
    );
    let released = exchange(&addr, &release);
    assert!(released.contains(r#"{"released":true}"#), "{released}");
    stop_with_sigterm(child)
}

/// A `POST path` with extra header lines and a JSON body, closing the connection after it.
fn post(path: &str, headers: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n{headers}\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn text_logs_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    let logs = scripted_session("text");
    assert!(logs.contains("claim ok"), "{logs}");
    assert!(
        !logs.contains('\u{1b}'),
        "escape codes in a piped log:\n{logs:?}"
    );
    assert!(
        !logs.contains("s3cr3t"),
        "an endpoint's query string was logged:\n{logs}"
    );
}

#[test]
fn claim_kick_and_release_events_carry_the_request_id_and_the_key() {
    let logs = scripted_session("json");
    assert!(
        !logs.contains("s3cr3t"),
        "an endpoint's query string was logged:\n{logs}"
    );
    let events: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let unique: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["target"] == "unique").collect();
    let messages: Vec<&str> = unique
        .iter()
        .map(|e| e["fields"]["message"].as_str().unwrap())
        .collect();
    for wanted in ["claim ok", "kick", "release"] {
        assert!(
            messages.contains(&wanted),
            "no {wanted:?} event in {messages:?}"
        );
    }
    let mut ids = Vec::new();
    for event in &unique {
        let span = &event["span"];
        assert_eq!(span["project"], "game", "{event}");
        assert_eq!(span["env"], "prod", "{event}");
        assert_eq!(span["uid"], 7, "{event}");
        let id = span["request_id"].as_str().expect("a request id");
        assert!(!id.is_empty(), "{event}");
        ids.push((
            id.to_owned(),
            span["operation"].as_str().unwrap().to_owned(),
        ));
    }
    // The two claims are two requests: their events carry two ids.
    let claim_ids: std::collections::BTreeSet<_> = ids
        .iter()
        .filter(|(_, op)| op == "claim")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(claim_ids.len(), 2, "{ids:?}");
    // A caller-chosen id (from a proxy, say) is the one logged.
    let release = unique
        .iter()
        .find(|e| e["fields"]["message"] == "release")
        .expect("a release event");
    assert_eq!(release["span"]["request_id"], "trace-abc-123", "{release}");
    assert_eq!(release["span"]["operation"], "release", "{release}");
}
