//! Two nodes against a real in-process Arbiter (memory store) with a kicker that delivers
//! straight to each node's KickHandler: the client pieces working together, on a paused clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use unique_client::{
    Claimer, Heartbeat, HeartbeatExit, HeartbeatOptions, Jitter, KickAck, KickHandler, KickOptions,
    Sessions,
};
use unique_core::{
    Arbiter, EvictReason, Key, KickDetail, KickOutcome, KickPayload, Kicker, Owner, async_trait,
};
use unique_store_memory::MemoryStore;

/// Delivers kicks in process: endpoint → that node's handler; an unknown endpoint is down.
#[derive(Clone, Default)]
struct Loopback {
    nodes: Arc<Mutex<HashMap<String, KickHandler>>>,
    delivered: Arc<Mutex<Vec<(String, KickAck)>>>,
}

#[async_trait]
impl Kicker for Loopback {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, _: Duration) -> KickOutcome {
        let handler = self.nodes.lock().unwrap().get(endpoint).cloned();
        let Some(handler) = handler else {
            return KickOutcome::Failed(KickDetail::ConnectError);
        };
        let ack = handler.handle(payload).await;
        self.delivered
            .lock()
            .unwrap()
            .push((endpoint.to_owned(), ack));
        if ack.no_older_session() {
            KickOutcome::Confirmed
        } else {
            KickOutcome::Failed(KickDetail::Non2xx)
        }
    }
}

struct Node {
    endpoint: String,
    sessions: Sessions,
    handler: KickHandler,
}

impl Node {
    fn new(name: &str) -> Self {
        let sessions = Sessions::new();
        let handler = {
            let (read, remove) = (sessions.clone(), sessions.clone());
            KickHandler::new(
                move |k| read.generation(k),
                move |k: Key, g| {
                    remove.remove_if(&k, g);
                    async {}
                },
                KickOptions::default(),
            )
        };
        Self {
            endpoint: format!("http://{name}.local/kick"),
            sessions,
            handler,
        }
    }

    fn owner(&self) -> Owner {
        Owner::new("eu", "c1", self.endpoint.clone())
    }
}

fn key() -> Key {
    Key::new("game", "prod", 42)
}

fn setup() -> (Arbiter<MemoryStore>, Loopback) {
    let kicker = Loopback::default();
    let arbiter = Arbiter::builder(MemoryStore::new())
        .kicker(kicker.clone())
        .build();
    (arbiter, kicker)
}

#[tokio::test(start_paused = true)]
async fn a_second_login_kicks_the_first_before_it_returns() {
    let (arbiter, kicker) = setup();
    let (a, b) = (Node::new("a"), Node::new("b"));
    for n in [&a, &b] {
        kicker
            .nodes
            .lock()
            .unwrap()
            .insert(n.endpoint.clone(), n.handler.clone());
    }
    let claimer = Claimer::new(arbiter.clone());

    let first = claimer.login(key(), a.owner()).await.unwrap();
    assert_eq!(first.generation(), 1);
    assert!(!first.outcome.has_prev);
    a.sessions.insert(key(), 1);

    let second = claimer.login(key(), b.owner()).await.unwrap();
    b.sessions.insert(key(), second.generation());
    assert_eq!(second.generation(), 2);
    assert!(second.outcome.kicked);
    // Node a destroyed its session inside the claim, before the claim returned (I5a).
    assert_eq!(
        *kicker.delivered.lock().unwrap(),
        [(
            a.endpoint.clone(),
            KickAck::Destroyed {
                local_generation: 1
            }
        )]
    );
    assert!(a.sessions.is_empty());

    // The same login retried (its response lost): same gen, replayed, no second kick (I4).
    let again = claimer
        .login_with_claim_id(key(), b.owner(), second.claim_id.clone())
        .await
        .unwrap();
    assert_eq!(again.generation(), 2);
    assert!(again.outcome.replayed);
    assert_eq!(kicker.delivered.lock().unwrap().len(), 1);

    // Logout tombstones; b's heartbeat then evicts with owner-empty, and the next login
    // continues the gen.
    let hb = Heartbeat::with_options(arbiter.clone(), HeartbeatOptions::default()).spawn(
        key(),
        2,
        b.owner(),
        |_| {},
    );
    assert!(claimer.logout(&key(), 2).await.unwrap());
    assert_eq!(
        hb.join().await,
        HeartbeatExit::Evicted(EvictReason::OwnerEmpty)
    );
    assert!(!claimer.logout(&key(), 1).await.unwrap(), "stale gen");
    assert_eq!(
        claimer.login(key(), a.owner()).await.unwrap().generation(),
        3
    );
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_old_node_self_evicts_within_one_interval() {
    let (arbiter, kicker) = setup();
    let (a, b) = (Node::new("a"), Node::new("b"));
    // a's receiver is down: only b is reachable.
    kicker
        .nodes
        .lock()
        .unwrap()
        .insert(b.endpoint.clone(), b.handler.clone());
    let claimer = Claimer::new(arbiter.clone());
    let first = claimer.login(key(), a.owner()).await.unwrap();
    a.sessions.insert(key(), first.generation());
    let interval = Duration::from_secs(5);
    let evicted = {
        let s = a.sessions.clone();
        Heartbeat::with_options(
            arbiter.clone(),
            HeartbeatOptions::default()
                .interval(interval)
                .jitter(Jitter::none()),
        )
        .spawn(key(), first.generation(), a.owner(), move |reason| {
            s.remove_if(&key(), 1);
            assert_eq!(reason, EvictReason::GenMismatch);
        })
    };

    let second = claimer.login(key(), b.owner()).await.unwrap();
    let claimed_at = Instant::now();
    assert_eq!(second.outcome.kick_detail, Some(KickDetail::ConnectError));
    assert!(!second.outcome.kicked);
    assert_eq!(
        a.sessions.generation(&key()),
        Some(1),
        "not kicked, still here"
    );

    assert_eq!(
        evicted.join().await,
        HeartbeatExit::Evicted(EvictReason::GenMismatch)
    );
    assert!(
        claimed_at.elapsed() <= interval,
        "overlap bounded by one interval (I5b)"
    );
    assert!(a.sessions.is_empty());
}
