//! The Rust node with a push kick transport against the real binary (issue 46,
//! `docs/design.md#client`, push transport): nodes that listen on no port hold the kick
//! stream open (`NodeBuilder::push` over `HttpTransport`); a takeover from another node ends
//! the first node's session `Kicked` with `login-elsewhere` and the claim answers
//! `kicked: true`; after the server restarts the node reconnects and is kicked again; a kick
//! signed with a key the node does not hold is refused (the claim answers `non-2xx`) and the
//! session stays, while a node holding the key is kicked by the same server; a push node and
//! a node with an HTTP kick receiver take a key over from each other on one server.

mod common;

use std::process::Command;
use std::time::Duration;

use common::push::{ended, push_node, takeover_kicks, until};
use common::{BIN, start, write_secret};
use tokio::net::TcpListener;
use unique_client::{Ending, HeartbeatOptions, Node};
use unique_client_http::HttpTransport;
use unique_core::{Key, KickDetail, KickReason, Owner};
use unique_kick_signature::SigningKeys;
use unique_kickrecv::KickReceiver;
use unique_testsupport::net::PATIENCE;
use unique_testsupport::{ChildGuard, free_port};

const SERVER_KEY: &str = "push-node-server-key-0123456789abcdef";
const OTHER_KEY: &str = "push-node-other-key-0123456789abcdef0";

/// A memory-store server listening on `port` of loopback, with `args` added.
fn server(port: u16, args: &[&std::ffi::OsStr]) -> (String, ChildGuard) {
    start(
        Command::new(BIN)
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--store",
                "memory",
            ])
            .args(args)
            .env("RUST_LOG", "warn"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_node_is_kicked_on_takeover_and_again_after_a_restart() {
    let port = free_port();
    let (addr, mut guard) = server(port, &[]);
    let (a, _a_events) = push_node(&addr, "node-a", None);
    let (b, _b_events) = push_node(&addr, "node-b", None);
    until(&a, |s| s.connected).await;
    until(&b, |s| s.connected).await;
    assert_eq!(a.owner().node, "node-a");
    assert!(a.owner().endpoint.is_empty());

    takeover_kicks(&a, &b, &Key::new("game", "prod", 1)).await;
    // And back: b's session is kicked over b's stream.
    let back = Key::new("game", "prod", 2);
    takeover_kicks(&b, &a, &back).await;

    // The server restarts on the same port: every stream ends, and each node opens a new
    // one once the server is back.
    guard.stop_with("TERM", PATIENCE);
    drop(guard);
    let (again, _guard) = server(port, &[]);
    assert_eq!(again, addr);
    let reconnected = until(&a, |s| s.connected && s.connections == 2).await;
    assert!(reconnected.last_error.is_some(), "{reconnected:?}");
    until(&b, |s| s.connected && s.connections == 2).await;
    takeover_kicks(&a, &b, &Key::new("game", "prod", 3)).await;

    // Shutdown closes the stream for good.
    a.shutdown().await;
    let stopped = until(&a, |s| s.stopped).await;
    assert!(!stopped.connected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kick_signed_with_a_key_the_node_lacks_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kick.keys");
    write_secret(&file, &format!("{SERVER_KEY}\n"));
    let (addr, _guard) = server(
        free_port(),
        &["--kick-signing-keys".as_ref(), file.as_os_str()],
    );
    let wrong = SigningKeys::new([OTHER_KEY]).unwrap();
    let right = SigningKeys::new([SERVER_KEY]).unwrap();
    let (lacking, _l_events) = push_node(&addr, "node-lacking", Some(wrong));
    let (holding, _h_events) = push_node(&addr, "node-holding", Some(right));
    let (taker, _t_events) = push_node(&addr, "node-taker", None);
    for node in [&lacking, &holding, &taker] {
        until(node, |s| s.connected).await;
    }

    // The node refuses the kick (401 in its ack): the claim goes on with non-2xx (the old
    // session presumed offline, I5b) and the session stays on the node.
    let key = Key::new("game", "prod", 10);
    let stays = lacking.login(key.clone()).await.unwrap();
    let new = taker.login(key.clone()).await.unwrap();
    let outcome = &new.login().outcome;
    assert!(!outcome.kicked, "{outcome:?}");
    assert_eq!(outcome.kick_detail, Some(KickDetail::Non2xx));
    // The refusal was acknowledged: the kick had been checked and refused by then.
    until(&lacking, |s| s.acked == 1).await;
    assert_eq!(lacking.generation(&key), Some(stays.generation()));

    // The same server's kick, to a node holding its key, ends the session.
    takeover_kicks(&holding, &taker, &Key::new("game", "prod", 11)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_and_http_nodes_take_keys_over_from_each_other() {
    let (addr, _guard) = server(free_port(), &[]);
    let (pushed, _p_events) = push_node(&addr, "node-push", None);
    until(&pushed, |s| s.connected).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/kick", listener.local_addr().unwrap());
    let transport = HttpTransport::new(&format!("http://{addr}")).unwrap();
    let (listening, _l_events) = Node::builder(transport, Owner::new("eu", "http", endpoint))
        .heartbeat_options(HeartbeatOptions::default().interval(Duration::from_hours(1)))
        .build();
    let _receiver = KickReceiver::builder(listening.kick_handler().clone())
        .spawn(listener)
        .unwrap();

    // The HTTP node takes over from the push node: the kick is pushed.
    takeover_kicks(&pushed, &listening, &Key::new("game", "prod", 20)).await;
    // The push node takes over from the HTTP node: the kick is POSTed.
    let key = Key::new("game", "prod", 21);
    let old = listening.login(key.clone()).await.unwrap();
    let new = pushed.login(key.clone()).await.unwrap();
    assert!(new.login().outcome.kicked, "{:?}", new.login().outcome);
    assert_eq!(
        ended(&old).await,
        Ending::Kicked {
            reason: KickReason::LoginElsewhere,
            message: None
        }
    );
}
