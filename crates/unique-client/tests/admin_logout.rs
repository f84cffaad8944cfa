//! An admin logout's kick against a real `Node` over an in-process Arbiter: it ends exactly
//! the session it logged out, never the newer session a login brought online on the same node
//! while the kick was on its way.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use unique_client::{Node, NodeEvent};
use unique_core::{
    Arbiter, Key, KickDetail, KickOutcome, KickPayload, KickReason, Kicker, LogoutInput, Owner,
    async_trait,
};
use unique_store_memory::MemoryStore;

type TestNode = Node<Arbiter<MemoryStore>>;

/// Delivers every kick to the node; an admin kick only after the node logged the key in
/// again (the kick was slow: a new login landed on the same node first).
#[derive(Clone, Default)]
struct Late {
    node: Arc<OnceLock<TestNode>>,
    delivered: Arc<Mutex<Vec<(KickPayload, &'static str)>>>,
}

#[async_trait]
impl Kicker for Late {
    async fn kick(&self, _: &str, payload: &KickPayload, _: Duration) -> KickOutcome {
        let node = self.node.get().expect("the node is set before any kick");
        if payload.reason == KickReason::Admin {
            // The tombstone is written: this login gets the next gen, kicking nobody.
            node.login(payload.key()).await.expect("the new login");
        }
        let ack = node.kick_handler().handle(payload).await;
        self.delivered
            .lock()
            .unwrap()
            .push((payload.clone(), ack.as_str()));
        if ack.no_older_session() {
            KickOutcome::Confirmed
        } else {
            KickOutcome::Failed(KickDetail::Non2xx)
        }
    }
}

#[tokio::test]
async fn a_late_admin_kick_spares_the_newer_session_on_the_same_node() {
    let kicker = Late::default();
    let arbiter = Arbiter::builder(MemoryStore::new())
        .kicker(kicker.clone())
        .build();
    let owner = Owner::new("eu", "c1", "http://node.local/kick");
    let (node, mut events) = Node::builder(arbiter.clone(), owner).build();
    kicker.node.set(node.clone()).ok().unwrap();
    let key = Key::new("game", "prod", 42);
    node.login(key.clone()).await.unwrap();

    let done = arbiter
        .logout(&LogoutInput {
            key: key.clone(),
            reason: Some("abuse".into()),
        })
        .await
        .unwrap();

    assert!(
        done.released && done.kicked && done.generation == 1,
        "{done:?}"
    );
    let delivered = kicker.delivered.lock().unwrap().clone();
    assert_eq!(delivered.len(), 1);
    assert_eq!(
        (delivered[0].0.generation, delivered[0].1),
        (2, "not-older"),
        "the kick announced gen 2, which the new session holds"
    );
    assert_eq!(
        node.generation(&key),
        Some(2),
        "the newer session is online"
    );
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    // The kick ended nothing: gen 1 ended when the login on this node replaced it.
    assert!(
        matches!(
            &seen[..],
            [
                NodeEvent::LoggedIn { .. },
                NodeEvent::Replaced {
                    generation: 1,
                    by: 2,
                    ..
                },
                NodeEvent::LoggedIn { .. },
            ]
        ),
        "no kick ended a session: {seen:?}"
    );
}
