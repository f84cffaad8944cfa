//! Node: bounded events and a clean, bounded shutdown, against a real in-process Arbiter
//! (memory store) behind a probe transport that counts calls and can hold claims or hang
//! releases; on tokio's paused clock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::{Instant, sleep, timeout};
use unique_client::{
    ClaimInput, ClaimOutcome, HeartbeatOptions, IgnoreReason, Jitter, KickAck, Node, NodeEvent,
    NodeEvents, NodeLoginError, Shutdown, Transport, async_trait,
};
use unique_core::{Arbiter, CurrentView, Error, Key, KickPayload, Owner};
use unique_store_memory::MemoryStore;

const INTERVAL: Duration = Duration::from_secs(1);

/// Holds every claim until `open` is notified, after telling `entered`.
struct Hold {
    entered: mpsc::UnboundedSender<()>,
    open: Arc<Notify>,
}

/// The Arbiter as a transport, counting calls; it can hold claims and hang releases.
#[derive(Clone)]
struct Probe {
    arbiter: Arbiter<MemoryStore>,
    claims: Arc<AtomicUsize>,
    /// Keys read by heartbeats (`current` and `current_batch`).
    checks: Arc<AtomicUsize>,
    releases: Arc<AtomicUsize>,
    hang_releases: Arc<AtomicBool>,
    hold: Arc<Mutex<Option<Hold>>>,
}

impl Probe {
    fn new() -> Self {
        Self {
            arbiter: Arbiter::new(MemoryStore::new()),
            claims: Arc::default(),
            checks: Arc::default(),
            releases: Arc::default(),
            hang_releases: Arc::default(),
            hold: Arc::default(),
        }
    }

    /// From now on claims wait for the returned `Notify`; `entered` hears of each.
    fn hold_claims(&self) -> (mpsc::UnboundedReceiver<()>, Arc<Notify>) {
        let (entered, entered_rx) = mpsc::unbounded_channel();
        let open = Arc::new(Notify::new());
        *self.hold.lock().unwrap() = Some(Hold {
            entered,
            open: Arc::clone(&open),
        });
        (entered_rx, open)
    }
}

#[async_trait]
impl Transport for Probe {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        let open = self.hold.lock().unwrap().as_ref().map(|hold| {
            let _ = hold.entered.send(());
            Arc::clone(&hold.open)
        });
        if let Some(open) = open {
            open.notified().await;
        }
        self.arbiter.claim(request).await
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.checks.fetch_add(1, Ordering::SeqCst);
        self.arbiter.current(key).await
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        if self.hang_releases.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.arbiter.release(key, generation).await
    }

    async fn current_batch(&self, keys: &[Key]) -> Result<Vec<Result<CurrentView, Error>>, Error> {
        self.checks.fetch_add(keys.len(), Ordering::SeqCst);
        self.arbiter.current_batch(keys).await
    }
}

fn owner() -> Owner {
    Owner::new("eu", "c1", "http://127.0.0.1:9/kick")
}

fn key(uid: i64) -> Key {
    Key::new("game", "prod", uid)
}

fn builder(probe: &Probe) -> unique_client::NodeBuilder<Probe> {
    Node::builder(probe.clone(), owner()).heartbeat_options(
        HeartbeatOptions::default()
            .interval(INTERVAL)
            .jitter(Jitter::none()),
    )
}

fn drain(events: &mut NodeEvents) -> Vec<NodeEvent> {
    std::iter::from_fn(|| events.try_recv().ok()).collect()
}

