//! The `unique` binary against a real server (the arbiter's HTTP service on a loopback port):
//! each server command's text and `--json` output, and the exit status of every way a call
//! fails — unreachable (1), invalid (2), refused credentials (3), throttled (4) — with no
//! token ever in the output.

mod common;

use std::sync::Arc;

use common::{ADMIN, CONFIRMING, Failing, NODE, SILENT, Server, closed_port_url, spawn, unique};
use serde_json::json;
use unique_arbiter_http::{ArbiterService, ServeOptions};
use unique_core::{Arbiter, Error, Key, KickReason};

fn key(uid: &str) -> Vec<&str> {
    vec!["--project", "game", "--env", "prod", "--uid", uid]
}

fn args<'a>(command: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![command];
    args.extend_from_slice(rest);
    args
}

#[tokio::test]
async fn current_shows_online_offline_and_never_as_text_and_as_the_servers_json() {
    let server = Server::start().await;
    let generation = server
        .login(&Key::new("game", "prod", 42), CONFIRMING)
        .await;
    assert_eq!(generation, 1);

    let run = unique(&server.url, Some(NODE), &args("current", &key("42")), None).await;
    run.status(0);
    assert_eq!(
        run.stdout,
        format!("online at gen 1: eu/c1 {CONFIRMING}\n"),
        "{run:#?}"
    );
    let run = unique(
        &server.url,
        Some(NODE),
        &args("current", &[&key("42")[..], &["--json"]].concat()),
        None,
    )
    .await;
    run.status(0);
    assert_eq!(
        run.json(),
        json!({"gen": 1, "exists": true,
               "owner": {"region": "eu", "cluster": "c1", "endpoint": CONFIRMING}})
    );

    let run = unique(&server.url, Some(NODE), &args("current", &key("7")), None).await;
    run.status(0);
    assert_eq!(
        run.stdout,
        "no record: never logged in (the next login gets gen 1)\n"
    );
    let json = unique(
        &server.url,
        Some(NODE),
        &[
            "--json",
            "current",
            "--project",
            "game",
            "--env",
            "prod",
            "--uid",
            "7",
        ],
        None,
    )
    .await;
    assert_eq!(
        json.status(0).json(),
        json!({"gen": 0, "owner": null, "exists": false})
    );
}

#[tokio::test]
async fn sessions_is_a_table_of_slots_and_the_servers_sessions_json() {
    let server = Server::start().await;
    server
        .login(&Key::new("game", "prod", 42), CONFIRMING)
        .await;
    server
        .login(&Key::new("game", "prod", 42).with_slot("mobile"), SILENT)
        .await;
    server
        .login(&Key::new("game", "prod", 42).with_slot("mobile"), SILENT)
        .await;

    let run = unique(&server.url, Some(NODE), &args("sessions", &key("42")), None).await;
    run.status(0);
    assert_eq!(
        run.stdout,
        format!(
            "SLOT       GEN  REGION/CLUSTER  ENDPOINT\n\
             (default)  1    eu/c1           {CONFIRMING}\n\
             mobile     2    eu/c1           {SILENT}\n"
        ),
        "{run:#?}"
    );
    let run = unique(
        &server.url,
        Some(NODE),
        &args("sessions", &[&key("42")[..], &["--json"]].concat()),
        None,
    )
    .await;
    let owner = |endpoint| json!({"region": "eu", "cluster": "c1", "endpoint": endpoint});
    assert_eq!(
        run.status(0).json(),
        json!({"sessions": [
            {"slot": "", "gen": 1, "owner": owner(CONFIRMING)},
            {"slot": "mobile", "gen": 2, "owner": owner(SILENT)},
        ]})
    );

    let none = unique(&server.url, Some(NODE), &args("sessions", &key("8")), None).await;
    assert_eq!(none.status(0).stdout, "no online session\n");
    let none = unique(
        &server.url,
        Some(NODE),
        &args("sessions", &[&key("8")[..], &["--json"]].concat()),
        None,
    )
    .await;
    assert_eq!(none.status(0).json(), json!({"sessions": []}));
}

