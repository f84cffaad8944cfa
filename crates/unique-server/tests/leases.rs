//! The lease routes of the real binary: on the default embedded store (fjall, whose lease
//! directory lives in `--fjall-dir` itself) a grant, verify and release round trip over HTTP
//! with a project-scoped token, holdings and epochs that survive a restart, an older build's
//! SQLite lease file imported (or refused, by name), and `--no-leases`;
//! then a round trip on each other store (memory, and PostgreSQL and DynamoDB (dynalite)
//! started by the test tooling, each with the lease tables `--create-table` made).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::{BIN, post_json, start, write_secret};
use serde_json::{Value, json};
use unique_client_http::HttpTransport;
use unique_lease::Directory;

const GAME: &str = "leases-test-token-game-01234";
const CHAT: &str = "leases-test-token-chat-01234";

/// The server on the default store with its file in `dir`, and tokens for `game` and `chat`.
fn server(dir: &Path) -> Command {
    let tokens = dir.join("tokens.json");
    write_secret(
        &tokens,
        &format!(
            r#"{{"tokens": [
                {{"name": "game", "token": "{GAME}", "projects": ["game"]}},
                {{"name": "chat", "token": "{CHAT}", "projects": ["chat"]}}
            ]}}"#
        ),
    );
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--fjall-dir"])
        .arg(dir.join("unique.fjall"))
        .arg("--auth-tokens")
        .arg(tokens)
        .env("RUST_LOG", "warn");
    command
}

async fn ok(addr: &str, path: &str, body: &Value) -> Value {
    let (status, answer) = post_json(addr, path, GAME, body).await;
    assert_eq!(status, 200, "POST {path} {body}: {answer}");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_verify_release_round_trip_on_the_default_store() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, guard) = start(&mut server(dir.path()));

    let ensure = json!({"project": "game", "room": "lobby", "node": "n1", "ttl_ms": 30_000});
    let granted = ok(&addr, "/v1/lease/ensure", &ensure).await;
    assert_eq!(
        (&granted["room"], &granted["node"], &granted["epoch"]),
        (&json!("lobby"), &json!("n1"), &json!(1)),
        "{granted}"
    );
    let left = granted["ttl_left_ms"].as_u64().unwrap();
    assert!((1..=30_000).contains(&left), "{granted}");
    let token = granted["token"].clone();
    let renewed = ok(&addr, "/v1/lease/ensure", &ensure).await;
    assert_eq!(
        (&renewed["token"], &renewed["epoch"]),
        (&token, &json!(1)),
        "{renewed}"
    );
    let other = json!({"project": "game", "room": "lobby", "node": "n2", "ttl_ms": 30_000});
    assert_eq!(ok(&addr, "/v1/lease/ensure", &other).await["node"], "n1");

    let holding = json!({"project": "game", "room": "lobby", "node": "n1", "token": token});
    assert_eq!(
        ok(&addr, "/v1/lease/verify", &holding).await,
        json!({"valid": true})
    );
    let lookup = json!({"project": "game", "room": "lobby"});
    assert_eq!(
        ok(&addr, "/v1/lease/lookup", &lookup).await["lease"]["token"],
        token
    );
    // Another project's token may not touch it, and its own room of that name is its own.
    let (status, _) = post_json(&addr, "/v1/lease/verify", CHAT, &holding).await;
    assert_eq!(status, 403);
    let chat = json!({"project": "chat", "room": "lobby", "node": "n9", "ttl_ms": 30_000});
    let (status, theirs) = post_json(&addr, "/v1/lease/ensure", CHAT, &chat).await;
    assert_eq!((status, &theirs["node"]), (200, &json!("n9")), "{theirs}");

    assert_eq!(
        ok(&addr, "/v1/lease/release", &holding).await,
        json!({"released": true})
    );
    assert_eq!(
        ok(&addr, "/v1/lease/verify", &holding).await,
        json!({"valid": false})
    );
    assert_eq!(
        ok(&addr, "/v1/lease/lookup", &lookup).await,
        json!({"lease": null})
    );
    let (status, refused) = post_json(
        &addr,
        "/v1/lease/ensure",
        GAME,
        &json!({"project": "game", "room": "lobby", "node": "n1", "ttl_ms": 0}),
    )
    .await;
    assert_eq!((status, &refused["error"]), (400, &json!("invalid_params")));

    // The Rust client, over the same routes: a node registers, holds a room, gives it back.
    let directory = HttpTransport::builder(format!("http://{addr}"))
        .bearer_token(GAME)
        .build()
        .unwrap()
        .directory("game");
    let lease = directory
        .ensure_owner("arena", "n1", SystemTime::now(), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(lease.is_held_by("n1") && lease.is_live(), "{lease:?}");
    assert!(
        lease.epoch > 1,
        "epochs are per directory and only grow: {lease:?}"
    );
    assert!(
        directory
            .verify_owner("arena", "n1", &lease.lease_token, SystemTime::now())
            .await
            .unwrap()
    );
    assert!(
        directory
            .release_owner("arena", "n1", &lease.lease_token)
            .await
            .unwrap()
    );
    let kept = directory
        .ensure_owner("kept", "n1", SystemTime::now(), Duration::from_mins(10))
        .await
        .unwrap();
    drop(guard);
    restart_keeps_leases(dir.path(), &kept).await;
}

