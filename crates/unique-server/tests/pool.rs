//! Pooled sessions on the real binary (`docs/design.md#pooled-sessions`): `--session-limit`
//! with a per-project value, pooled logins over HTTP taking places `#0`, `#1`, …; `deny-new`
//! at the limit is 409 `limit_reached` listing the places (slots, gens, login times, never
//! owners); `evict-oldest` kicks the oldest login's receiver and takes its place; a pooled
//! session's heartbeat, release and admin logout name its place; the audit log and
//! `/metrics` record evictions and refusals; bad flags and bodies are refused.

mod common;

use std::path::Path;
use std::process::Command;

use common::{BIN, post_json, request, start, write_secret};
use serde_json::{Value, json};
use unique_kick_contract::{Behaviour, Peer};

const TOKEN: &str = "pool-test-admin-token-0123456789";

fn login(endpoint: &str, claim_id: &str, pool: &Value) -> Value {
    json!({
        "project": "game", "env": "prod", "uid": 7,
        "owner": {"endpoint": endpoint}, "claim_id": claim_id, "pool": pool,
    })
}

fn user() -> Value {
    json!({"project": "game", "env": "prod", "uid": 7})
}

fn place(slot: &str) -> Value {
    json!({"project": "game", "env": "prod", "uid": 7, "slot": slot})
}

/// The value of the one series of `/metrics` that starts with `series`, as written.
fn metric(addr: &str, series: &str) -> String {
    let answer = request(addr, "GET", "/metrics", "");
    let (_, exposition) = answer.split_once("\r\n\r\n").unwrap();
    let lines: Vec<&str> = exposition
        .lines()
        .filter(|line| line.starts_with(series))
        .collect();
    assert_eq!(lines.len(), 1, "{series}: {lines:?} in\n{exposition}");
    lines[0].rsplit_once(' ').unwrap().1.to_owned()
}

