//! `GET /v1/info` on the real binary, the node-side agreement check it feeds, and the
//! lease-only server (`--no-sessions`):
//!
//! - info is served without a token and names the signing key ids (never a key), whether
//!   callers must authenticate, the features and the limits; a SIGHUP that replaces the keys
//!   shows at the next request;
//! - a kick receiver given the server's info refuses to start when it verifies signatures and
//!   the server does not sign, when the server signs and it does not verify, and when the
//!   server signs with a key it does not hold, naming the flag to set; one that agrees starts
//!   and a takeover's signed kick ends its session;
//! - `--no-sessions` starts on an exposed address with tokens and no kick signing keys,
//!   answers the session routes 501 with a clear body, and serves leases.
//!
//! The exposed case listens on `0.0.0.0:0`; the tests only ever connect to 127.0.0.1.

mod common;

use std::path::Path;
use std::process::Command;

use common::{BIN, post_json, request, start, stop_with_sigterm, write_secret};
use serde_json::{Value, json};
use unique_client::{Ending, Node};
use unique_client_http::HttpTransport;
use unique_core::{Key, Owner};
use unique_kick_signature::SigningKeys;
use unique_kickrecv::KickReceiver;

const TOKEN: &str = "info-test-token-0123456789abcdef";
const K1: &str = "info-test-key-one-0123456789abcdef0123456";
const K2: &str = "info-test-key-two-0123456789abcdef0123456";

fn server(dir: &Path, listen: &str, keys: Option<&str>) -> Command {
    let tokens = dir.join("tokens.json");
    write_secret(
        &tokens,
        &format!(r#"{{"tokens": [{{"name": "game", "token": "{TOKEN}", "projects": ["game"]}}]}}"#),
    );
    let mut command = Command::new(BIN);
    command
        .args(["--listen", listen, "--store", "memory"])
        .arg("--auth-tokens")
        .arg(tokens)
        .env("RUST_LOG", "warn");
    if let Some(keys) = keys {
        let file = dir.join("kick.keys");
        write_secret(&file, keys);
        command.arg("--kick-signing-keys").arg(file);
    }
    command
}

/// `GET /v1/info` with no token: the status and the JSON body.
fn info(addr: &str) -> (String, Value) {
    let answer = request(addr, "GET", "/v1/info", "");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (
        head.lines().next().unwrap().to_owned(),
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}")),
    )
}