#[tokio::test]
async fn logout_says_whether_it_released_and_whether_the_node_confirmed_the_kick() {
    let server = Server::start().await;
    server
        .login(&Key::new("game", "prod", 42), CONFIRMING)
        .await;
    let mobile = Key::new("game", "prod", 42).with_slot("mobile");
    server.login(&mobile, SILENT).await;

    let logout = |slot: Option<&'static str>, json: bool| {
        let mut args = args("logout", &key("42"));
        args.extend(["--reason", "lost phone"]);
        if let Some(slot) = slot {
            args.extend(["--slot", slot]);
        }
        if json {
            args.push("--json");
        }
        args
    };
    let run = unique(&server.url, Some(ADMIN), &logout(None, false), None).await;
    run.status(0);
    assert_eq!(
        run.stdout,
        "logged out gen 1; its node confirmed the kick\n"
    );
    let kicks = server.kicker.kicks();
    assert_eq!(kicks.len(), 1);
    let (endpoint, payload) = &kicks[0];
    assert_eq!(endpoint, CONFIRMING);
    assert_eq!(payload.reason, KickReason::Admin);
    assert_eq!(payload.message.as_deref(), Some("lost phone"));

    let run = unique(
        &server.url,
        Some(ADMIN),
        &logout(Some("mobile"), true),
        None,
    )
    .await;
    assert_eq!(
        run.status(0).json(),
        json!({"released": true, "gen": 1, "kicked": false, "kick_detail": "timeout"})
    );

    // Nothing left to log out: done, and said so.
    let run = unique(
        &server.url,
        Some(ADMIN),
        &logout(Some("mobile"), false),
        None,
    )
    .await;
    assert_eq!(
        run.status(0).stdout,
        "nothing to log out: no online session (gen 1)\n"
    );
    let run = unique(
        &server.url,
        Some(ADMIN),
        &logout(Some("tablet"), true),
        None,
    )
    .await;
    assert_eq!(
        run.status(0).json(),
        json!({"released": false, "gen": 0, "kicked": false, "kick_detail": null})
    );
    assert_eq!(server.kicker.kicks().len(), 2);
}

#[tokio::test]
async fn release_releases_only_the_gen_it_names() {
    let server = Server::start().await;
    let key42 = Key::new("game", "prod", 42);
    server.login(&key42, CONFIRMING).await;
    server.login(&key42, CONFIRMING).await;

    let release = |generation: &'static str, json: bool| {
        let mut args = args("release", &key("42"));
        args.extend(["--gen", generation]);
        if json {
            args.push("--json");
        }
        args
    };
    let run = unique(&server.url, Some(NODE), &release("1", false), None).await;
    assert_eq!(
        run.status(0).stdout,
        "not released: game#prod#42 is not online at gen 1 (already released or logged out, \
         or a newer login holds it)\n"
    );
    let run = unique(&server.url, Some(NODE), &release("1", true), None).await;
    assert_eq!(run.status(0).json(), json!({"released": false}));
    let run = unique(&server.url, Some(NODE), &release("2", false), None).await;
    assert_eq!(run.status(0).stdout, "released gen 2 of game#prod#42\n");
    let view = server.arbiter.current(&key42).await.unwrap();
    assert!(view.owner.is_none() && view.exists, "{view:?}");
    let run = unique(&server.url, Some(NODE), &release("2", true), None).await;
    run.status(0).json();
}

#[tokio::test]
async fn an_unreachable_server_is_status_1_and_says_so() {
    let url = closed_port_url();
    for command in ["current", "sessions"] {
        let run = unique(&url, Some(ADMIN), &args(command, &key("42")), None).await;
        run.status(1);
        assert!(run.stdout.is_empty(), "{run:#?}");
        assert!(
            run.stderr
                .starts_with("unique: the server is unreachable or unavailable: "),
            "{run:#?}"
        );
        assert!(run.stderr.contains("connection failed"), "{run:#?}");
    }
    // The URL given by flag wins over the environment's.
    let server = Server::start().await;
    let run = unique(
        &url,
        Some(NODE),
        &args(
            "current",
            &[&key("42")[..], &["--server", &server.url]].concat(),
        ),
        None,
    )
    .await;
    run.status(0);
}