/// With a small channel nobody reads, events past its capacity are dropped and counted,
/// never waited for: logins, logouts and kicks all complete, and the sink sees every event.
#[tokio::test(start_paused = true)]
async fn a_full_event_channel_drops_and_counts_while_the_sink_sees_every_event() {
    const SESSIONS: i64 = 20;
    let probe = Probe::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (node, mut events) = {
        let seen = Arc::clone(&seen);
        builder(&probe)
            .event_capacity(4)
            .on_event(move |event| seen.lock().unwrap().push(event.clone()))
            .build()
    };

    for uid in 1..=SESSIONS {
        node.login(key(uid)).await.unwrap();
    }
    assert_eq!(node.sessions(), 20);
    // A kick (its `Kicked` is emitted before it is answered) is not held up either.
    let kick = KickPayload {
        project: "game".into(),
        env: "prod".into(),
        uid: 1,
        slot: String::new(),
        generation: 2,
        reason: unique_core::KickReason::LoginElsewhere,
        message: None,
    };
    assert_eq!(
        node.kick_handler().handle(&kick).await,
        KickAck::Destroyed {
            local_generation: 1
        }
    );
    for uid in 2..=SESSIONS {
        assert!(node.logout(&key(uid)).await.unwrap());
    }
    assert_eq!(node.sessions(), 0);

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 40, "the sink sees every event: {seen:?}");
    assert_eq!(node.dropped_events(), 36, "all but the channel's 4");
    let queued = drain(&mut events);
    assert_eq!(queued, seen[..4], "the first four, in order");

    // Once read, the channel takes events again.
    node.login(key(99)).await.unwrap();
    assert!(matches!(
        drain(&mut events)[..],
        [NodeEvent::LoggedIn { .. }]
    ));
    assert_eq!(node.dropped_events(), 36);
}

/// Shutdown releases every session on the server, stops every heartbeat, reports
/// `LoggedOut` for each and closes the kick handler; a later login goes nowhere.
#[tokio::test(start_paused = true)]
async fn shutdown_releases_every_session_stops_heartbeats_and_closes_the_handler() {
    let probe = Probe::new();
    let (node, mut events) = builder(&probe).build();
    for uid in 1..=3 {
        node.login(key(uid)).await.unwrap();
    }
    sleep(INTERVAL * 3).await;
    assert!(
        probe.checks.load(Ordering::SeqCst) >= 3,
        "the heartbeats run"
    );
    drain(&mut events);

    let report = node.shutdown().await;

    assert_eq!((report.released, report.unreleased), (3, 0));
    assert_eq!(node.sessions(), 0);
    let mut ended = drain(&mut events);
    ended.sort_by_key(|event| event.key().uid);
    let expected: Vec<_> = (1..=3)
        .map(|uid| NodeEvent::LoggedOut {
            key: key(uid),
            generation: 1,
            released: true,
        })
        .collect();
    assert_eq!(ended, expected);
    for uid in 1..=3 {
        let view = probe.arbiter.current(&key(uid)).await.unwrap();
        assert!(view.exists && view.owner.is_none(), "tombstoned: {view:?}");
    }

    // No heartbeat checks any more.
    let checks = probe.checks.load(Ordering::SeqCst);
    sleep(INTERVAL * 10).await;
    assert_eq!(probe.checks.load(Ordering::SeqCst), checks);

    // The kick handler is closed: kicks find nothing, logins send no claim.
    let handler = node.kick_handler();
    assert!(handler.is_closed());
    handler.closed().await;
    let kick = KickPayload {
        project: "game".into(),
        env: "prod".into(),
        uid: 1,
        slot: String::new(),
        generation: 5,
        reason: unique_core::KickReason::LoginElsewhere,
        message: None,
    };
    assert_eq!(
        handler.handle(&kick).await,
        KickAck::Ignored(IgnoreReason::NoSession)
    );
    let claims = probe.claims.load(Ordering::SeqCst);
    assert!(matches!(
        node.login(key(1)).await,
        Err(NodeLoginError::ShutDown)
    ));
    assert_eq!(probe.claims.load(Ordering::SeqCst), claims, "no claim sent");
    assert_eq!(node.sessions(), 0);

    // A second shutdown finds nothing to end.
    assert_eq!(node.shutdown().await, Shutdown::default());
    assert!(drain(&mut events).is_empty());
}

