//! Push nodes for the tests of push kicks: Rust nodes with no listener whose kicks come over
//! the stream they hold open, and waits on what they see.

use std::time::Duration;

use unique_client::{
    Ending, HeartbeatOptions, Node, NodeEvents, PushOptions, PushStatus, Session, Transport,
};
use unique_client_http::HttpTransport;
use unique_core::{Key, KickReason, Owner};
use unique_kick_signature::SigningKeys;
use unique_testsupport::net::PATIENCE;

/// A node with no listener whose kicks come over the stream of node `id`, with quick
/// reconnects and no heartbeat during the test (kicks alone must end its sessions).
pub(crate) fn push_node(
    addr: &str,
    id: &str,
    keys: Option<SigningKeys>,
) -> (Node<HttpTransport>, NodeEvents) {
    let transport = HttpTransport::new(&format!("http://{addr}")).unwrap();
    let mut options = PushOptions::new(id)
        .unwrap()
        .backoff(Duration::from_millis(20), Duration::from_millis(200));
    if let Some(keys) = keys {
        options = options.signing_keys(keys);
    }
    Node::builder(transport, Owner::new("eu", id, ""))
        .heartbeat_options(HeartbeatOptions::default().interval(Duration::from_hours(1)))
        .push(options)
        .build()
}

/// Waits until the node's stream status satisfies `done`; a status that never comes fails
/// the test (with the last one seen) instead of hanging it.
pub(crate) async fn until(
    node: &Node<HttpTransport>,
    done: impl Fn(&PushStatus) -> bool,
) -> PushStatus {
    let mut status = node.push_status().expect("a push node");
    let last = node.push_status().expect("a push node");
    match tokio::time::timeout(PATIENCE, status.wait_for(|s| done(s))).await {
        Ok(Ok(reached)) => reached.clone(),
        Ok(Err(_)) => panic!("the stream task ended: {:?}", *last.borrow()),
        Err(elapsed) => panic!(
            "the awaited stream status never came ({elapsed}): {:?}",
            *last.borrow()
        ),
    }
}

/// How `session` ended; a session that never ends fails the test instead of hanging it.
pub(crate) async fn ended(session: &Session<HttpTransport>) -> Ending {
    tokio::time::timeout(PATIENCE, session.ended())
        .await
        .unwrap_or_else(|_| panic!("{session:?} never ended"))
}

/// `first` logs `key` in, `second` takes it over: the first session must end `Kicked`
/// (`login-elsewhere`) and the takeover's claim answer `kicked: true`.
pub(crate) async fn takeover_kicks(
    first: &Node<HttpTransport>,
    second: &Node<HttpTransport>,
    key: &Key,
) {
    let acked = first.push_status().unwrap().borrow().acked;
    let old = first.login(key.clone()).await.unwrap();
    // The record holds the node owner exactly as claimed: what the heartbeat compares.
    let view = first.transport().current(key).await.unwrap();
    assert_eq!(view.owner.as_ref(), Some(first.owner()));
    let new = second.login(key.clone()).await.unwrap();
    let outcome = &new.login().outcome;
    assert!(outcome.kicked, "{outcome:?}");
    assert_eq!(outcome.kick_detail, None);
    assert_eq!(new.generation(), old.generation() + 1);
    assert_eq!(
        ended(&old).await,
        Ending::Kicked {
            reason: KickReason::LoginElsewhere,
            message: None
        }
    );
    assert_eq!(first.generation(key), None);
    until(first, |s| s.acked == acked + 1).await;
}