/// After the server of `ensure_verify_release_round_trip_on_the_default_store` stopped: its
/// directory holds one fjall directory, and a restart keeps `kept` held under its token, with
/// the next holding's epoch higher than every earlier one.
async fn restart_keeps_leases(dir: &Path, kept: &unique_lease::Lease) {
    let ensure = json!({"project": "game", "room": "lobby", "node": "n1", "ttl_ms": 30_000});
    assert_eq!(
        files_in(dir),
        ["tokens.json", "unique.fjall"],
        "one fjall directory holds sessions and leases alike"
    );

    // The leases are durable: after a restart the held room is still held under the same
    // token, and the next holding's epoch is higher than every earlier one.
    let (addr, _guard) = start(&mut server(dir));
    let held = ok(
        &addr,
        "/v1/lease/lookup",
        &json!({"project": "game", "room": "kept"}),
    )
    .await;
    assert_eq!(
        (&held["lease"]["token"], &held["lease"]["epoch"]),
        (&json!(kept.lease_token), &json!(kept.epoch)),
        "{held}"
    );
    let again = ok(&addr, "/v1/lease/ensure", &ensure).await;
    assert!(
        again["epoch"].as_u64().unwrap() > kept.epoch,
        "epoch {} after a restart, {} before",
        again["epoch"],
        kept.epoch
    );
}

/// The names in `dir`, sorted.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// An older build kept the default store's leases in `unique-leases.db` beside the fjall
/// directory. A server that finds one imports it before serving: the held room stays held
/// under its token and epoch, the next epoch is above every epoch the file issued (D4), and
/// the file is renamed so a later start cannot bring back rows released since. A file it
/// cannot read stops startup, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_lease_file_beside_the_fjall_store_is_imported_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("unique-leases.db");
    let held = {
        let directory = unique_store_sqlite::SqliteDirectory::open(&old).unwrap();
        let ttl = Duration::from_mins(10);
        for room in ["game#a", "game#b", "game#c", "game#d"] {
            directory
                .ensure_owner(room, "n0", SystemTime::now(), ttl)
                .await
                .unwrap();
        }
        directory
            .ensure_owner("game#lobby", "n1", SystemTime::now(), ttl)
            .await
            .unwrap()
    };
    assert_eq!(held.epoch, 5);

    let (addr, guard) = start(&mut server(dir.path()));
    let lookup = ok(
        &addr,
        "/v1/lease/lookup",
        &json!({"project": "game", "room": "lobby"}),
    )
    .await;
    assert_eq!(
        (
            &lookup["lease"]["node"],
            &lookup["lease"]["token"],
            &lookup["lease"]["epoch"]
        ),
        (&json!("n1"), &json!(held.lease_token), &json!(5)),
        "{lookup}"
    );
    let taken = json!({"project": "game", "room": "lobby", "node": "n2", "ttl_ms": 30_000});
    assert_eq!(ok(&addr, "/v1/lease/ensure", &taken).await["node"], "n1");
    let fresh = json!({"project": "game", "room": "new", "node": "n2", "ttl_ms": 30_000});
    assert_eq!(ok(&addr, "/v1/lease/ensure", &fresh).await["epoch"], 6);
    drop(guard);
    assert!(!old.exists(), "the imported file is renamed");
    assert!(dir.path().join("unique-leases.db.imported").exists());

    // A second start finds nothing to import and keeps what it has.
    let (addr, _guard) = start(&mut server(dir.path()));
    assert_eq!(
        ok(
            &addr,
            "/v1/lease/ensure",
            &json!({"project": "game", "room": "x", "node": "n2", "ttl_ms": 30_000})
        )
        .await["epoch"],
        7
    );

    let broken = tempfile::tempdir().unwrap();
    std::fs::write(broken.path().join("unique-leases.db"), "not a database").unwrap();
    let out = server(broken.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("unique-leases.db") && stderr.contains("could not import"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_leases_answers_501_and_opens_no_lease_file() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _guard) = start(server(dir.path()).arg("--no-leases"));
    let ensure = json!({"project": "game", "room": "lobby", "node": "n1", "ttl_ms": 30_000});
    let (status, answer) = post_json(&addr, "/v1/lease/ensure", GAME, &ensure).await;
    assert_eq!((status, &answer["error"]), (501, &json!("not_implemented")));
    assert!(!dir.path().join("unique-leases.db").exists());
}

