//! A reconnect storm on the real binary (issue 46, `docs/design.md#push-kicks`): 1,000 Rust
//! push nodes (`NodeBuilder::push`, default backoff: 100 ms doubling to 5 s, full jitter) hold
//! their kick streams on one server; the server restarts on the same port, every stream ends,
//! and all 1,000 come back by themselves. Then every node logs its own key in and an endpoint
//! owner takes each over: every takeover is `kicked: true`, every node acks exactly one kick
//! and its one session ends `Kicked`, so no kick reached a node other than its session's.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{BIN, post_json, start};
use serde_json::json;
use tokio::task::JoinSet;
use unique_client::{Ending, HeartbeatOptions, Node, NodeEvents, PushOptions};
use unique_client_http::HttpTransport;
use unique_core::{Key, KickReason, Owner};
use unique_testsupport::net::PATIENCE;
use unique_testsupport::{ChildGuard, free_port};

/// Push nodes in the storm.
const NODES: usize = 1000;

/// A memory-store server on `port` whose caps admit the storm: 1,000 streams under the one
/// token bucket (the default per-token cap is exactly 1,000), and connections from the one
/// loopback address for the streams and the claims beside them.
fn server(port: u16) -> (String, ChildGuard) {
    start(
        Command::new(BIN)
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--store",
                "memory",
                "--max-connections-per-ip",
                "5000",
            ])
            .env("RUST_LOG", "warn"),
    )
}

/// Node `i`'s key's uid (uids start at 1).
fn uid(i: usize) -> i64 {
    i64::try_from(i).unwrap() + 1
}

fn node(transport: &HttpTransport, i: usize) -> (Node<HttpTransport>, NodeEvents) {
    let id = format!("storm-{i}");
    Node::builder(transport.clone(), Owner::new("eu", &id, ""))
        .heartbeat_options(HeartbeatOptions::default().interval(Duration::from_hours(1)))
        .push(PushOptions::new(&id).unwrap())
        .build()
}

/// Waits until every node's stream is connected for the `connections`-th time.
async fn all_connected(nodes: &[Node<HttpTransport>], connections: u64) {
    for (i, node) in nodes.iter().enumerate() {
        let mut status = node.push_status().unwrap();
        let reached = tokio::time::timeout(
            PATIENCE,
            status.wait_for(|s| s.connected && s.connections >= connections),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        assert!(reached, "node {i} not connected: {:?}", *status.borrow());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_streams_reconnect_after_a_restart_and_every_kick_reaches_its_node() {
    let port = free_port();
    let (addr, mut guard) = server(port);
    let transport = HttpTransport::new(&format!("http://{addr}")).unwrap();
    let (nodes, _events): (Vec<_>, Vec<_>) = (0..NODES).map(|i| node(&transport, i)).unzip();
    all_connected(&nodes, 1).await;
    let open = common::request(&addr, "GET", "/metrics", "");
    assert!(
        open.contains(&format!("unique_kick_streams_open {NODES}")),
        "{open}"
    );

    guard.stop_with("TERM", PATIENCE);
    drop(guard);
    let (again, _guard) = server(port);
    let restarted = Instant::now();
    assert_eq!(again, addr);
    all_connected(&nodes, 2).await;
    let took = restarted.elapsed();
    let metrics = common::request(&addr, "GET", "/metrics", "");
    assert!(
        metrics.contains(&format!("unique_kick_streams_open {NODES}")),
        "{metrics}"
    );

    // Each node logs its own key in; an endpoint owner takes each over, 100 at a time.
    let mut sessions = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let key = Key::new("game", "prod", uid(i));
        sessions.push(node.login(key).await.unwrap());
    }
    for chunk in (0..NODES).collect::<Vec<_>>().chunks(100) {
        let mut takeovers = JoinSet::new();
        for &i in chunk {
            let addr = addr.clone();
            takeovers.spawn(async move {
                let body = json!({"project": "game", "env": "prod", "uid": uid(i),
                    "owner": {"endpoint": "http://127.0.0.1:1/kick"}, "claim_id": format!("take-{i}")});
                (i, post_json(&addr, "/v1/claim", "t", &body).await)
            });
        }
        while let Some(done) = takeovers.join_next().await {
            let (i, (status, answer)) = done.unwrap();
            assert_eq!(status, 200, "{answer}");
            assert_eq!(
                (&answer["kicked"], &answer["prev_owner"]["node"]),
                (&json!(true), &json!(format!("storm-{i}"))),
                "node {i}'s session: {answer}"
            );
        }
    }
    for (i, (node, session)) in nodes.iter().zip(&sessions).enumerate() {
        let ending = tokio::time::timeout(PATIENCE, session.ended())
            .await
            .unwrap_or_else(|_| panic!("node {i}'s session never ended"));
        assert_eq!(
            ending,
            Ending::Kicked {
                reason: KickReason::LoginElsewhere,
                message: None
            },
            "node {i}"
        );
        // The ack is counted once its POST is answered, which may follow the session's end.
        let mut status = node.push_status().unwrap();
        let acked = tokio::time::timeout(PATIENCE, status.wait_for(|s| s.acked >= 1))
            .await
            .is_ok_and(|r| r.is_ok());
        assert!(acked, "node {i} acked nothing: {:?}", *status.borrow());
        assert_eq!(status.borrow().acked, 1, "node {i}");
    }
    eprintln!(
        "{NODES} push streams reconnected {} ms after the restarted server announced itself",
        took.as_millis()
    );
}
