//! The node runtime (`unique_client::Node`) with its [`KickReceiver`], over real loopback
//! HTTP against an in-process `unique-arbiter-http` server on the memory store: every event
//! a node reports, produced the way production produces it.

use std::time::Duration;

use tokio::net::TcpListener;
use tokio::time::timeout;
use unique_arbiter_http::{ArbiterService, serve};
use unique_client::{HeartbeatOptions, Node, NodeEvent, NodeEvents, NodeLoginError, Transport};
use unique_client_http::HttpTransport;
use unique_core::{Arbiter, EvictReason, Key, KickDetail, KickReason, Owner};
use unique_kick_http::HttpKicker;
use unique_kickrecv::KickReceiver;
use unique_store_memory::MemoryStore;

const HEARTBEAT: Duration = Duration::from_millis(50);
/// The bound on waiting for an event that must come.
const WAIT: Duration = Duration::from_secs(10);

/// Starts the arbitration server on a loopback port; returns its base URL. It runs until
/// the test's runtime ends.
async fn server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let arbiter = Arbiter::builder(MemoryStore::new())
        .kicker(HttpKicker::builder().build().unwrap())
        .kick_timeout(Duration::from_secs(2))
        .build();
    tokio::spawn(serve(
        listener,
        ArbiterService::new(arbiter),
        std::future::pending(),
    ));
    format!("http://{addr}")
}

/// A node with its kick receiver on a loopback port, as an application wires it.
async fn node(server: &str, name: &str) -> (Node<HttpTransport>, NodeEvents, KickReceiver) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/kick", listener.local_addr().unwrap());
    let (node, events) = Node::builder(
        HttpTransport::new(server).unwrap(),
        Owner::new("eu", name, endpoint),
    )
    .heartbeat_options(HeartbeatOptions::default().interval(HEARTBEAT))
    .build();
    let receiver = KickReceiver::builder(node.kick_handler().clone())
        .spawn(listener)
        .unwrap();
    (node, events, receiver)
}

fn key() -> Key {
    Key::new("game", "prod", 42)
}

