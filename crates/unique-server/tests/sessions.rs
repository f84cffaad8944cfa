//! Device slots, the per-user listing, the admin logout of one slot and the audit log's slot
//! field, on the real binary over each shared store: fjall (the default), SQLite, PostgreSQL and
//! DynamoDB (dynalite), each started by the test tooling. One scripted sequence runs on
//! each; every answer, every kick the node receives and every audit line is checked.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use common::{BIN, dynamodb_command, post_json, postgres_command, start, write_secret};
use serde_json::{Value, json};
use unique_kick_contract::{Behaviour, Peer};
use unique_testsupport::ChildGuard;
use unique_testsupport::dynalite::Dynalite;

const ADMIN: &str = "sessions-test-admin-token-0123";

/// A table name no earlier run used (PostgreSQL and dynalite outlive one test).
fn fresh(what: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}_{}_{nanos}", std::process::id())
}

/// Adds the tokens file (one admin token for project `game`) and the audit log.
fn with_admin_and_audit(mut command: Command, dir: &Path) -> Command {
    let tokens = dir.join("tokens.json");
    write_secret(
        &tokens,
        &format!(
            r#"{{"tokens": [{{"name": "ops", "token": "{ADMIN}", "projects": ["game"], "roles": ["admin"]}}]}}"#
        ),
    );
    command
        .arg("--auth-tokens")
        .arg(tokens)
        .arg("--audit-log")
        .arg(dir.join("audit.log"));
    command
}

fn user() -> Value {
    json!({"project": "game", "env": "prod", "uid": 7})
}

fn on_slot(mut body: Value, slot: &str) -> Value {
    if !slot.is_empty() {
        body["slot"] = json!(slot);
    }
    body
}

fn claim(slot: &str, endpoint: &str, claim_id: &str) -> Value {
    let mut body = on_slot(user(), slot);
    body["owner"] = json!({"endpoint": endpoint});
    body["claim_id"] = json!(claim_id);
    body
}

