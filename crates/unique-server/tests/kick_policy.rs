//! The kick-endpoint policy through the server (`docs/design.md#kick-endpoint-policy`):
//! a claim whose new endpoint the policy refuses is 400 `invalid_params` and writes
//! nothing, in process and through the binary's `--kick-allow` / `--kick-deny`.
//! Every endpoint here is on loopback, and the refused ones are never contacted.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use tokio::net::TcpListener;
use unique_arbiter_http::{ArbiterService, serve};
use unique_core::Arbiter;
use unique_kick_http::{EndpointPolicy, HttpKicker};
use unique_store_memory::MemoryStore;
use unique_testsupport::ChildGuard;

use common::{BIN, announced_addr};

/// POSTs `body` as JSON on a fresh connection; the status and the JSON answer.
fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let body = body.to_string();
    let mut stream = TcpStream::connect(addr).expect("connect to the server");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send the request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    let status = answer
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an http answer: {answer:?}"));
    let (_, json) = answer.split_once("\r\n\r\n").expect("a header end");
    let json = serde_json::from_str(json).unwrap_or_else(|e| panic!("not json ({e}): {json:?}"));
    (status, json)
}

fn claim(uid: i64, endpoint: &str) -> Value {
    json!({"project": "policy", "env": "test", "uid": uid,
           "owner": {"endpoint": endpoint}, "claim_id": format!("claim-{uid}")})
}

fn current(addr: SocketAddr, uid: i64) -> Value {
    let (status, body) = post(
        addr,
        "/v1/current",
        &json!({"project": "policy", "env": "test", "uid": uid}),
    );
    assert_eq!(status, 200, "{body}");
    body
}

/// Asserts a claim of `uid` for `endpoint` is 400 `invalid_params` without echoing
/// the endpoint, and that nothing was written for `uid`.
fn assert_refused(addr: SocketAddr, uid: i64, endpoint: &str) {
    let (status, body) = post(addr, "/v1/claim", &claim(uid, endpoint));
    assert_eq!(status, 400, "{endpoint}: {body}");
    assert_eq!(body["error"], "invalid_params", "{body}");
    let message = body["message"].as_str().expect("a message");
    assert!(message.contains("owner.endpoint is refused"), "{message}");
    assert!(
        !message.contains("s3cr3t") && !message.contains("127.0.0"),
        "{message}"
    );
    assert_eq!(
        current(addr, uid)["exists"],
        false,
        "{endpoint} was written"
    );
}

fn assert_claimed(addr: SocketAddr, uid: i64, endpoint: &str) {
    let (status, body) = post(addr, "/v1/claim", &claim(uid, endpoint));
    assert_eq!(status, 200, "{endpoint}: {body}");
    assert_eq!(body["gen"], 1, "{body}");
    assert_eq!(current(addr, uid)["owner"]["endpoint"], endpoint);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_a_claim_whose_endpoint_the_kicker_policy_refuses() {
    let deny = ["127.0.0.2/32".parse().expect("a rule")];
    let kicker = HttpKicker::builder()
        .endpoint_policy(EndpointPolicy::new().deny(deny))
        .build()
        .expect("valid options");
    let arbiter = Arbiter::builder(MemoryStore::new()).kicker(kicker).build();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(serve(
        listener,
        ArbiterService::new(arbiter),
        std::future::pending(),
    ));

    tokio::task::spawn_blocking(move || {
        assert_refused(addr, 1, "http://127.0.0.2:9/kick?token=s3cr3t");
        // Link-local is refused by default, in its IPv4-mapped form too.
        assert_refused(addr, 2, "http://169.254.169.254/latest?token=s3cr3t");
        assert_refused(addr, 3, "http://[::ffff:169.254.169.254]/latest");
        assert_claimed(addr, 4, "http://127.0.0.1:9/kick");
    })
    .await
    .expect("the requests ran");
}

/// `--kick-deny` (repeated, with a host name) and `UNIQUE_KICK_ALLOW` (comma-separated):
/// the deny list wins over the allow list, and an allow list refuses what it does
/// not hold.
#[test]
fn the_binary_applies_kick_allow_and_kick_deny() {
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--store", "memory"])
        .args(["--kick-deny", "127.0.0.2/32", "--kick-deny", "localhost"])
        .env("UNIQUE_KICK_ALLOW", "127.0.0.0/8,localhost")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start unique-server");
    let addr: SocketAddr = announced_addr(&mut child).parse().expect("an address");
    let _server = ChildGuard::new(child, "unique-server");

    assert_refused(addr, 1, "http://127.0.0.2:9/kick");
    assert_refused(addr, 2, "http://LOCALHOST:9/kick");
    assert_refused(addr, 3, "http://[::1]:9/kick");
    assert_claimed(addr, 4, "http://127.0.0.1:9/kick");
}

#[test]
fn a_bad_kick_rule_is_a_startup_error_naming_the_flag_and_the_entry() {
    for (args, env, needles) in [
        (
            &["--kick-deny", "10.0.0.1/8"][..],
            None,
            &["--kick-deny", "10.0.0.1/8", "host bits"][..],
        ),
        (
            &["--kick-allow", "10.0.0.0/8,node:80"],
            None,
            &["--kick-allow", "node:80", "no port"],
        ),
        (&[], Some("10.0.0.0/33"), &["--kick-allow", "10.0.0.0/33"]),
    ] {
        let mut command = Command::new(BIN);
        command.args(["--store", "memory", "--listen", "127.0.0.1:0"]);
        command.args(args);
        if let Some(value) = env {
            command.env("UNIQUE_KICK_ALLOW", value);
        }
        let out = command.output().expect("run unique-server");
        assert!(!out.status.success(), "{args:?} {env:?} started");
        let err = String::from_utf8_lossy(&out.stderr);
        for needle in needles {
            assert!(err.contains(needle), "{args:?} {env:?}: {err}");
        }
    }
}