async fn next(events: &mut NodeEvents) -> NodeEvent {
    timeout(WAIT, events.recv())
        .await
        .expect("an event within the bound")
        .expect("the node is alive")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_goes_online_and_is_reported() {
    let url = server().await;
    let (a, mut events, _receiver) = node(&url, "a").await;

    let login = a.login(key()).await.unwrap();

    assert_eq!(login.generation(), 1);
    assert_eq!(a.generation(&key()), Some(1));
    assert_eq!(a.sessions(), 1);
    let NodeEvent::LoggedIn {
        key: k,
        login: reported,
    } = next(&mut events).await
    else {
        panic!("expected LoggedIn");
    };
    assert_eq!((k, reported), (key(), login.login().clone()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_login_kicks_the_session_before_its_claim_returns() {
    let url = server().await;
    let (a, mut a_events, _a_receiver) = node(&url, "a").await;
    let (b, _b_events, _b_receiver) = node(&url, "b").await;
    a.login(key()).await.unwrap();
    assert!(matches!(
        next(&mut a_events).await,
        NodeEvent::LoggedIn { .. }
    ));

    let login = b.login(key()).await.unwrap();

    assert_eq!(login.generation(), 2);
    assert!(
        login.login().outcome.kicked,
        "A's receiver confirmed the kick"
    );
    // Already there when B's claim returns: A reported it before answering the kick.
    assert_eq!(
        a_events.try_recv().ok(),
        Some(NodeEvent::Kicked {
            key: key(),
            generation: 1,
            reason: unique_core::KickReason::LoginElsewhere,
            message: None,
        })
    );
    assert_eq!(a.generation(&key()), None);
    assert_eq!(a.sessions(), 0);
    assert_eq!(b.generation(&key()), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_evicts_a_session_released_elsewhere() {
    let url = server().await;
    let (a, mut events, _receiver) = node(&url, "a").await;
    a.login(key()).await.unwrap();
    next(&mut events).await;

    // Someone else (an admin tool, another service) releases the session.
    let released = HttpTransport::new(&url)
        .unwrap()
        .release(&key(), 1)
        .await
        .unwrap();
    assert!(released);

    assert_eq!(
        next(&mut events).await,
        NodeEvent::Evicted {
            key: key(),
            generation: 1,
            reason: EvictReason::OwnerEmpty
        }
    );
    assert_eq!(a.generation(&key()), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_evicts_a_session_whose_kick_could_not_connect() {
    let url = server().await;
    let (a, mut a_events, a_receiver) = node(&url, "a").await;
    let (b, _b_events, _b_receiver) = node(&url, "b").await;
    a.login(key()).await.unwrap();
    next(&mut a_events).await;
    a_receiver.close().await;

    let login = b.login(key()).await.unwrap();

    assert_eq!(
        login.login().outcome.kick_detail,
        Some(KickDetail::ConnectError)
    );
    assert_eq!(
        next(&mut a_events).await,
        NodeEvent::Evicted {
            key: key(),
            generation: 1,
            reason: EvictReason::GenMismatch
        }
    );
    assert_eq!(a.generation(&key()), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logout_releases_and_reports_once() {
    let url = server().await;
    let (a, mut events, _receiver) = node(&url, "a").await;
    a.login(key()).await.unwrap();
    next(&mut events).await;

    assert!(a.logout(&key()).await.unwrap());

    assert_eq!(
        next(&mut events).await,
        NodeEvent::LoggedOut {
            key: key(),
            generation: 1,
            released: true
        }
    );
    assert_eq!(a.generation(&key()), None);
    let view = a.transport().current(&key()).await.unwrap();
    assert!(view.exists && view.owner.is_none() && view.generation == 1);
    // Its heartbeat stopped with the logout: several intervals on the tombstone bring no
    // eviction.
    let quiet = timeout(HEARTBEAT * 6, events.recv()).await;
    assert!(quiet.is_err(), "unexpected event after logout: {quiet:?}");
    // Nothing left to log out.
    assert!(!a.logout(&key()).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_already_replaced_by_a_kick_never_goes_online() {
    let url = server().await;
    let (a, mut events, _receiver) = node(&url, "a").await;
    // A login of the key is in flight here (an early kick is remembered only then), and a
    // newer login's kick reached this node before that login's answer did.
    let in_flight = a.kick_handler().expect_login(&key());
    let early = unique_core::KickPayload {
        project: "game".into(),
        env: "prod".into(),
        uid: 42,
        slot: String::new(),
        generation: 7,
        reason: unique_core::KickReason::LoginElsewhere,
        message: None,
    };
    a.kick_handler().handle(&early).await;

    let Err(NodeLoginError::Replaced(login)) = a.login(key()).await else {
        panic!("the login must be refused");
    };
    drop(in_flight);

    assert_eq!(login.generation(), 1);
    assert!(matches!(
        next(&mut events).await,
        NodeEvent::LoggedIn { .. }
    ));
    assert_eq!(
        next(&mut events).await,
        NodeEvent::Kicked {
            key: key(),
            generation: 1,
            reason: unique_core::KickReason::LoginElsewhere,
            message: None,
        }
    );
    assert_eq!(a.generation(&key()), None);
}

/// `POST /v1/logout` (an admin logout) on the server at `server`, with no token (the test
/// server trusts every caller); the answer's JSON.
async fn admin_logout(server: &str, body: &serde_json::Value) -> serde_json::Value {
    post(
        server.trim_start_matches("http://"),
        "/v1/logout",
        &body.to_string(),
    )
    .await
}

/// One raw HTTP/1.1 POST on a fresh connection; the answer's JSON body (200 asserted).
async fn post(addr: &str, path: &str, body: &str) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    timeout(WAIT, stream.read_to_string(&mut answer))
        .await
        .expect("an answer within the bound")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (_, json) = answer.split_once("\r\n\r\n").expect("a body");
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// An admin logout reaches the node as a kick with reason `admin` and the operator's
/// message, reported in `Kicked` before the logout is answered; a takeover's kick is
/// `login-elsewhere` (see `a_newer_login_kicks_the_session_before_its_claim_returns`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_logout_kicks_the_session_with_its_reason_and_message() {
    let url = server().await;
    let (a, mut events, receiver) = node(&url, "a").await;
    a.login(key()).await.unwrap();
    assert!(matches!(
        next(&mut events).await,
        NodeEvent::LoggedIn { .. }
    ));

    let body = serde_json::json!({"project": "game", "env": "prod", "uid": 42,
                                  "reason": "chargeback under review"});
    let answer = admin_logout(&url, &body).await;

    assert_eq!(
        answer,
        serde_json::json!({"released": true, "gen": 1, "kicked": true, "kick_detail": null})
    );
    // Already there when the logout is answered: the node reported it before its 200.
    assert_eq!(
        events.try_recv().ok(),
        Some(NodeEvent::Kicked {
            key: key(),
            generation: 1,
            reason: KickReason::Admin,
            message: Some("chargeback under review".into()),
        })
    );
    assert_eq!(a.generation(&key()), None);
    let view = a.transport().current(&key()).await.unwrap();
    assert_eq!((view.exists, view.owner, view.generation), (true, None, 1));

    // The next login gets the gen the logout announced, and that kick, delivered again
    // (late, or replayed), does not end it: it is not older.
    let login = a.login(key()).await.unwrap();
    assert_eq!(login.generation(), 2);
    assert!(matches!(
        next(&mut events).await,
        NodeEvent::LoggedIn { .. }
    ));
    let again = serde_json::json!({"project": "game", "env": "prod", "uid": 42, "gen": 2,
                                   "reason": "admin", "message": "chargeback under review"});
    let ack = post(
        &receiver.local_addr().to_string(),
        "/kick",
        &again.to_string(),
    )
    .await;
    assert_eq!(ack["ack"], "not-older", "{ack}");
    assert_eq!(a.generation(&key()), Some(2));

    // Without a reason the kick carries no message; nothing online is released false.
    let body = serde_json::json!({"project": "game", "env": "prod", "uid": 42});
    assert_eq!(admin_logout(&url, &body).await["released"], true);
    assert_eq!(
        next(&mut events).await,
        NodeEvent::Kicked {
            key: key(),
            generation: 2,
            reason: KickReason::Admin,
            message: None,
        }
    );
    let answer = admin_logout(&url, &body).await;
    assert_eq!(
        answer,
        serde_json::json!({"released": false, "gen": 2, "kicked": false, "kick_detail": null})
    );
    let quiet = timeout(HEARTBEAT * 6, events.recv()).await;
    assert!(quiet.is_err(), "unexpected event: {quiet:?}");
}

/// A login whose claim was in flight when an admin logout's kick came never goes online,
/// and its `Kicked` names the admin logout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_replaced_by_an_admin_logout_reports_its_reason() {
    let url = server().await;
    let (a, mut events, _receiver) = node(&url, "a").await;
    let in_flight = a.kick_handler().expect_login(&key());
    let mut early = unique_core::KickPayload::new(&key(), 7, KickReason::Admin);
    early.message = Some("abuse".into());
    a.kick_handler().handle(&early).await;

    let Err(NodeLoginError::Replaced(_)) = a.login(key()).await else {
        panic!("the login must be refused");
    };
    drop(in_flight);

    assert!(matches!(
        next(&mut events).await,
        NodeEvent::LoggedIn { .. }
    ));
    assert_eq!(
        next(&mut events).await,
        NodeEvent::Kicked {
            key: key(),
            generation: 1,
            reason: KickReason::Admin,
            message: Some("abuse".into()),
        }
    );
}

/// `Node::shutdown` releases the node's sessions on the server and stops its receiver: the
/// next kick cannot connect, and the server's record no longer names this node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_the_sessions_and_stops_the_receiver() {
    let url = server().await;
    let (a, _events, receiver) = node(&url, "a").await;
    let addr = receiver.local_addr();
    a.login(key()).await.unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_ok());

    let report = a.shutdown().await;

    assert_eq!((report.released, report.unreleased), (1, 0));
    let view = a.transport().current(&key()).await.unwrap();
    assert_eq!((view.exists, view.owner), (true, None), "tombstoned");
    // The receiver stops accepting once the handler is closed; `close` then finds it done.
    timeout(WAIT, async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the receiver stops listening");
    receiver.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_slot_of_a_user_is_its_own_session_on_the_node() {
    let url = server().await;
    let (a, mut a_events, _a_receiver) = node(&url, "a").await;
    let (b, _b_events, _b_receiver) = node(&url, "b").await;
    let (pc, mobile) = (key().with_slot("pc"), key().with_slot("mobile"));
    for k in [key(), pc.clone(), mobile.clone()] {
        assert_eq!(a.login(k).await.unwrap().generation(), 1, "own gens");
        assert!(matches!(
            next(&mut a_events).await,
            NodeEvent::LoggedIn { .. }
        ));
    }

    // A login on "pc" elsewhere kicks A's "pc" session and nothing else of the user.
    assert_eq!(b.login(pc.clone()).await.unwrap().generation(), 2);
    assert_eq!(
        a_events.try_recv().ok(),
        Some(NodeEvent::Kicked {
            key: pc.clone(),
            generation: 1,
            reason: KickReason::LoginElsewhere,
            message: None,
        })
    );
    assert_eq!(a.generation(&pc), None);
    assert_eq!(
        (a.generation(&key()), a.generation(&mobile)),
        (Some(1), Some(1))
    );

    // An operator lists the user's sessions and logs the "mobile" one out.
    let operator = HttpTransport::new(&url).unwrap();
    let listed = operator.sessions(&key().user()).await.unwrap();
    let summary: Vec<(&str, i64, &str)> = listed
        .iter()
        .map(|s| (s.slot.as_str(), s.generation, s.owner.cluster.as_str()))
        .collect();
    assert_eq!(summary, [("", 1, "a"), ("mobile", 1, "a"), ("pc", 2, "b")]);
    let logout = unique_core::LogoutInput {
        key: mobile.clone(),
        reason: Some("lost phone".into()),
    };
    let outcome = operator.logout(&logout).await.unwrap();
    assert!(outcome.released && outcome.kicked, "{outcome:?}");
    assert_eq!(
        a_events.try_recv().ok(),
        Some(NodeEvent::Kicked {
            key: mobile.clone(),
            generation: 1,
            reason: KickReason::Admin,
            message: Some("lost phone".into()),
        })
    );
    let left = operator.sessions(&key().user()).await.unwrap();
    assert_eq!(
        left.iter().map(|s| s.slot.as_str()).collect::<Vec<_>>(),
        ["", "pc"]
    );

    // Heartbeats over the user's remaining slots keep A's default-slot session.
    tokio::time::sleep(HEARTBEAT * 4).await;
    assert_eq!(a.generation(&key()), Some(1));
    assert!(a_events.try_recv().is_err(), "no eviction, no other kick");
}
