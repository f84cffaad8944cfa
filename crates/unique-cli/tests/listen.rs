//! `unique listen-kicks` as a process, kicked by a real server (the arbiter's HTTP service
//! with `unique-kick-http`'s signing kicker, on loopback): each accepted kick is one JSON line
//! on stdout, a forged one is refused 401 and never printed, and an unsigned listener off
//! loopback refuses to start.

mod common;

use std::process::Stdio;
use std::sync::Arc;

use common::{BIN, spawn, unique};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};
use unique_arbiter_http::{ArbiterService, ServeOptions};
use unique_core::{Arbiter, ClaimInput, Key, Owner};
use unique_kick_http::{HttpKicker, SigningKeys};
use unique_store_memory::MemoryStore;

const KEY: &str = "listen-kicks-test-key-0123456789abcdef0123";

/// The listener as a process: the child, its URL (from stderr) and its stdout's lines.
async fn listener(args: &[&str]) -> (Child, String, Lines<BufReader<ChildStdout>>) {
    let mut child = tokio::process::Command::new(BIN)
        .arg("listen-kicks")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = stderr.next_line().await.unwrap().unwrap_or_default();
    let url = line
        .strip_prefix("unique: listening for kicks on ")
        .and_then(|rest| rest.split_once(' '))
        .unwrap_or_else(|| panic!("not listening: {line:?}"))
        .0
        .to_owned();
    let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, url, stdout)
}

async fn claim(arbiter: &Arbiter<Arc<MemoryStore>>, key: &Key, endpoint: &str, id: &str) -> bool {
    let input = ClaimInput {
        key: key.clone(),
        owner: Owner::new("eu", "c1", endpoint),
        claim_id: id.to_owned(),
    };
    arbiter.claim(&input).await.unwrap().kicked
}

/// One unsigned POST of a kick body to `url`; the answer's status line.
async fn forged(url: &str, body: &str) -> String {
    let addr = url.trim_start_matches("http://").trim_end_matches("/kick");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let raw = format!(
        "POST /kick HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_signed_kick_is_one_json_line_and_a_forged_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("kick.keys");
    unique_testsupport::write_secret(&keys, &format!("{KEY}\n")).unwrap();
    let (_child, url, mut kicks) = listener(&[
        "--listen",
        "127.0.0.1:0",
        "--signing-keys",
        keys.to_str().unwrap(),
    ])
    .await;

    let kicker = HttpKicker::builder()
        .signing_keys(SigningKeys::new([KEY]).unwrap())
        .build()
        .unwrap();
    let arbiter = Arbiter::builder(Arc::new(MemoryStore::new()))
        .kicker(kicker)
        .build();
    let server = spawn(
        ArbiterService::new(arbiter.clone()),
        ServeOptions::default(),
    )
    .await;
    let key = Key::new("game", "prod", 42).with_slot("pc");
    assert!(!claim(&arbiter, &key, &url, "first").await);
    // A takeover kicks the listener, which confirms (200): the claim says so.
    assert!(claim(&arbiter, &key, "http://127.0.0.1:1/other", "second").await);
    let line = kicks.next_line().await.unwrap().unwrap();
    let kick: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        kick,
        serde_json::json!({"project": "game", "env": "prod", "uid": 42, "slot": "pc", "gen": 2,
                           "reason": "login-elsewhere"}),
        "{line}"
    );

    // Unsigned: refused, not printed.
    let body = r#"{"project":"game","env":"prod","uid":42,"gen":99,"reason":"admin"}"#;
    assert_eq!(forged(&url, body).await, "HTTP/1.1 401 Unauthorized");

    // An admin logout of a session at the listener: the next line is that kick, not the forged one.
    let user = Key::new("game", "prod", 43);
    claim(&arbiter, &user, &url, "third").await;
    let run = unique(
        &format!("http://{server}"),
        None,
        &[
            "logout",
            "--project",
            "game",
            "--env",
            "prod",
            "--uid",
            "43",
            "--reason",
            "banned",
        ],
        None,
    )
    .await;
    assert!(
        run.status(0).stdout.contains("its node confirmed the kick"),
        "{run:#?}"
    );
    let line = kicks.next_line().await.unwrap().unwrap();
    let kick: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (
            &kick["uid"],
            &kick["gen"],
            &kick["reason"],
            &kick["message"]
        ),
        (
            &serde_json::json!(43),
            &serde_json::json!(2),
            &serde_json::json!("admin"),
            &serde_json::json!("banned")
        ),
        "{line}"
    );
}

#[tokio::test]
async fn an_unsigned_listener_off_loopback_refuses_to_start() {
    let output = tokio::process::Command::new(BIN)
        .args(["listen-kicks", "--listen", "0.0.0.0:0"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("refusing to serve unsigned kicks")
            && stderr.contains("--signing-keys FILE or --insecure-unsigned"),
        "{stderr}"
    );
    let output = tokio::process::Command::new(BIN)
        .args(["listen-kicks", "--listen", "127.0.0.1:0", "--signing-keys"])
        .arg("/nonexistent/kick.keys")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--signing-keys: "), "{stderr}");
}