fn audit_events(audit: &Path) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // one story: fill, refuse, evict, then each route by place
async fn pooled_logins_take_places_refuse_or_evict_the_oldest_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    write_secret(
        &tokens,
        &format!(
            r#"{{"tokens": [{{"name": "ops", "token": "{TOKEN}", "projects": ["game"], "roles": ["admin"]}}]}}"#
        ),
    );
    let audit = dir.path().join("audit.log");
    let (addr, _server) = start(
        Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
            .args(["--session-limit", "3", "--session-limit", "other=1"])
            .arg("--auth-tokens")
            .arg(&tokens)
            .arg("--audit-log")
            .arg(&audit)
            .env("RUST_LOG", "warn"),
    );
    let nodes = [
        Peer::start(Behaviour::status(200)).await,
        Peer::start(Behaviour::status(200)).await,
        Peer::start(Behaviour::status(200)).await,
        Peer::start(Behaviour::status(200)).await,
    ];
    let deny = json!({"policy": "deny-new"});
    // Three logins take #0, #1, #2, in login order.
    for (i, node) in nodes[..3].iter().enumerate() {
        let body = login(&node.http_url("/kick"), &format!("login-{i}"), &deny);
        let (status, answer) = post_json(&addr, "/v1/claim", TOKEN, &body).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["slot"], format!("#{i}"), "{answer}");
        assert_eq!(
            (&answer["gen"], &answer["evicted"]),
            (&json!(1), &json!(false))
        );
    }
    // A retry of login 1 is login 1, on its place.
    let retry = login(&nodes[1].http_url("/kick"), "login-1", &deny);
    let (_, replay) = post_json(&addr, "/v1/claim", TOKEN, &retry).await;
    assert_eq!(
        (&replay["slot"], &replay["replayed"]),
        (&json!("#1"), &json!(true))
    );

    // deny-new at the limit: 409 limit_reached, the places listed without owners.
    let fourth = login(&nodes[3].http_url("/kick"), "login-3", &deny);
    let (status, refused) = post_json(&addr, "/v1/claim", TOKEN, &fourth).await;
    assert_eq!(
        (status, &refused["error"]),
        (409, &json!("limit_reached")),
        "{refused}"
    );
    assert_eq!(refused["limit"], 3, "{refused}");
    let listed = refused["sessions"].as_array().unwrap();
    let slots: Vec<&str> = listed.iter().map(|s| s["slot"].as_str().unwrap()).collect();
    assert_eq!(slots, ["#0", "#1", "#2"], "{refused}");
    for session in listed {
        assert_eq!(session["gen"], 1, "{refused}");
        assert!(session["since"].as_u64().is_some(), "{refused}");
        assert!(session.get("owner").is_none(), "never an owner: {refused}");
    }
    assert!(
        nodes.iter().all(|n| n.requests().is_empty()),
        "nobody kicked"
    );

    // evict-oldest (the default policy): login 0's receiver is kicked, its place taken.
    let fourth = login(&nodes[3].http_url("/kick"), "login-3", &json!({}));
    let (status, evicted) = post_json(&addr, "/v1/claim", TOKEN, &fourth).await;
    assert_eq!(status, 200, "{evicted}");
    assert_eq!(
        (&evicted["slot"], &evicted["evicted"], &evicted["gen"]),
        (&json!("#0"), &json!(true), &json!(2)),
        "{evicted}"
    );
    assert_eq!(
        (&evicted["has_prev"], &evicted["prev_gen"]),
        (&json!(true), &json!(1))
    );
    assert_eq!(
        evicted["prev_owner"]["endpoint"],
        json!(nodes[0].http_url("/kick"))
    );
    assert_eq!(evicted["kicked"], true, "{evicted}");
    let kicks = nodes[0].requests();
    assert_eq!(kicks.len(), 1, "the oldest login's receiver, once");
    let kick: Value = serde_json::from_slice(&kicks[0].body).unwrap();
    assert_eq!(
        kick,
        json!({"project": "game", "env": "prod", "uid": 7, "slot": "#0", "gen": 2,
               "reason": "login-elsewhere", "message": "session limit 3 reached"})
    );
    assert!(nodes[1..3].iter().all(|n| n.requests().is_empty()));

    // The listing shows the three places, login times kept.
    let (_, listing) = post_json(&addr, "/v1/sessions", TOKEN, &user()).await;
    let online: Vec<(&str, &str)> = listing["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["slot"].as_str().unwrap(),
                s["owner"]["endpoint"].as_str().unwrap(),
            )
        })
        .collect();
    let url = |i: usize| nodes[i].http_url("/kick");
    let (u1, u2, u3) = (url(1), url(2), url(3));
    assert_eq!(
        online,
        [("#0", &*u3), ("#1", &*u1), ("#2", &*u2)],
        "{listing}"
    );

    // Heartbeat, batch, release and admin logout of a pooled session by its place.
    let (status, view) = post_json(&addr, "/v1/current", TOKEN, &place("#0")).await;
    assert_eq!((status, &view["gen"]), (200, &json!(2)), "{view}");
    assert_eq!(view["owner"]["endpoint"], json!(u3));
    let batch = json!({"keys": [place("#1"), place("#2")]});
    let (status, views) = post_json(&addr, "/v1/current/batch", TOKEN, &batch).await;
    assert_eq!(status, 200, "{views}");
    let mut release = place("#1");
    release["gen"] = json!(1);
    let (_, released) = post_json(&addr, "/v1/release", TOKEN, &release).await;
    assert_eq!(released["released"], true, "{released}");
    let (_, logout) = post_json(&addr, "/v1/logout", TOKEN, &place("#2")).await;
    assert_eq!(
        (&logout["released"], &logout["kicked"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(nodes[2].requests().len(), 1, "the admin logout's kick");
    // The freed places are taken again, lowest first.
    let again = login(&url(1), "login-4", &deny);
    let (_, answer) = post_json(&addr, "/v1/claim", TOKEN, &again).await;
    assert_eq!(
        (&answer["slot"], &answer["gen"]),
        (&json!("#1"), &json!(2)),
        "{answer}"
    );

    // The audit log: the eviction under its place, the refusal under the user.
    let events = audit_events(&audit);
    let eviction: Vec<&Value> = events.iter().filter(|e| e["event"] == "eviction").collect();
    assert_eq!(eviction.len(), 1, "{events:?}");
    assert_eq!(
        (
            &eviction[0]["slot"],
            &eviction[0]["gen"],
            &eviction[0]["prev_gen"],
            &eviction[0]["limit"]
        ),
        (&json!("#0"), &json!(2), &json!(1), &json!(3))
    );
    let refusals: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "limit-reached")
        .collect();
    assert_eq!(refusals.len(), 1, "{events:?}");
    assert_eq!(
        (&refusals[0]["slot"], &refusals[0]["limit"]),
        (&json!(""), &json!(3))
    );
    // /metrics: one eviction, one claim refused limit_reached.
    assert_eq!(
        metric(
            &addr,
            r#"unique_pool_evictions_total{policy="evict-oldest"}"#
        ),
        "1"
    );
    assert_eq!(
        metric(&addr, r#"unique_claims_total{result="limit_reached"}"#),
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_and_places_are_checked_per_project() {
    let (addr, _server) = start(Command::new(BIN).args([
        "--listen",
        "127.0.0.1:0",
        "--store",
        "memory",
        "--session-limit",
        "3,other=1",
    ]));
    let endpoint = "http://127.0.0.1:9/kick";
    let refused = |body: Value| {
        let addr = addr.clone();
        async move {
            let (status, answer) = post_json(&addr, "/v1/claim", "", &body).await;
            assert_eq!(
                (status, &answer["error"]),
                (400, &json!("invalid_params")),
                "{answer}"
            );
            answer["message"].as_str().unwrap().to_owned()
        }
    };
    let message = refused(login(endpoint, "c", &json!({"limit": 4}))).await;
    assert!(message.contains("from 1 to 3"), "{message}");
    let mut both = login(endpoint, "c", &json!({}));
    both["slot"] = json!("pc");
    let message = refused(both).await;
    assert!(message.contains("slot and pool are exclusive"), "{message}");
    let message = refused(login(endpoint, "c", &json!({"policy": "lru"}))).await;
    assert!(message.contains("evict-oldest"), "{message}");
    let mut named = login(endpoint, "c", &json!(null));
    named.as_object_mut().unwrap().remove("pool");
    named["slot"] = json!("#2");
    let message = refused(named).await;
    assert_eq!(
        message,
        "slot '#2' is a pool place: claim with \"pool\" instead"
    );
    // Project "other" has a limit of 1: the second login evicts the first.
    let mut other = login(endpoint, "o1", &json!({}));
    other["project"] = json!("other");
    let (_, first) = post_json(&addr, "/v1/claim", "", &other).await;
    other["claim_id"] = json!("o2");
    let (_, second) = post_json(&addr, "/v1/claim", "", &other).await;
    assert_eq!(
        (&first["slot"], &second["slot"]),
        (&json!("#0"), &json!("#0"))
    );
    assert_eq!(second["evicted"], true, "{second}");
    // The replaced login's retry is over: 409 superseded, not limit_reached.
    other["claim_id"] = json!("o1");
    let (status, superseded) = post_json(&addr, "/v1/claim", "", &other).await;
    assert_eq!(
        (status, &superseded["error"]),
        (409, &json!("superseded")),
        "{superseded}"
    );
}

#[test]
fn a_session_limit_out_of_range_stops_startup_naming_the_flag() {
    for bad in ["0", "1001", "x", "=3", "a#b=3", "20"] {
        let out = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
            .args(["--max-slots-per-user", "16"])
            .arg(format!("--session-limit={bad}"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--session-limit"), "{bad}: {stderr}");
    }
}