/// `(slot, gen, endpoint)` of each listed session.
fn listed(answer: &Value) -> Vec<(String, i64, String)> {
    answer["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("not a listing: {answer}"))
        .iter()
        .map(|s| {
            (
                s["slot"].as_str().unwrap().to_owned(),
                s["gen"].as_i64().unwrap(),
                s["owner"]["endpoint"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The scripted sequence, against a server at `addr` whose audit log is `audit`.
async fn slots_listing_and_logout(addr: &str, audit: &Path) {
    let post = |path: &'static str, body: Value| async move {
        let (status, answer) = post_json(addr, path, ADMIN, &body).await;
        assert_eq!(status, 200, "{path} {body}: {answer}");
        answer
    };
    let node = Peer::start(Behaviour::status(200)).await;
    let (pc_a, pc_b) = (node.http_url("/pc-a"), node.http_url("/pc-b"));
    let (mobile, default) = (node.http_url("/mobile"), node.http_url("/default"));

    assert_eq!(post("/v1/sessions", user()).await, json!({"sessions": []}));
    for (slot, endpoint, claim_id) in [
        ("", &default, "d1"),
        ("pc", &pc_a, "p1"),
        ("mobile", &mobile, "m1"),
    ] {
        let won = post("/v1/claim", claim(slot, endpoint, claim_id)).await;
        assert_eq!(
            (&won["gen"], &won["has_prev"]),
            (&json!(1), &json!(false)),
            "{won}"
        );
    }
    assert!(
        node.requests().is_empty(),
        "a slot's first login kicks no other slot"
    );

    // A second login on "pc" kicks the first "pc" session only, naming the slot.
    let won = post("/v1/claim", claim("pc", &pc_b, "p2")).await;
    assert_eq!(
        (&won["gen"], &won["kicked"]),
        (&json!(2), &json!(true)),
        "{won}"
    );
    let kicks = node.requests();
    assert_eq!(kicks.len(), 1);
    assert_eq!(kicks[0].target, "/pc-a");
    let kick: Value = serde_json::from_slice(&kicks[0].body).unwrap();
    assert_eq!(
        kick,
        json!({"project": "game", "env": "prod", "uid": 7, "slot": "pc", "gen": 2,
               "reason": "login-elsewhere"})
    );

    let sessions = post("/v1/sessions", user()).await;
    assert_eq!(
        listed(&sessions),
        [
            (String::new(), 1, default.clone()),
            ("mobile".into(), 1, mobile.clone()),
            ("pc".into(), 2, pc_b.clone()),
        ]
    );

    // An admin logout of "mobile", and a node's own release of the default slot.
    let mut logout = on_slot(user(), "mobile");
    logout["reason"] = json!("lost phone");
    let done = post("/v1/logout", logout).await;
    assert_eq!(
        done,
        json!({"released": true, "gen": 1, "kicked": true, "kick_detail": null})
    );
    let kicks = node.requests();
    assert_eq!(kicks.len(), 2);
    assert_eq!(kicks[1].target, "/mobile");
    let kick: Value = serde_json::from_slice(&kicks[1].body).unwrap();
    assert_eq!(
        kick,
        json!({"project": "game", "env": "prod", "uid": 7, "slot": "mobile", "gen": 2,
               "reason": "admin", "message": "lost phone"})
    );
    let mut release = user();
    release["gen"] = json!(1);
    assert_eq!(
        post("/v1/release", release).await,
        json!({"released": true})
    );

    let sessions = post("/v1/sessions", user()).await;
    assert_eq!(listed(&sessions), [("pc".into(), 2, pc_b.clone())]);
    let view = post("/v1/current", on_slot(user(), "pc")).await;
    assert_eq!(view["gen"], 2, "{view}");
    let keys = json!({"keys": [user(), on_slot(user(), "pc"), on_slot(user(), "mobile")]});
    let views = post("/v1/current/batch", keys).await;
    let summary: Vec<(i64, bool)> = views["views"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["gen"].as_i64().unwrap(), v["owner"].is_null()))
        .collect();
    assert_eq!(summary, [(1, true), (2, false), (1, true)], "{views}");

    assert_audit_lines(audit);
}

/// Every session event of the sequence has its line in the audit log, in order, naming its
/// slot.
fn assert_audit_lines(audit: &Path) {
    let text = std::fs::read_to_string(audit).unwrap();
    let lines: Vec<(String, String, i64)> = text
        .lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).unwrap();
            (
                line["event"].as_str().unwrap().to_owned(),
                line["slot"].as_str().unwrap().to_owned(),
                line["gen"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected = [
        ("first-login", "", 1),
        ("first-login", "pc", 1),
        ("first-login", "mobile", 1),
        ("takeover", "pc", 2),
        ("admin-logout", "mobile", 1),
        ("release", "", 1),
    ];
    let expected: Vec<(String, String, i64)> = expected
        .iter()
        .map(|(e, s, g)| ((*e).to_owned(), (*s).to_owned(), *g))
        .collect();
    assert_eq!(lines, expected, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_listing_and_logout_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--store", "sqlite", "--db"])
        .arg(dir.path().join("unique.db"))
        .env("RUST_LOG", "warn");
    let (addr, _server) = start(&mut with_admin_and_audit(command, dir.path()));
    slots_listing_and_logout(&addr, &dir.path().join("audit.log")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_listing_and_logout_on_the_default_store_fjall() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--fjall-dir"])
        .arg(dir.path().join("unique.fjall"))
        .env("RUST_LOG", "warn");
    let (addr, _server) = start(&mut with_admin_and_audit(command, dir.path()));
    slots_listing_and_logout(&addr, &dir.path().join("audit.log")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_listing_and_logout_on_postgres() {
    let db = unique_testsupport::postgres::shared();
    let dir = tempfile::tempdir().unwrap();
    let mut command = postgres_command(db.url(), &fresh("sessions"));
    command.arg("--create-table").env("RUST_LOG", "warn");
    let (addr, _server): (String, ChildGuard) =
        start(&mut with_admin_and_audit(command, dir.path()));
    slots_listing_and_logout(&addr, &dir.path().join("audit.log")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_listing_and_logout_on_dynamodb() {
    let dynalite = Dynalite::shared();
    let dir = tempfile::tempdir().unwrap();
    let mut command = dynamodb_command(&dynalite.endpoint_url(), &fresh("sessions"));
    command.arg("--create-table");
    let (addr, _server) = start(&mut with_admin_and_audit(command, dir.path()));
    slots_listing_and_logout(&addr, &dir.path().join("audit.log")).await;
}