fn id(keys: &str) -> String {
    SigningKeys::parse(keys).unwrap().signing_id().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_needs_no_token_and_names_key_ids_never_keys() {
    let dir = tempfile::tempdir().unwrap();
    let keys = format!("{K1}\n{K2}\n");
    let (addr, guard) =
        start(server(dir.path(), "127.0.0.1:0", Some(&keys)).args(["--max-slots-per-user", "5"]));
    let (status, answer) = info(&addr);
    assert_eq!(status, "HTTP/1.1 200 OK", "{answer}");
    assert_eq!(answer["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(answer["auth"], json!({"required": true}));
    assert_eq!(
        answer["kicks"],
        json!({"signed": true, "signing_key_id": id(K1), "key_ids": [id(K1), id(K2)]})
    );
    assert_eq!(
        answer["features"],
        json!({"sessions": true, "leases": true, "store": "memory", "push_kicks": true})
    );
    assert_eq!(answer["limits"]["max_slots_per_user"], 5);
    assert_eq!(answer["limits"]["max_request_body_bytes"], 65_536);
    let text = answer.to_string();
    assert!(!text.contains(K1) && !text.contains(K2) && !text.contains(TOKEN));

    // The keys replaced by a reload show at the next request.
    write_secret(&dir.path().join("kick.keys"), &format!("{K2}\n{K1}\n"));
    let pid = guard.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut reloaded = info(&addr).1;
    while reloaded["kicks"]["signing_key_id"] != id(K2) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        reloaded = info(&addr).1;
    }
    assert_eq!(reloaded["kicks"]["key_ids"], json!([id(K2), id(K1)]));
}

/// The transport and the info of the server at `addr`.
async fn transport(addr: &str) -> (HttpTransport, unique_wire::InfoAnswer) {
    let transport = HttpTransport::builder(format!("http://{addr}"))
        .bearer_token(TOKEN)
        .build()
        .unwrap();
    let info = transport.info().await.unwrap();
    (transport, info)
}

/// Whether a receiver verifying with `keys` (none: not verifying) starts against `info`;
/// the refusal's message otherwise.
async fn receiver_start(
    info: &unique_wire::InfoAnswer,
    keys: Option<&str>,
) -> Result<KickReceiver, String> {
    let (node, _events) = Node::builder(
        HttpTransport::new("http://127.0.0.1:1").unwrap(),
        Owner::new("", "", "http://127.0.0.1:1/kick"),
    )
    .build();
    let mut builder = KickReceiver::builder(node.kick_handler().clone()).server_info(info);
    if let Some(keys) = keys {
        builder = builder.signing_keys(SigningKeys::parse(keys).unwrap());
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    builder.spawn(listener).map_err(|e| {
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        e.to_string()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_disagrees_with_the_server_on_signatures_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let (unsigned_addr, _unsigned) = start(&mut server(dir.path(), "127.0.0.1:0", None));
    let (_, unsigned) = transport(&unsigned_addr).await;
    assert!(!unsigned.kicks.signed);
    let refused = receiver_start(&unsigned, Some(K1)).await.unwrap_err();
    assert!(
        refused.contains("the server sends unsigned kicks")
            && refused.contains("--kick-signing-keys FILE"),
        "{refused}"
    );
    receiver_start(&unsigned, None).await.unwrap().close().await;

    let signed_dir = tempfile::tempdir().unwrap();
    let (addr, _signed) = start(&mut server(signed_dir.path(), "127.0.0.1:0", Some(K1)));
    let (transport, signed) = transport(&addr).await;
    let refused = receiver_start(&signed, None).await.unwrap_err();
    assert!(
        refused.contains("does not verify them") && refused.contains("--kick-signing-keys file"),
        "{refused}"
    );
    let refused = receiver_start(&signed, Some(K2)).await.unwrap_err();
    assert!(
        refused.contains(&format!("signs kicks with key {}", id(K1))),
        "{refused}"
    );

    // Agreeing: the receiver starts, and a takeover's signed kick ends the session.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/kick", listener.local_addr().unwrap());
    let (node, _events) =
        Node::builder(transport.clone(), Owner::new("eu", "c1", endpoint)).build();
    let receiver = KickReceiver::builder(node.kick_handler().clone())
        .signing_keys(SigningKeys::parse(K1).unwrap())
        .server_info(&signed)
        .spawn(listener)
        .unwrap();
    let key = Key::new("game", "prod", 7);
    let session = node.login(key.clone()).await.unwrap();
    let (other, _other_events) =
        Node::builder(transport, Owner::new("eu", "c2", "http://127.0.0.1:1/kick")).build();
    let taken = other.login(key).await.unwrap();
    assert_eq!(taken.generation(), 2);
    assert!(
        matches!(session.ended().await, Ending::Kicked { .. }),
        "the signed kick was accepted"
    );
    receiver.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_only_server_needs_no_kick_keys_and_serves_no_session_routes() {
    let dir = tempfile::tempdir().unwrap();
    // Exposed, with tokens, no signing keys and no waiver: refused without --no-sessions.
    let mut child = server(dir.path(), "0.0.0.0:0", None)
        .arg("--no-sessions")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let announced = common::announced_addr(&mut child);
    let port = announced.rsplit_once(':').unwrap().1;
    let addr = format!("127.0.0.1:{port}");

    let (_, answer) = info(&addr);
    assert_eq!(
        answer["features"],
        json!({"sessions": false, "leases": true, "store": "memory", "push_kicks": false})
    );
    assert_eq!(
        answer["kicks"],
        json!({"signed": false, "signing_key_id": null, "key_ids": []})
    );
    let key = json!({"project": "game", "env": "prod", "uid": 7});
    for path in ["/v1/current", "/v1/sessions", "/v1/claim", "/v1/logout"] {
        let (status, body) = post_json(&addr, path, TOKEN, &key).await;
        assert_eq!(status, 501, "{path}: {body}");
        assert_eq!(body["error"], "not_implemented", "{path}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("--no-sessions"), "{message}");
    }
    let ensure = json!({"project": "game", "room": "r", "node": "n1", "ttl_ms": 30_000});
    let (status, granted) = post_json(&addr, "/v1/lease/ensure", TOKEN, &ensure).await;
    assert_eq!((status, &granted["node"]), (200, &json!("n1")), "{granted}");
    // A node's transport reads the 501 as a refusal no retry fixes.
    let (transport, _) = transport(&addr).await;
    let refused = unique_client::Transport::current(&transport, &Key::new("game", "prod", 7))
        .await
        .unwrap_err();
    assert!(refused.is_invalid_params(), "{refused}");
    let logs = stop_with_sigterm(child);
    assert!(!logs.contains("WARN"), "{logs}");

    // The flags that make no sense on a lease-only server are refused by name.
    for (flag, value) in [
        ("--no-leases", None),
        ("--insecure-unsigned-kicks", None),
        ("--kick-signing-keys", Some("kick.keys")),
    ] {
        let mut command = server(dir.path(), "127.0.0.1:0", None);
        command.args(["--no-sessions", flag]).args(value);
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("cannot be used with"),
            "{stderr}"
        );
    }
}
