//! The `unique` binary and pooled sessions (`docs/design.md`, "Operator CLI"), against a real
//! server (the arbiter's HTTP service on a loopback port): `logout --all` logs out every slot
//! and pool place of a user with one line each (and the server's JSON with `--json`),
//! `logout --slot '#1'` logs out one place, `sessions` marks places and shows their login
//! times, and `status` prints the session limits.

mod common;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use common::{ADMIN, CONFIRMING, NODE, SILENT, Server, spawn, unique};
use serde_json::json;
use unique_arbiter_http::{ArbiterService, ServeOptions};
use unique_core::{Arbiter, ClaimInput, Key, KickReason, Owner, PoolPolicy, PoolRequest, UserKey};
use unique_store_memory::MemoryStore;

fn user(uid: &str) -> Vec<&str> {
    vec!["--project", "game", "--env", "prod", "--uid", uid]
}

fn with<'a>(command: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    [command, rest].concat()
}

/// Logs user `uid` into the next free place of a pool of `limit` from `endpoint`; the place.
async fn pooled(server: &Server, uid: i64, endpoint: &str, claim_id: &str) -> String {
    let input = ClaimInput {
        key: Key::new("game", "prod", uid),
        owner: Owner::new("eu", "c1", endpoint),
        claim_id: claim_id.into(),
    };
    let pool = PoolRequest {
        policy: PoolPolicy::DenyNew,
        limit: Some(3),
    };
    server
        .arbiter
        .claim_pooled(&input, &pool)
        .await
        .unwrap()
        .slot
}

/// User 42 online on the default slot (confirming node), `mobile` (a node that never
/// answers) and places `#0`, `#1` (confirming).
async fn four_sessions(server: &Server, uid: i64) {
    server
        .login(&Key::new("game", "prod", uid), CONFIRMING)
        .await;
    server
        .login(&Key::new("game", "prod", uid).with_slot("mobile"), SILENT)
        .await;
    assert_eq!(pooled(server, uid, CONFIRMING, "p0").await, "#0");
    assert_eq!(pooled(server, uid, CONFIRMING, "p1").await, "#1");
}

#[tokio::test]
async fn logout_all_logs_out_every_slot_and_place_one_line_each() {
    let server = Server::start().await;
    four_sessions(&server, 42).await;
    let logout_all = with(
        &["logout", "--all", "--reason", "account closed"],
        &user("42"),
    );

    let run = unique(&server.url, Some(ADMIN), &logout_all, None).await;
    assert_eq!(
        run.status(0).stdout,
        "(default): logged out gen 1; its node confirmed the kick\n\
         #0 (pool): logged out gen 1; its node confirmed the kick\n\
         #1 (pool): logged out gen 1; its node confirmed the kick\n\
         mobile: logged out gen 1; the kick did not confirm (timeout): the node is presumed \
         offline, and the session's heartbeat evicts it\n",
        "{run:#?}"
    );
    let mut kicked: Vec<(String, i64)> = server
        .kicker
        .kicks()
        .into_iter()
        .map(|(_, kick)| {
            assert_eq!(kick.reason, KickReason::Admin);
            assert_eq!(kick.message.as_deref(), Some("account closed"));
            (kick.slot, kick.generation)
        })
        .collect();
    kicked.sort();
    assert_eq!(
        kicked,
        [("", 2), ("#0", 2), ("#1", 2), ("mobile", 2)].map(|(s, g)| (s.to_owned(), g))
    );
    assert!(
        server
            .arbiter
            .sessions(&UserKey::new("game", "prod", 42))
            .await
            .unwrap()
            .is_empty()
    );
    let run = unique(&server.url, Some(ADMIN), &logout_all, None).await;
    assert_eq!(
        run.status(0).stdout,
        "nothing to log out: no online session\n"
    );

    // --json: the server's answer.
    four_sessions(&server, 43).await;
    let json = with(&["--json", "logout", "--all", "--reason", "r"], &user("43"));
    let run = unique(&server.url, Some(ADMIN), &json, None).await;
    let entry = |slot: &str, kicked: bool, detail: serde_json::Value| {
        json!({"slot": slot, "released": true, "gen": 1, "kicked": kicked,
               "kick_detail": detail})
    };
    assert_eq!(
        run.status(0).json(),
        json!({"sessions": [
            entry("", true, json!(null)),
            entry("#0", true, json!(null)),
            entry("#1", true, json!(null)),
            entry("mobile", false, json!("timeout")),
        ]})
    );

    // Refused without the admin role (3); --all with --slot is a usage error (2).
    let run = unique(&server.url, Some(NODE), &logout_all, None).await;
    assert!(run.status(3).stderr.contains("(403)"), "{run:#?}");
    let both = with(&logout_all, &["--slot", "#1"]);
    let run = unique(&server.url, Some(ADMIN), &both, None).await;
    assert!(run.status(2).stderr.contains("--slot"), "{run:#?}");
}

