//! `unique lease …`, `unique nodes lookup` and `unique status` against a real server (the
//! arbiter's HTTP service with a memory lease directory, on a loopback port): text and
//! `--json` answers, the exit status of refusals, and a lease-only server.

mod common;

use std::sync::Arc;

use common::{ADMIN, Failing, NODE, Server, spawn, tokens, unique};
use serde_json::json;
use unique_arbiter_http::{ArbiterService, ServeOptions};
use unique_core::{Arbiter, Error};
use unique_lease::{MemoryDirectory, NodeRegistry};
use unique_store_memory::MemoryStore;
use unique_wire::InfoKicks;

/// A server with tokens and a lease directory; its URL.
async fn lease_server(sessions: bool) -> String {
    let mut service = ArbiterService::new(Arbiter::new(Arc::new(MemoryStore::new())))
        .with_tokens(tokens())
        .with_leases(Arc::new(MemoryDirectory::new()))
        .store_kind("memory");
    if !sessions {
        service = service.without_sessions();
    }
    format!("http://{}", spawn(service, ServeOptions::default()).await)
}

/// Runs the binary against `url` with the admin token.
async fn admin(url: &str, args: &[&str]) -> common::Run {
    unique(url, Some(ADMIN), args, None).await
}

fn room(rest: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec!["--project", "game", "--room", "lobby"];
    args.extend_from_slice(rest);
    args
}

fn command<'a>(words: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = words.to_vec();
    args.extend_from_slice(rest);
    args
}

#[tokio::test]
async fn lease_commands_grant_verify_release_and_look_up_a_room() {
    let url = lease_server(true).await;
    let ensure = room(&["--node", "n1", "--ttl", "30s"]);
    let run = admin(&url, &command(&["--json", "lease", "ensure"], &ensure)).await;
    let granted = run.status(0).json();
    assert_eq!(
        (&granted["room"], &granted["node"], &granted["epoch"]),
        (&json!("lobby"), &json!("n1"), &json!(1)),
        "{granted}"
    );
    let token = granted["token"].as_str().unwrap().to_owned();

    // Another node is told who holds it.
    let other = room(&["--node", "n2", "--ttl", "30s"]);
    let run = admin(&url, &command(&["lease", "ensure"], &other)).await;
    assert!(
        run.status(0)
            .stdout
            .starts_with("not granted: room lobby held by n1 at epoch 1, "),
        "{run:#?}"
    );
    // The holder renews: same token, and the text names it.
    let run = admin(&url, &command(&["lease", "ensure"], &ensure)).await;
    assert!(
        run.status(0)
            .stdout
            .ends_with(&format!("\ntoken {token}\n")),
        "{run:#?}"
    );

    let holding = [
        "--project",
        "game",
        "--room",
        "lobby",
        "--node",
        "n1",
        "--lease-token",
        &token,
    ];
    let run = admin(&url, &command(&["lease", "verify"], &holding)).await;
    assert_eq!(
        run.status(0).stdout,
        "valid: n1 holds room lobby under this token\n"
    );
    let run = admin(&url, &command(&["lease", "lookup", "--json"], &room(&[]))).await;
    assert_eq!(run.status(0).json()["lease"]["token"], json!(token));

    let run = admin(&url, &command(&["lease", "release"], &holding)).await;
    assert_eq!(run.status(0).stdout, "released room lobby held by n1\n");
    let run = admin(&url, &command(&["lease", "verify", "--json"], &holding)).await;
    assert_eq!(run.status(0).json(), json!({"valid": false}));
    let run = admin(
        &url,
        &command(
            &["lease", "lookup"],
            &["--project", "game", "--room", "empty"],
        ),
    )
    .await;
    assert_eq!(
        run.status(0).stdout,
        "no lease: room empty has never been held\n"
    );
}

