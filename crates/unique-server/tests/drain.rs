//! A node draining over HTTP against the real binary, with `--audit-log` and `/metrics`: every
//! release of the drain tells the server `reason: node-draining`, which records it in the
//! release's audit record and counts it in `unique_releases_by_reason_total{reason,released}`;
//! a plain logout is recorded with no reason and not counted. And the field's rules on the
//! wire: a malformed reason is refused 400, a well-formed one the server does not know reads
//! as none.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{BIN, post_json, request, start, write_secret};
use serde_json::{Value, json};
use unique_client::{Ending, HeartbeatOptions, Node};
use unique_client_http::HttpTransport;
use unique_core::{Key, Owner};
use unique_testsupport::ChildGuard;

const TOKEN: &str = "drain-test-token-0123456789";
/// Nobody listens on loopback port 1: a takeover's kick to the draining node cannot reach it,
/// so the node still holds the replaced session when it drains.
const UNREACHABLE: &str = "http://127.0.0.1:1/kick";
/// Sessions on the draining node.
const SESSIONS: usize = 20;
const DRAINED: &str = "node-draining";

/// A server on the memory store with one token and `--audit-log` in `dir`; its address, its
/// guard and the audit log's path.
fn server(dir: &Path) -> (String, ChildGuard, PathBuf) {
    let tokens = dir.join("tokens.json");
    write_secret(
        &tokens,
        &format!(r#"{{"tokens": [{{"name": "game", "token": "{TOKEN}", "projects": ["game"]}}]}}"#),
    );
    let audit = dir.join("audit.log");
    let (addr, guard) = start(
        Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
            .arg("--auth-tokens")
            .arg(tokens)
            .arg("--audit-log")
            .arg(&audit)
            .env("RUST_LOG", "warn"),
    );
    (addr, guard, audit)
}

/// The audit log's `release` records, in order.
fn releases(audit: &Path) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|record| record["event"] == "release")
        .collect()
}

/// `GET /metrics`: the exposition, which promtool must accept, and the value of
/// `unique_releases_by_reason_total{reason="node-draining",released=…}`.
fn drain_counts(addr: &str) -> (f64, f64) {
    let answer = request(addr, "GET", "/metrics", "");
    let (_, exposition) = answer.split_once("\r\n\r\n").unwrap();
    if let Err(problems) = unique_testsupport::promtool::check_metrics(exposition) {
        panic!("{problems}\n{exposition}");
    }
    let count = |released: &str| {
        let series = exposition
            .lines()
            .filter(|line| {
                line.starts_with("unique_releases_by_reason_total{")
                    && line.contains(r#"reason="node-draining""#)
                    && line.contains(&format!(r#"released="{released}""#))
            })
            .collect::<Vec<_>>();
        assert_eq!(series.len(), 1, "{released}: {series:?} in\n{exposition}");
        series[0]
            .rsplit_once(' ')
            .unwrap()
            .1
            .parse::<f64>()
            .unwrap()
    };
    (count("true"), count("false"))
}

fn key(uid: usize) -> Key {
    Key::new("game", "prod", i64::try_from(uid).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_is_audited_and_counted_release_by_release() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _server, audit) = server(dir.path());
    assert_eq!(
        drain_counts(&addr),
        (0.0, 0.0),
        "registered at 0 from the start"
    );
    let transport = HttpTransport::builder(format!("http://{addr}"))
        .bearer_token(TOKEN)
        .build()
        .unwrap();
    // No heartbeat during the test: the replaced session must still be here for the drain.
    let quiet = HeartbeatOptions::default().interval(Duration::from_hours(1));
    let (node, _events) = Node::builder(transport.clone(), Owner::new("eu", "a", UNREACHABLE))
        .heartbeat_options(quiet)
        .build();
    let mut sessions = Vec::new();
    for uid in 1..=SESSIONS {
        sessions.push(node.login(key(uid)).await.unwrap());
    }
    // A takeover of uid 1 from another node, whose kick cannot reach this one: the drain's
    // release of gen 1 then finds gen 2 and releases nothing.
    let (other, _other_events) =
        Node::builder(transport, Owner::new("eu", "b", UNREACHABLE)).build();
    assert_eq!(other.login(key(1)).await.unwrap().generation(), 2);
    // A plain logout: a release without a reason.
    let plain = node.login(key(SESSIONS + 1)).await.unwrap();
    assert!(plain.logout().await.unwrap());

    let drain = node.drain(Duration::from_mins(1)).await;
    assert_eq!((drain.released, drain.unreleased), (SESSIONS - 1, 1));
    for session in sessions {
        assert_eq!(session.ended().await, Ending::Drained);
    }

    // Each record is durable before its answer, so the drain's are all there now.
    let records = releases(&audit);
    let (drained, plain): (Vec<_>, Vec<_>) = records
        .iter()
        .partition(|record| record["reason"] == DRAINED);
    assert_eq!(drained.len(), SESSIONS, "{records:#?}");
    let mut uids: Vec<_> = drained.iter().map(|r| r["uid"].as_i64().unwrap()).collect();
    uids.sort_unstable();
    assert_eq!(uids, (1..=20).collect::<Vec<_>>());
    let unreleased: Vec<_> = drained.iter().filter(|r| r["released"] == false).collect();
    assert_eq!(unreleased.len(), 1, "{drained:#?}");
    assert_eq!(
        (&unreleased[0]["uid"], &unreleased[0]["gen"]),
        (&json!(1), &json!(1))
    );
    assert!(drained.iter().all(|r| r["token"] == "game"), "{drained:#?}");
    assert_eq!(plain.len(), 1, "{records:#?}");
    assert_eq!(plain[0]["uid"], json!(SESSIONS + 1));
    assert_eq!(plain[0]["reason"], Value::Null);
    assert_eq!(plain[0]["released"], true);

    let released = f64::from(u32::try_from(SESSIONS - 1).unwrap());
    assert_eq!(drain_counts(&addr), (released, 1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_reason_is_refused_and_an_unknown_one_reads_as_none() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _server, audit) = server(dir.path());
    let release = |reason: Value| json!({"project": "game", "env": "prod", "uid": 1, "gen": 1, "reason": reason});
    for malformed in [
        json!(""),
        json!("Node-Draining"),
        json!("node draining"),
        json!(7),
    ] {
        let (status, body) = post_json(&addr, "/v1/release", TOKEN, &release(malformed)).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"], "invalid_params", "{body}");
        assert!(
            body["message"].as_str().unwrap().starts_with("reason: "),
            "{body}"
        );
    }
    assert!(
        releases(&audit).is_empty(),
        "a refused body records nothing"
    );

    for unknown in [json!("node-rebooting"), Value::Null] {
        let (status, body) = post_json(&addr, "/v1/release", TOKEN, &release(unknown)).await;
        assert_eq!((status, &body), (200, &json!({"released": false})));
    }
    let records = releases(&audit);
    assert_eq!(records.len(), 2);
    assert!(
        records.iter().all(|r| r["reason"].is_null()),
        "{records:#?}"
    );
    assert_eq!(drain_counts(&addr), (0.0, 0.0));
}