#[tokio::test]
async fn logout_of_one_place_and_sessions_marking_places_with_their_login_times() {
    let server = Server::start().await;
    four_sessions(&server, 42).await;

    let run = unique(
        &server.url,
        Some(NODE),
        &with(&["sessions"], &user("42")),
        None,
    )
    .await;
    let text = run.status(0).stdout.clone();
    let sessions = server
        .arbiter
        .sessions(&UserKey::new("game", "prod", 42))
        .await
        .unwrap();
    let since = |slot: &str| {
        let ms = sessions
            .iter()
            .find(|s| s.slot == slot)
            .and_then(|s| s.owner.since)
            .unwrap();
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
    };
    let expected = format!(
        "SLOT       GEN  SINCE                     REGION/CLUSTER  ENDPOINT\n\
         (default)  1    -                         eu/c1           {CONFIRMING}\n\
         #0 (pool)  1    {}  eu/c1           {CONFIRMING}\n\
         #1 (pool)  1    {}  eu/c1           {CONFIRMING}\n\
         mobile     1    -                         eu/c1           {SILENT}\n",
        since("#0"),
        since("#1")
    );
    assert_eq!(text, expected, "{run:#?}");

    // One place by its slot, as any slot.
    let one = with(&["logout", "--slot", "#1", "--reason", "r"], &user("42"));
    let run = unique(&server.url, Some(ADMIN), &one, None).await;
    assert_eq!(
        run.status(0).stdout,
        "logged out gen 1; its node confirmed the kick\n"
    );
    let kicks = server.kicker.kicks();
    assert_eq!(kicks.len(), 1);
    assert_eq!((kicks[0].1.slot.as_str(), kicks[0].1.generation), ("#1", 2));
    let left: Vec<String> = server
        .arbiter
        .sessions(&UserKey::new("game", "prod", 42))
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.slot)
        .collect();
    assert_eq!(left, ["", "#0", "mobile"]);
}

#[tokio::test]
async fn status_prints_the_session_limits() {
    let arbiter = Arbiter::builder(Arc::new(MemoryStore::new()))
        .session_limit(4)
        .session_limit_for("game", 3)
        .session_limit_for("chat", 2)
        .build();
    let addr = spawn(ArbiterService::new(arbiter), ServeOptions::default()).await;
    let url = format!("http://{addr}");

    let run = unique(&url, None, &["status"], None).await;
    let text = &run.status(0).stdout;
    assert!(
        text.contains("pools     up to 4 sessions per user; projects of their own: chat 2, game 3"),
        "{text}"
    );
    let run = unique(&url, None, &["status", "--json"], None).await;
    let limits = &run.status(0).json()["info"]["limits"];
    assert_eq!(limits["session_limit"], 4, "{limits}");
    assert_eq!(
        limits["project_session_limits"],
        json!({"chat": 2, "game": 3})
    );

    let plain = Arbiter::new(Arc::new(MemoryStore::new()));
    let addr = spawn(ArbiterService::new(plain), ServeOptions::default()).await;
    let run = unique(&format!("http://{addr}"), None, &["status"], None).await;
    let text = &run.status(0).stdout;
    assert!(
        text.contains("pools     up to 5 sessions per user\n"),
        "{text}"
    );
}
