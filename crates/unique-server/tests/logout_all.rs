//! `POST /v1/logout/all` on the real binary (`docs/design.md#admin-logout`, "All of a user's
//! sessions"), memory store, an audit log and a tokens file holding a plain token, an admin
//! token of the user's project and an admin token of another project: a user online on the
//! default slot, a named slot and two pool places is logged out everywhere by the admin token
//! only. Each session's node gets one admin kick announcing its gen + 1 with the reason, each
//! record is a tombstone at its gen, the audit log holds one `admin-logout` per session under
//! its slot, and a repeat answers `[]`.

mod common;

use std::path::Path;
use std::process::Command;

use common::{BIN, post_json as post, start, write_secret};
use serde_json::{Value, json};
use unique_kick_contract::{Behaviour, Peer};

const ADMIN: &str = "logout-all-test-admin-token-0123";
const OTHER_ADMIN: &str = "logout-all-test-other-admin-0123";
const PLAIN: &str = "logout-all-test-plain-token-0123";

fn user() -> Value {
    json!({"project": "game", "env": "prod", "uid": 7})
}

fn audit_events(audit: &Path) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // one story: log in four ways, refuse twice, log out, repeat
async fn an_admin_logs_out_every_slot_and_place_of_a_user_and_each_node_gets_its_kick() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    write_secret(
        &tokens,
        &format!(
            r#"{{"tokens": [
                {{"name": "game-backend", "token": "{PLAIN}", "projects": ["game"]}},
                {{"name": "ops", "token": "{ADMIN}", "projects": ["game"], "roles": ["admin"]}},
                {{"name": "chat-ops", "token": "{OTHER_ADMIN}", "projects": ["chat"], "roles": ["admin"]}}
            ]}}"#
        ),
    );
    let audit = dir.path().join("audit.log");
    let (addr, _server) = start(
        Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
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
    let endpoint = |i: usize| nodes[i].http_url("/kick");
    // The default slot twice (gen 2), "mobile" (gen 1), then two pooled logins (#0, #1).
    for (i, slot, claim_id) in [(0, "", "d-1"), (0, "", "d-2"), (1, "mobile", "m-1")] {
        let mut claim = json!({"project": "game", "env": "prod", "uid": 7,
                               "owner": {"endpoint": endpoint(i)}, "claim_id": claim_id});
        if !slot.is_empty() {
            claim["slot"] = json!(slot);
        }
        let (status, claimed) = post(&addr, "/v1/claim", PLAIN, &claim).await;
        assert_eq!(status, 200, "{claimed}");
    }
    for (i, place) in [(2, "#0"), (3, "#1")] {
        let claim = json!({"project": "game", "env": "prod", "uid": 7,
                           "owner": {"endpoint": endpoint(i)}, "claim_id": format!("p-{i}"),
                           "pool": {"policy": "deny-new", "limit": 2}});
        let (status, claimed) = post(&addr, "/v1/claim", PLAIN, &claim).await;
        assert_eq!(
            (status, &claimed["slot"]),
            (200, &json!(place)),
            "{claimed}"
        );
    }
    let mut logout = user();
    logout["reason"] = json!("account closed");

    // A token without the admin role, and an admin token of another project: 403, nobody
    // logged out or kicked.
    for (token, names) in [(PLAIN, "game-backend"), (OTHER_ADMIN, "chat-ops")] {
        let (status, refused) = post(&addr, "/v1/logout/all", token, &logout).await;
        assert_eq!((status, &refused["error"]), (403, &json!("forbidden")));
        assert!(
            refused["message"].as_str().unwrap().contains(names),
            "{refused}"
        );
    }
    let (_, listed) = post(&addr, "/v1/sessions", PLAIN, &user()).await;
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 4, "{listed}");
    assert!(
        nodes.iter().all(|n| n.requests().is_empty()),
        "nobody kicked"
    );
    // Unknown fields are refused, as everywhere: a slot names no one session here.
    let mut with_slot = logout.clone();
    with_slot["slot"] = json!("mobile");
    let (status, refused) = post(&addr, "/v1/logout/all", ADMIN, &with_slot).await;
    assert_eq!((status, &refused["error"]), (400, &json!("invalid_params")));

    // The admin token of the user's project: every session, in listing order.
    let (status, done) = post(&addr, "/v1/logout/all", ADMIN, &logout).await;
    assert_eq!(status, 200, "{done}");
    let entry = |slot: &str, generation: i64| {
        json!({"slot": slot, "released": true, "gen": generation, "kicked": true,
               "kick_detail": null})
    };
    assert_eq!(
        done,
        json!({"sessions": [entry("", 2), entry("#0", 1), entry("#1", 1), entry("mobile", 1)]})
    );
    for (i, slot, generation) in [(2, "#0", 1), (3, "#1", 1), (1, "mobile", 1)] {
        let kicks = nodes[i].requests();
        assert_eq!(kicks.len(), 1, "node {i}");
        let kick: Value = serde_json::from_slice(&kicks[0].body).unwrap();
        assert_eq!(
            kick,
            json!({"project": "game", "env": "prod", "uid": 7, "slot": slot,
                   "gen": generation + 1, "reason": "admin", "message": "account closed"})
        );
    }
    // Node 0 held the default slot at gen 1 (taken over by its own gen 2: same endpoint, no
    // kick) and is kicked once, by the logout, for gen 2.
    let kicks = nodes[0].requests();
    assert_eq!(kicks.len(), 1);
    let kick: Value = serde_json::from_slice(&kicks[0].body).unwrap();
    assert_eq!(
        kick,
        json!({"project": "game", "env": "prod", "uid": 7, "gen": 3,
               "reason": "admin", "message": "account closed"})
    );
    for (slot, generation) in [("", 2), ("#0", 1), ("#1", 1), ("mobile", 1)] {
        let mut key = user();
        key["slot"] = json!(slot);
        let (_, view) = post(&addr, "/v1/current", PLAIN, &key).await;
        assert_eq!(
            view,
            json!({"gen": generation, "owner": null, "exists": true}),
            "{slot:?}"
        );
    }

    // The audit log: one admin-logout per session, under its slot, by the admin token.
    let logouts: Vec<Value> = audit_events(&audit)
        .into_iter()
        .filter(|e| e["event"] == "admin-logout")
        .collect();
    let recorded: Vec<(&str, i64, bool, bool)> = logouts
        .iter()
        .map(|e| {
            assert_eq!((&e["uid"], &e["token"]), (&json!(7), &json!("ops")), "{e}");
            (
                e["slot"].as_str().unwrap(),
                e["gen"].as_i64().unwrap(),
                e["released"].as_bool().unwrap(),
                e["kicked"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        recorded,
        [
            ("", 2, true, true),
            ("#0", 1, true, true),
            ("#1", 1, true, true),
            ("mobile", 1, true, true)
        ]
    );

    // Again: nobody online, nothing kicked or recorded.
    let (status, again) = post(&addr, "/v1/logout/all", ADMIN, &user()).await;
    assert_eq!((status, again), (200, json!({"sessions": []})));
    assert_eq!(nodes.iter().map(|n| n.requests().len()).sum::<usize>(), 4);
    let after = audit_events(&audit)
        .into_iter()
        .filter(|e| e["event"] == "admin-logout")
        .count();
    assert_eq!(after, 4);
}
