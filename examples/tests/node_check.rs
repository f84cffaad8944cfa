//! The examples' node (its `KickReceiver`, wrapped to report every kick) keeps the kick
//! contract, as `unique-node-check` checks it from outside; and started without keys on
//! every interface it refuses to listen.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use unique_examples::events::Report;
use unique_examples::node::{EventSink, Node, NodeConfig};
use unique_node_check::NodeCheck;
use unique_sessions::Key;
use unique_sessions::node::SigningKeys;

fn keys() -> SigningKeys {
    SigningKeys::new(["examples-node-check-key-0123456789abcdef"]).unwrap()
}

fn config(kick_listen: &str, kick_signing_keys: Option<SigningKeys>) -> NodeConfig {
    NodeConfig {
        // Never reached: the node logs nothing in.
        server: "http://127.0.0.1:9".into(),
        key: Key::new("game", "prod", 42),
        region: "local".into(),
        cluster: "node".into(),
        kick_listen: kick_listen.parse().unwrap(),
        heartbeat_interval: Duration::from_secs(1),
        kick_signing_keys,
    }
}

#[tokio::test]
async fn the_example_node_passes_the_node_check() {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink: EventSink = {
        let reports = Arc::clone(&reports);
        Arc::new(move |report| reports.lock().unwrap().push(report))
    };
    let node = Node::start(config("127.0.0.1:0", Some(keys())), sink)
        .await
        .unwrap();
    let report = NodeCheck::new(node.endpoint(), keys()).unwrap().run().await;
    assert!(report.passed(), "{report}");
    // Every kick was answered and reported; none destroyed a session.
    let reports = reports.lock().unwrap().clone();
    assert!(
        reports
            .iter()
            .any(|r| matches!(r, Report::Kick { status: 401, .. })),
        "{reports:?}"
    );
    assert!(
        !reports
            .iter()
            .any(|r| matches!(r, Report::Destroyed { .. })),
        "{reports:?}"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn the_example_node_without_keys_refuses_every_interface() {
    let sink: EventSink = Arc::new(|_| {});
    let Err(error) = Node::start(config("0.0.0.0:0", None), sink).await else {
        panic!("an unsigned receiver started on 0.0.0.0");
    };
    assert!(
        error.starts_with(
            "cannot listen for kicks on 0.0.0.0:0: refusing to serve unsigned kicks on 0.0.0.0:"
        ),
        "{error}"
    );
}
