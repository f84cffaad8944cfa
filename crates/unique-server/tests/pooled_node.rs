//! Pooled logins through the Rust node against the real binary
//! (`docs/design.md#pooled-sessions`, `docs/design.md#client`): `Node::login_pooled` over
//! `HttpTransport` takes the places `#0`, `#1`, … and each session's handle names its place;
//! a full `deny-new` pool refuses the next login with `NodeLoginError::LimitReached` listing
//! the places online; a logout frees its place; an `evict-oldest` login on another node kicks
//! the oldest session, whose handle ends `login-elsewhere` with "session limit 3 reached"; a
//! session whose kick cannot reach it is ended by its heartbeat reading its place; a drain
//! releases every place.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{BIN, start};
use tokio::net::TcpListener;
use unique_client::{
    Ending, HeartbeatOptions, Node, NodeEvent, NodeEvents, NodeLoginError, PoolPolicy, PoolRequest,
    Session,
};
use unique_client_http::HttpTransport;
use unique_core::{EvictReason, KickReason, Owner, UserKey};
use unique_kickrecv::KickReceiver;
use unique_testsupport::ChildGuard;

/// Nobody listens on loopback port 1: a kick to it fails, and only the heartbeat can tell.
const UNREACHABLE: &str = "http://127.0.0.1:1/kick";

/// A server on the memory store whose projects allow 3 pooled sessions per user.
fn server() -> (String, ChildGuard) {
    start(
        Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
            .args(["--session-limit", "3"])
            .env("RUST_LOG", "warn"),
    )
}

fn user() -> UserKey {
    UserKey::new("game", "prod", 7)
}

fn pool(policy: PoolPolicy) -> PoolRequest {
    PoolRequest {
        policy,
        limit: Some(3),
    }
}

/// A node whose kicks arrive at a receiver on a loopback port, with no heartbeat during the
/// test (kicks alone must end its sessions); the receiver lives as long as it is held.
async fn node(
    transport: &HttpTransport,
    name: &str,
) -> (Node<HttpTransport>, NodeEvents, KickReceiver) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/kick", listener.local_addr().unwrap());
    let (node, events) = Node::builder(transport.clone(), Owner::new("eu", name, endpoint))
        .heartbeat_options(HeartbeatOptions::default().interval(Duration::from_hours(1)))
        .build();
    let receiver = KickReceiver::builder(node.kick_handler().clone())
        .spawn(listener)
        .unwrap();
    (node, events, receiver)
}

/// The slots of the user's sessions online on the server, sorted.
async fn listed(transport: &HttpTransport) -> Vec<String> {
    let sessions = transport.sessions(&user()).await.unwrap();
    sessions.into_iter().map(|s| s.slot).collect()
}

/// How `session` ended; a session that never ends fails the test instead of hanging it.
async fn ended(session: &Session<HttpTransport>) -> Ending {
    tokio::time::timeout(Duration::from_mins(1), session.ended())
        .await
        .unwrap_or_else(|_| panic!("{session:?} never ended"))
}