#[tokio::test]
async fn lease_refusals_have_the_exit_status_of_their_kind() {
    let url = lease_server(true).await;
    // 400: a ttl over the hour, with the server's message.
    let long = room(&["--node", "n1", "--ttl", "2h"]);
    let run = admin(&url, &command(&["lease", "ensure"], &long)).await;
    assert!(run.status(2).stderr.contains("ttl_ms"), "{run:#?}");
    // 403: a token scoped to one env may not hold the project's rooms.
    let ensure = room(&["--node", "n1", "--ttl", "30s"]);
    let run = unique(
        &url,
        Some(NODE),
        &command(&["lease", "ensure"], &ensure),
        None,
    )
    .await;
    assert!(run.status(3).stderr.contains("every env"), "{run:#?}");
    // 401 without a token.
    let run = unique(&url, None, &command(&["lease", "lookup"], &room(&[])), None).await;
    assert!(run.status(3).stderr.contains("--token"), "{run:#?}");
    // 501: a server without a lease directory; no retry fixes it.
    let server = Server::start().await;
    let run = unique(
        &server.url,
        Some(ADMIN),
        &command(&["lease", "lookup"], &room(&[])),
        None,
    )
    .await;
    assert!(run.status(2).stderr.contains("501"), "{run:#?}");
}

#[tokio::test]
async fn nodes_lookup_shows_a_registration_or_none() {
    let url = lease_server(true).await;
    let transport = unique_client_http::HttpTransport::builder(url.as_str())
        .bearer_token(ADMIN)
        .build()
        .unwrap();
    transport
        .directory("game")
        .register_node("n1", "10.0.0.7:7000", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let lookup = ["nodes", "lookup", "--project", "game", "--node", "n1"];
    let run = admin(&url, &lookup).await;
    assert!(
        run.status(0)
            .stdout
            .starts_with("n1 at 10.0.0.7:7000 (registered "),
        "{run:#?}"
    );
    let run = admin(&url, &command(&lookup, &["--json"])).await;
    let found = run.status(0).json();
    assert_eq!(found["node"]["addr"], "10.0.0.7:7000", "{found}");
    let missing = ["nodes", "lookup", "--project", "game", "--node", "n9"];
    let run = admin(&url, &missing).await;
    assert_eq!(
        run.status(0).stdout,
        "no registration: node n9 is not registered (or expired)\n"
    );
    let run = admin(&url, &command(&missing, &["--json"])).await;
    assert_eq!(run.status(0).json(), json!({"node": null}));
}

#[tokio::test]
async fn status_shows_the_servers_info_and_readiness() {
    let url = lease_server(true).await;
    let run = unique(&url, None, &["status"], None).await;
    let text = &run.status(0).stdout;
    for line in [
        "store     memory: ready",
        "serves    sessions on, leases on",
        "callers   bearer token required (--token)",
        "kicks     unsigned; receivers must not verify signatures",
        "limits    no limit slots per user",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    let run = unique(&url, None, &["status", "--json"], None).await;
    let status = run.status(0).json();
    assert_eq!(status["ready"], true, "{status}");
    assert_eq!(status["info"]["auth"]["required"], true, "{status}");

    // Signing key ids, and a store that does not answer: exit 1, info still shown.
    let failing = ArbiterService::new(Arbiter::new(Failing(|| Error::unavailable("disk gone"))))
        .with_kick_signing(|| InfoKicks {
            signed: true,
            signing_key_id: Some("00112233aabbccdd".into()),
            key_ids: vec!["00112233aabbccdd".into(), "ffeeddcc00112233".into()],
        });
    let url = format!("http://{}", spawn(failing, ServeOptions::default()).await);
    let run = unique(&url, None, &["status"], None).await;
    let text = &run.status(1).stdout;
    assert!(
        text.contains("store     unnamed: NOT READY: store not ready: ")
            && text.contains("disk gone")
            && text.contains(
                "kicks     signed with key 00112233aabbccdd (key file: 00112233aabbccdd, \
                 ffeeddcc00112233)"
            )
            && text.contains("callers   none: every caller is trusted"),
        "{text}"
    );
}

#[tokio::test]
async fn a_lease_only_server_says_so_and_refuses_session_commands() {
    let url = lease_server(false).await;
    let run = unique(&url, None, &["status"], None).await;
    let text = &run.status(0).stdout;
    assert!(
        text.contains("serves    sessions off, leases on")
            && text.contains("kicks     none sent (lease-only server)"),
        "{text}"
    );
    let key = [
        "current",
        "--project",
        "game",
        "--env",
        "prod",
        "--uid",
        "1",
    ];
    let run = admin(&url, &key).await;
    assert!(
        run.status(2)
            .stderr
            .contains("does not serve sessions (501): this server serves leases only"),
        "{run:#?}"
    );
    let ensure = room(&["--node", "n1", "--ttl", "30s"]);
    admin(&url, &command(&["lease", "ensure"], &ensure))
        .await
        .status(0);
}