#[tokio::test]
async fn refused_credentials_are_status_3_and_never_echo_the_token() {
    let server = Server::start().await;
    server
        .login(&Key::new("game", "prod", 42), CONFIRMING)
        .await;
    let unknown = "cli-test-unknown-token-0123456789abcdef";

    // 401: a token the server does not know, and none at all.
    for token in [Some(unknown), None] {
        let run = unique(&server.url, token, &args("current", &key("42")), None).await;
        run.status(3);
        assert!(run.stderr.contains("(401)"), "{run:#?}");
        assert!(run.stderr.contains("--token or UNIQUE_TOKEN"), "{run:#?}");
        assert!(!run.stderr.contains(unknown), "{run:#?}");
    }
    // The same through --token: never echoed either.
    let run = unique(
        &server.url,
        None,
        &args(
            "sessions",
            &[&key("42")[..], &["--token", unknown]].concat(),
        ),
        None,
    )
    .await;
    run.status(3);
    assert!(!run.stderr.contains(unknown), "{run:#?}");

    // 403: logout without the admin role, and a key outside the token's scope.
    let mut logout = args("logout", &key("42"));
    logout.extend(["--reason", "r"]);
    let run = unique(&server.url, Some(NODE), &logout, None).await;
    run.status(3);
    assert!(run.stderr.contains("(403)"), "{run:#?}");
    assert!(run.stderr.contains("admin"), "{run:#?}");
    assert!(server.kicker.kicks().is_empty());
    let staging = ["--project", "game", "--env", "staging", "--uid", "42"];
    let run = unique(&server.url, Some(NODE), &args("current", &staging), None).await;
    run.status(3);
    assert!(run.stderr.contains("(403)"), "{run:#?}");

    // Help with a token in the environment shows the variable, never its value.
    let run = unique(&server.url, Some(NODE), &["--help"], None).await;
    run.status(0);
    assert!(run.stdout.contains("UNIQUE_TOKEN"), "{run:#?}");
}

#[tokio::test]
async fn invalid_input_is_status_2_with_the_servers_reason() {
    let server = Server::start().await;
    let cases: [(Vec<&str>, &str); 4] = [
        (args("current", &key("0")), "uid must be >= 1"),
        (
            args("current", &[&key("42")[..], &["--slot", "pc#1"]].concat()),
            "slot",
        ),
        (args("sessions", &key("-5")), "uid must be >= 1"),
        (
            args(
                "logout",
                &[&key("42")[..], &["--reason", "a\u{7}b"]].concat(),
            ),
            "reason",
        ),
    ];
    for (args, reason) in cases {
        let run = unique(&server.url, Some(ADMIN), &args, None).await;
        run.status(2);
        assert!(
            run.stderr
                .starts_with("unique: the server refused the request: "),
            "{run:#?}"
        );
        assert!(run.stderr.contains(reason), "{reason}: {run:#?}");
    }
    // A usage error is clap's own status 2.
    let run = unique(
        &server.url,
        Some(ADMIN),
        &["current", "--project", "game"],
        None,
    )
    .await;
    run.status(2);
    assert!(run.stderr.contains("--uid"), "{run:#?}");
    // Not a unique server's URL (a path under which nothing is served): 404, status 2.
    let run = unique(
        &format!("{}/not-here", server.url),
        Some(ADMIN),
        &args("current", &key("42")),
        None,
    )
    .await;
    run.status(2);
    assert!(run.stderr.contains("404"), "{run:#?}");
    // An unusable --server.
    let run = unique(
        "ftp://127.0.0.1:1",
        Some(ADMIN),
        &args("current", &key("42")),
        None,
    )
    .await;
    run.status(2);
    assert!(run.stderr.contains("cannot use --server"), "{run:#?}");
}

#[tokio::test]
async fn a_throttled_store_is_status_4_and_an_unavailable_one_status_1() {
    let throttled = spawn(
        ArbiterService::new(Arbiter::new(Arc::new(Failing(|| Error::Throttled)))),
        ServeOptions::default(),
    )
    .await;
    let run = unique(
        &format!("http://{throttled}"),
        None,
        &args("current", &key("42")),
        None,
    )
    .await;
    run.status(4);
    assert!(run.stderr.contains("retry later"), "{run:#?}");

    let unavailable = spawn(
        ArbiterService::new(Arbiter::new(Arc::new(Failing(|| {
            Error::unavailable("store down")
        })))),
        ServeOptions::default(),
    )
    .await;
    let run = unique(
        &format!("http://{unavailable}"),
        None,
        &args("sessions", &key("42")),
        None,
    )
    .await;
    run.status(1);
    assert!(run.stderr.contains("server unavailable"), "{run:#?}");
}