fn slots(sessions: &[Session<HttpTransport>]) -> Vec<&str> {
    sessions.iter().map(Session::slot).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_deny_new_pool_refuses_with_the_sessions_and_a_logout_frees_a_place() {
    let (addr, _server) = server();
    let transport = HttpTransport::new(&format!("http://{addr}")).unwrap();
    let (a, mut events, _receiver) = node(&transport, "a").await;
    let deny = pool(PoolPolicy::DenyNew);

    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(a.login_pooled(&user(), deny).await.unwrap());
    }
    assert_eq!(slots(&sessions), ["#0", "#1", "#2"]);
    for session in &sessions {
        assert!(
            session.is_pooled() && !session.evicted_oldest(),
            "{session:?}"
        );
        assert_eq!(session.key(), &user().key(session.slot()));
        assert_eq!(a.generation(session.key()), Some(session.generation()));
        let Some(NodeEvent::LoggedIn { key, .. }) = events.recv().await else {
            panic!("expected LoggedIn for {session:?}");
        };
        assert_eq!(&key, session.key());
    }
    assert_eq!(a.sessions(), 3);
    assert_eq!(listed(&transport).await, ["#0", "#1", "#2"]);

    // The fourth: refused, listing the three places with their gens; nothing goes online.
    let refused = a.login_pooled(&user(), deny).await.unwrap_err();
    let NodeLoginError::LimitReached {
        limit,
        sessions: online,
        ..
    } = &refused
    else {
        panic!("expected LimitReached, got {refused:?}");
    };
    assert_eq!(*limit, 3, "{refused}");
    let online: Vec<_> = online
        .iter()
        .map(|s| (s.slot.as_str(), s.generation, s.since.is_some()))
        .collect();
    let expected: Vec<_> = sessions
        .iter()
        .map(|s| (s.slot(), s.generation(), true))
        .collect();
    assert_eq!(online, expected, "{refused}");
    assert!(!refused.was_replaced(), "{refused}");
    assert_eq!(a.sessions(), 3);
    assert!(events.try_recv().is_err(), "a refusal reports nothing");

    // A logout releases its place on the server, and the next deny-new login takes it.
    assert!(sessions[1].logout().await.unwrap());
    assert_eq!(ended(&sessions[1]).await, Ending::LoggedOut);
    assert_eq!(listed(&transport).await, ["#0", "#2"]);
    let again = a.login_pooled(&user(), deny).await.unwrap();
    assert_eq!(again.slot(), "#1");
    assert!(again.generation() > sessions[1].generation(), "{again:?}");
    assert_eq!(listed(&transport).await, ["#0", "#1", "#2"]);

    // A drain hands every place back.
    let drain = a.drain(Duration::from_mins(1)).await;
    assert_eq!((drain.released, drain.unreleased), (3, 0));
    assert!(listed(&transport).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evict_oldest_login_on_another_node_kicks_the_oldest_session_there() {
    let (addr, _server) = server();
    let transport = HttpTransport::new(&format!("http://{addr}")).unwrap();
    let (a, mut a_events, _a_receiver) = node(&transport, "a").await;
    let (b, _b_events, _b_receiver) = node(&transport, "b").await;
    let evict = pool(PoolPolicy::EvictOldest);

    // The oldest login is a's; b holds the two after it.
    let oldest = a.login_pooled(&user(), evict).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(b.login_pooled(&user(), evict).await.unwrap());
    }
    assert_eq!(
        (oldest.slot(), slots(&held)),
        ("#0", vec!["#1", "#2"]),
        "places in login order"
    );
    assert!(matches!(
        a_events.recv().await,
        Some(NodeEvent::LoggedIn { .. })
    ));

    // b's fourth login evicts a's session: the kick reaches a, which ends it.
    let newest = b.login_pooled(&user(), evict).await.unwrap();
    assert_eq!(newest.slot(), "#0");
    assert!(newest.evicted_oldest(), "{newest:?}");
    let outcome = &newest.login().outcome;
    assert_eq!(
        (outcome.has_prev, outcome.prev_generation, outcome.kicked),
        (true, oldest.generation(), true),
        "{outcome:?}"
    );
    let limit_reached = Ending::Kicked {
        reason: KickReason::LoginElsewhere,
        message: Some("session limit 3 reached".to_owned()),
    };
    assert_eq!(ended(&oldest).await, limit_reached);
    assert_eq!(oldest.notice(&limit_reached).reason, "login-elsewhere");
    assert_eq!(
        a_events.recv().await,
        Some(NodeEvent::Kicked {
            key: user().key("#0"),
            generation: oldest.generation(),
            reason: KickReason::LoginElsewhere,
            message: Some("session limit 3 reached".to_owned()),
        })
    );
    assert_eq!(a.sessions(), 0);
    // b's sessions are untouched, and the pool still holds three.
    assert!(held.iter().all(|s| s.ending().is_none()));
    assert_eq!(b.sessions(), 3);
    assert_eq!(listed(&transport).await, ["#0", "#1", "#2"]);

    // An eviction on the node itself: the server skips the kick to its own endpoint, and
    // the node ends the evicted session as a same-node replacement. The oldest now is #1.
    let fifth = b.login_pooled(&user(), evict).await.unwrap();
    assert_eq!(fifth.slot(), "#1");
    assert_eq!(
        ended(&held[0]).await,
        Ending::Replaced {
            by: fifth.generation()
        }
    );
    assert_eq!(b.sessions(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_kick_cannot_reach_it_is_ended_by_its_heartbeat_on_its_place() {
    let (addr, _server) = server();
    let transport = HttpTransport::new(&format!("http://{addr}")).unwrap();
    let (c, _c_events) = Node::builder(transport.clone(), Owner::new("eu", "c", UNREACHABLE))
        .heartbeat_options(HeartbeatOptions::default().interval(Duration::from_millis(100)))
        .build();
    let (b, _b_events, _b_receiver) = node(&transport, "b").await;
    let one = PoolRequest {
        policy: PoolPolicy::EvictOldest,
        limit: Some(1),
    };

    let unreachable = c.login_pooled(&user(), one).await.unwrap();
    assert_eq!(unreachable.slot(), "#0");
    // The heartbeat reads the place: were it reading any other key, it would find no record
    // and end the session `not-exists`, before or after the eviction.
    let newer = b.login_pooled(&user(), one).await.unwrap();
    assert_eq!(newer.slot(), "#0");
    assert!(newer.evicted_oldest() && !newer.login().outcome.kicked);
    assert_eq!(
        ended(&unreachable).await,
        Ending::Evicted {
            reason: EvictReason::GenMismatch
        }
    );
    assert_eq!(c.sessions(), 0);
}
