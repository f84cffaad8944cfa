//! A retried login never kicks the newer session (C9), through the real binary on its
//! default store (fjall), on SQLite and on the memory store: login A wins gen 1 but its answer is
//! lost, login B replaces it at gen 2 (A's node confirms the kick), then A's retry
//! arrives. It is answered 409 `superseded` with the gen it won and the key's gen; B's
//! node receives no kick and B still holds the key. After B logs out, B's retry is
//! superseded too.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use common::{BIN, http, start};

/// A kick receiver that confirms every kick (200) and counts them.
fn confirming_node() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}/kick", listener.local_addr().unwrap());
    let kicks = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&kicks);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 4096];
            // One read holds the whole small kick request on loopback.
            if stream.read(&mut request).unwrap_or(0) > 0 {
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        }
    });
    (endpoint, kicks)
}

fn claim(claim_id: &str, endpoint: &str) -> String {
    format!(
        r#"{{"project":"retry","env":"test","uid":1,"owner":{{"endpoint":"{endpoint}"}},"claim_id":"{claim_id}"}}"#
    )
}

fn body(answer: &str) -> serde_json::Value {
    let (_, json) = answer.split_once("\r\n\r\n").expect("a header end");
    serde_json::from_str(json).unwrap_or_else(|e| panic!("not json ({e}): {answer}"))
}

fn status(answer: &str) -> &str {
    answer.get(9..12).unwrap_or(answer)
}

fn retried_login_is_superseded(store_args: &[&str]) {
    let (addr, _server) = start(
        Command::new(BIN)
            .args(["--listen", "127.0.0.1:0"])
            .args(store_args),
    );
    let (node_a, kicks_a) = confirming_node();
    let (node_b, kicks_b) = confirming_node();

    // A wins gen 1; the test plays the client that never saw this answer.
    let first = http(&addr, "/v1/claim", &claim("login-a", &node_a));
    assert_eq!(status(&first), "200", "{first}");
    assert_eq!(body(&first)["gen"], 1);
    // B replaces it at gen 2: A's node confirms the kick.
    let second = http(&addr, "/v1/claim", &claim("login-b", &node_b));
    assert_eq!(status(&second), "200", "{second}");
    assert_eq!(
        (
            body(&second)["gen"].clone(),
            body(&second)["kicked"].clone()
        ),
        (2.into(), true.into())
    );
    assert_eq!(kicks_a.load(Ordering::SeqCst), 1);

    // A's retry: superseded, no kick, no write.
    let retry = http(&addr, "/v1/claim", &claim("login-a", &node_a));
    assert_eq!(status(&retry), "409", "{retry}");
    let answer = body(&retry);
    assert_eq!(answer["error"], "superseded", "{retry}");
    assert_eq!(
        (answer["gen"].clone(), answer["current_gen"].clone()),
        (1.into(), 2.into()),
        "{retry}"
    );
    assert_eq!(
        kicks_b.load(Ordering::SeqCst),
        0,
        "the newer session was kicked"
    );
    let current = http(
        &addr,
        "/v1/current",
        r#"{"project":"retry","env":"test","uid":1}"#,
    );
    let view = body(&current);
    assert_eq!(view["gen"], 2, "{current}");
    assert_eq!(view["owner"]["endpoint"], node_b.as_str(), "{current}");

    // B's own retry is still a replay; after B logs out, it is superseded.
    let replay = http(&addr, "/v1/claim", &claim("login-b", &node_b));
    assert_eq!(body(&replay)["replayed"], true, "{replay}");
    let release = http(
        &addr,
        "/v1/release",
        r#"{"project":"retry","env":"test","uid":1,"gen":2}"#,
    );
    assert_eq!(body(&release)["released"], true, "{release}");
    let after_logout = http(&addr, "/v1/claim", &claim("login-b", &node_b));
    assert_eq!(status(&after_logout), "409", "{after_logout}");
    assert_eq!(body(&after_logout)["current_gen"], 2, "{after_logout}");
    assert_eq!(kicks_b.load(Ordering::SeqCst), 0);
}

#[test]
fn a_retried_login_is_superseded_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unique.db");
    retried_login_is_superseded(&["--store", "sqlite", "--db", db.to_str().unwrap()]);
}

#[test]
fn a_retried_login_is_superseded_on_the_default_store_fjall() {
    let dir = tempfile::tempdir().unwrap();
    let fjall = dir.path().join("unique.fjall");
    retried_login_is_superseded(&["--fjall-dir", fjall.to_str().unwrap()]);
}

#[test]
fn a_retried_login_is_superseded_on_memory() {
    retried_login_is_superseded(&["--store", "memory"]);
}
