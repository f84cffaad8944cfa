//! A gen rollback through the real binary: a memory-store server restarts and forgets
//! every gen, so the next login of a key is handed gen 1 again, the gen a session that
//! is still online already holds. Judged by gen alone both sessions would stay online;
//! the old session's heartbeat sees its gen recorded for another owner and evicts with
//! `owner-changed` (docs/design.md, Client).

mod common;

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use tokio::sync::oneshot;
use unique_client::{Heartbeat, HeartbeatOptions};
use unique_client_http::HttpTransport;
use unique_core::{EvictReason, Key, Owner};

use common::{BIN, http, start};

/// A loopback port free right now, so a restarted server can listen where the first did.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn memory_server(port: u16) -> (String, unique_testsupport::ChildGuard) {
    start(Command::new(BIN).args([
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--store",
        "memory",
    ]))
}

fn claim(claim_id: &str, endpoint: &str) -> String {
    format!(
        r#"{{"project":"rollback","env":"test","uid":1,"owner":{{"endpoint":"{endpoint}"}},"claim_id":"{claim_id}"}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_gen_another_owner_got_after_a_rollback_is_evicted() {
    let port = free_port();
    let (addr, first_server) = memory_server(port);
    let old_endpoint = "http://127.0.0.1:9/old-node";
    let answer = http(&addr, "/v1/claim", &claim("old", old_endpoint));
    assert!(answer.contains(r#""gen":1"#), "{answer}");

    // The restart forgets every gen; the new node's login gets gen 1 again, and with no
    // record left to replace it kicks nobody: the old node never hears of it.
    drop(first_server);
    let (addr, _second_server) = memory_server(port);
    let answer = http(
        &addr,
        "/v1/claim",
        &claim("new", "http://127.0.0.1:9/new-node"),
    );
    assert!(answer.contains(r#""gen":1"#), "{answer}");

    // The old node's heartbeat, checking from now on (it started before the restart; a
    // check that met the restarting server would have kept the session, I6).
    let transport = HttpTransport::new(&format!("http://{addr}")).unwrap();
    let heartbeat = Heartbeat::with_options(
        transport,
        HeartbeatOptions::default()
            .interval(Duration::from_millis(100))
            .batch_window(Duration::ZERO),
    );
    let (evicted_tx, evicted) = oneshot::channel();
    let _watch = heartbeat.spawn(
        Key::new("rollback", "test", 1),
        1,
        Owner::new("", "", old_endpoint),
        move |reason| {
            let _ = evicted_tx.send(reason);
        },
    );

    let reason = tokio::time::timeout(Duration::from_secs(20), evicted)
        .await
        .expect("the old session is evicted within the test's patience")
        .expect("the heartbeat reports its eviction");
    assert_eq!(reason, EvictReason::OwnerChanged);
}