/// A name no earlier run used (PostgreSQL and dynalite outlive one test).
fn fresh(what: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}_{}_{nanos}", std::process::id())
}

/// Grant, renewal, another node told the holder, verify, release, and a node registered and
/// read back, on the server at `addr` (no tokens).
async fn round_trip(addr: &str) {
    let room = fresh("room");
    let ensure = json!({"project": "game", "room": room, "node": "n1", "ttl_ms": 30_000});
    let granted = ok(addr, "/v1/lease/ensure", &ensure).await;
    assert_eq!(granted["node"], "n1", "{granted}");
    let renewed = ok(addr, "/v1/lease/ensure", &ensure).await;
    assert_eq!(
        (&renewed["token"], &renewed["epoch"]),
        (&granted["token"], &granted["epoch"])
    );
    let other = json!({"project": "game", "room": room, "node": "n2", "ttl_ms": 30_000});
    assert_eq!(ok(addr, "/v1/lease/ensure", &other).await["node"], "n1");
    let holding = json!({"project": "game", "room": room, "node": "n1", "token": granted["token"]});
    assert_eq!(
        ok(addr, "/v1/lease/verify", &holding).await,
        json!({"valid": true})
    );
    assert_eq!(
        ok(addr, "/v1/lease/release", &holding).await,
        json!({"released": true})
    );
    let taken = ok(addr, "/v1/lease/ensure", &other).await;
    assert_eq!(taken["node"], "n2", "{taken}");
    assert!(
        taken["epoch"].as_u64() > granted["epoch"].as_u64(),
        "{taken}"
    );
    let node = fresh("node");
    let register =
        json!({"project": "game", "node": node, "addr": "10.0.0.7:7000", "ttl_ms": 30_000});
    ok(addr, "/v1/nodes/register", &register).await;
    let found = ok(
        addr,
        "/v1/nodes/lookup",
        &json!({"project": "game", "node": node}),
    )
    .await;
    assert_eq!(found["node"]["addr"], "10.0.0.7:7000", "{found}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_on_the_memory_store() {
    let (addr, _guard) =
        start(Command::new(BIN).args(["--listen", "127.0.0.1:0", "--store", "memory"]));
    round_trip(&addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_on_postgres_with_their_own_tables() {
    let db = unique_testsupport::postgres::shared();
    let mut command = common::postgres_command(db.url(), "lease_binary_test");
    command
        .arg("--create-table")
        .args(["--database-lease-prefix", &fresh("lt")]);
    let (addr, _guard) = start(&mut command);
    round_trip(&addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_on_dynamodb_in_their_own_table() {
    let dynalite = unique_testsupport::dynalite::Dynalite::shared();
    let mut command =
        common::dynamodb_command(&dynalite.endpoint_url(), "lease-binary-test-sessions");
    command
        .arg("--create-table")
        .args(["--lease-table", &fresh("lease-binary-test")]);
    let (addr, _guard) = start(&mut command);
    round_trip(&addr).await;
}