/// Releases that never answer do not hold shutdown past its timeout: the sessions are
/// reported `LoggedOut` unreleased, and left to the server.
#[tokio::test(start_paused = true)]
async fn shutdown_returns_at_its_timeout_when_releases_hang() {
    let probe = Probe::new();
    let (node, mut events) = builder(&probe)
        .shutdown_timeout(Duration::from_secs(2))
        .build();
    for uid in 1..=2 {
        node.login(key(uid)).await.unwrap();
    }
    drain(&mut events);
    probe.hang_releases.store(true, Ordering::SeqCst);

    let start = Instant::now();
    // Bounded so that a shutdown without its own bound fails here instead of hanging.
    let report = timeout(Duration::from_mins(1), node.shutdown())
        .await
        .expect("shutdown returns");

    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "the shutdown timeout"
    );
    assert_eq!((report.released, report.unreleased), (0, 2));
    assert_eq!(probe.releases.load(Ordering::SeqCst), 2, "both were tried");
    let mut ended = drain(&mut events);
    ended.sort_by_key(|event| event.key().uid);
    let expected: Vec<_> = (1..=2)
        .map(|uid| NodeEvent::LoggedOut {
            key: key(uid),
            generation: 1,
            released: false,
        })
        .collect();
    assert_eq!(ended, expected);
    assert!(node.kick_handler().is_closed());
    let checks = probe.checks.load(Ordering::SeqCst);
    sleep(INTERVAL * 10).await;
    assert_eq!(
        probe.checks.load(Ordering::SeqCst),
        checks,
        "heartbeats stopped"
    );
    // Left to the server: still held there.
    let view = probe.arbiter.current(&key(1)).await.unwrap();
    assert_eq!(view.owner, Some(owner()));
}

/// By default shutdown waits 5 s for releases.
#[tokio::test(start_paused = true)]
async fn the_default_shutdown_timeout_is_five_seconds() {
    let probe = Probe::new();
    let (node, _events) = builder(&probe).build();
    node.login(key(1)).await.unwrap();
    probe.hang_releases.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let report = timeout(Duration::from_mins(1), node.shutdown())
        .await
        .expect("shutdown returns");
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(report.unreleased, 1);
}

/// A login whose claim is in flight when the node shuts down does not go online: it
/// returns `ShutDown`, and the gen it won is released.
#[tokio::test(start_paused = true)]
async fn a_login_in_flight_at_shutdown_is_refused_and_released() {
    let probe = Probe::new();
    let (node, mut events) = builder(&probe).build();
    let (mut entered, open) = probe.hold_claims();
    let login = {
        let node = node.clone();
        tokio::spawn(async move { node.login(key(1)).await })
    };
    entered.recv().await.unwrap();

    assert_eq!(node.shutdown().await, Shutdown::default());
    open.notify_one();

    let result = login.await.unwrap();
    assert!(
        matches!(result, Err(NodeLoginError::ShutDown)),
        "{result:?}"
    );
    assert!(!result.unwrap_err().was_replaced());
    assert_eq!(node.sessions(), 0);
    assert!(drain(&mut events).is_empty(), "nothing went online");
    let view = probe.arbiter.current(&key(1)).await.unwrap();
    assert_eq!(view.generation, 1);
    assert!(view.owner.is_none(), "the won gen was released: {view:?}");
}

/// The node announces a login to its kick handler before the claim is sent: a kick that
/// beats the claim's answer makes the login return `Replaced`, never online.
#[tokio::test(start_paused = true)]
async fn a_kick_that_beats_the_claims_answer_replaces_the_login() {
    let probe = Probe::new();
    let (node, mut events) = builder(&probe).build();
    let (mut entered, open) = probe.hold_claims();
    let login = {
        let node = node.clone();
        tokio::spawn(async move { node.login(key(1)).await })
    };
    entered.recv().await.unwrap();

    // A newer login (gen 2) elsewhere kicks before this one's answer (gen 1) arrives.
    let kick = KickPayload {
        project: "game".into(),
        env: "prod".into(),
        uid: 1,
        slot: String::new(),
        generation: 2,
        reason: unique_core::KickReason::LoginElsewhere,
        message: None,
    };
    assert_eq!(
        node.kick_handler().handle(&kick).await,
        KickAck::Ignored(IgnoreReason::NoSession)
    );
    open.notify_one();

    let result = login.await.unwrap();
    let Err(NodeLoginError::Replaced(replaced)) = result else {
        panic!("expected Replaced, got {result:?}");
    };
    assert_eq!(replaced.generation(), 1);
    assert_eq!(node.sessions(), 0);
    assert_eq!(
        drain(&mut events),
        [
            NodeEvent::LoggedIn {
                key: key(1),
                login: (*replaced).clone(),
            },
            NodeEvent::Kicked {
                key: key(1),
                generation: 1,
                reason: unique_core::KickReason::LoginElsewhere,
                message: None,
            },
        ]
    );
    assert_eq!(node.kick_handler().remembered_early_kicks(), 0);
}
