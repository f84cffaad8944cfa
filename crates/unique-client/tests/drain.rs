//! `Node::drain`: new logins fail at once, every session ends `node-draining` exactly once
//! (or as kicked, when a takeover reached it first), and every key is released within the
//! deadline; against a real in-process Arbiter (memory store), kicks delivered in process.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::kicks::{arbiter, node};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::timeout;
use unique_client::{Ending, Node, NodeEvent, NodeLoginError, Session, Transport};
use unique_core::{
    Arbiter, ClaimInput, ClaimOutcome, CurrentView, Error, Key, KickReason, Owner, async_trait,
};
use unique_store_memory::MemoryStore;

const SESSIONS: i64 = 1000;
/// One key in three is taken over by another node while the drain runs.
const TAKEOVER_EVERY: i64 = 3;

fn key(uid: i64) -> Key {
    Key::new("game", "prod", uid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sessions_drain_within_two_seconds_with_takeovers_racing() {
    let (arbiter, kicks) = arbiter();
    let ended_events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&ended_events);
    let (a, _) = node(&arbiter, "a")
        .on_event(move |event| {
            if !matches!(event, NodeEvent::LoggedIn { .. }) {
                seen.lock().unwrap().push(event.clone());
            }
        })
        .build();
    let (b, _) = node(&arbiter, "b").build();
    kicks.serve(&a);
    kicks.serve(&b);
    let mut logins = JoinSet::new();
    for uid in 1..=SESSIONS {
        let a = a.clone();
        logins.spawn(async move { a.login(key(uid)).await.unwrap() });
    }
    let sessions = logins.join_all().await;
    assert_eq!(a.sessions(), 1000);

    // The takeovers and the drain, all at once.
    let mut takeovers = JoinSet::new();
    for uid in (1..=SESSIONS).filter(|uid| uid % TAKEOVER_EVERY == 0) {
        let b = b.clone();
        takeovers.spawn(async move { (uid, b.login(key(uid)).await.unwrap()) });
    }
    let draining = {
        let a = a.clone();
        tokio::spawn(async move { a.drain(Duration::from_secs(2)).await })
    };
    let began = async {
        while !a.is_draining() {
            tokio::task::yield_now().await;
        }
    };
    timeout(Duration::from_secs(10), began)
        .await
        .expect("the drain begins");
    let refused = a.login(key(SESSIONS + 1)).await;
    let taken: HashMap<i64, _> = takeovers.join_all().await.into_iter().collect();
    let drained = draining.await.unwrap();

    // A login during the drain fails at once, without a claim.
    assert!(
        matches!(refused, Err(NodeLoginError::Draining)),
        "{refused:?}"
    );
    assert!(!arbiter.current(&key(SESSIONS + 1)).await.unwrap().exists);
    assert!(matches!(
        a.login(key(1)).await,
        Err(NodeLoginError::Draining)
    ));
    // Every session ended exactly once: drained, or kicked by a takeover that reached it
    // first; each one's node event matches its handle's ending.
    assert_eq!(a.sessions(), 0);
    let mut by_key = HashMap::new();
    for event in ended_events.lock().unwrap().iter() {
        assert!(
            by_key.insert(event.key().clone(), event.clone()).is_none(),
            "two endings for {}",
            event.key()
        );
    }
    assert_eq!(by_key.len(), 1000);
    let (drained_here, kicked) = endings(&sessions, &by_key, &taken);
    assert_eq!(drained_here + kicked, 1000);
    assert_eq!(
        (drained.released, drained.unreleased),
        (1000 - taken.len(), drained_here - (1000 - taken.len())),
        "{drained:?}"
    );
    // The takeovers are untouched: online on B, holding the key on the server.
    for (uid, session) in &taken {
        assert_eq!(session.ending(), None, "uid {uid}");
        assert_eq!(b.generation(&key(*uid)), Some(session.generation()));
        let record = arbiter.current(&key(*uid)).await.unwrap();
        assert_eq!(record.generation, session.generation());
        assert_eq!(record.owner.as_ref(), Some(b.owner()));
    }
    // Every other key is released (tombstoned).
    for uid in (1..=SESSIONS).filter(|uid| !taken.contains_key(uid)) {
        let record = arbiter.current(&key(uid)).await.unwrap();
        assert!(
            record.exists && record.owner.is_none(),
            "uid {uid}: {record:?}"
        );
    }
}

/// Checks each of A's sessions against its one node event: drained (released unless a
/// takeover holds the key) or kicked by a takeover. Returns (drained, kicked).
fn endings(
    sessions: &[Session<Arbiter<MemoryStore>>],
    by_key: &HashMap<Key, NodeEvent>,
    taken: &HashMap<i64, Session<Arbiter<MemoryStore>>>,
) -> (usize, usize) {
    let (mut kicked, mut drained_here) = (0, 0);
    for session in sessions {
        let uid = session.key().uid;
        let ending = session.ending().expect("every session ended");
        match (&ending, &by_key[session.key()]) {
            (
                Ending::Drained,
                NodeEvent::Drained {
                    generation,
                    released,
                    ..
                },
            ) => {
                drained_here += 1;
                assert_eq!(*generation, session.generation());
                // Released within the deadline, unless a takeover holds the key now.
                assert_eq!(*released, !taken.contains_key(&uid), "uid {uid}");
                assert!(session.notice(&ending).reconnect);
            }
            (
                Ending::Kicked {
                    reason: KickReason::LoginElsewhere,
                    message: None,
                },
                NodeEvent::Kicked { .. },
            ) => {
                kicked += 1;
                assert!(taken.contains_key(&uid), "only a takeover kicks, uid {uid}");
            }
            (ending, event) => panic!("uid {uid}: handle {ending:?}, event {event:?}"),
        }
    }
    (drained_here, kicked)
}

/// The arbiter as a transport whose claims wait at a gate, once past `sent`.
#[derive(Clone)]
struct Gated {
    arbiter: Arbiter<MemoryStore>,
    sent: Arc<Notify>,
    gate: Arc<Semaphore>,
}

#[async_trait]
impl Transport for Gated {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        let outcome = self.arbiter.claim(request).await;
        self.sent.notify_one();
        let _open = self.gate.acquire().await.unwrap();
        outcome
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.arbiter.current(key).await
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.arbiter.release(key, generation).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_login_in_flight_when_the_drain_begins_releases_its_gen_and_fails() {
    let (arbiter, _) = arbiter();
    let gated = Gated {
        arbiter: arbiter.clone(),
        sent: Arc::new(Notify::new()),
        gate: Arc::new(Semaphore::new(0)),
    };
    let owner = Owner::new("eu", "a", "http://a.internal/kick");
    let (a, _) = Node::builder(gated.clone(), owner).build();
    let login = {
        let a = a.clone();
        tokio::spawn(async move { a.login(key(7)).await })
    };
    // Its claim won gen 1 on the server; the answer is still on its way.
    gated.sent.notified().await;

    let drained = a.drain(Duration::from_secs(2)).await;
    gated.gate.add_permits(1);
    let refused = login.await.unwrap();

    assert_eq!((drained.released, drained.unreleased), (0, 0));
    assert!(
        matches!(refused, Err(NodeLoginError::Draining)),
        "{refused:?}"
    );
    assert_eq!(a.sessions(), 0);
    // The gen it won is released: nobody holds the key.
    let record = arbiter.current(&key(7)).await.unwrap();
    assert_eq!(record.generation, 1);
    assert!(record.exists && record.owner.is_none(), "{record:?}");
}
