//! The lease routes over real HTTP: the whole lease contract through `HttpDirectory`
//! against an in-process service on a `MemoryDirectory` whose clock the cases move, then
//! each route's answers and refusals, authentication, and project isolation.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use unique_arbiter_http::{ArbiterService, Grant, Tokens, serve};
use unique_client_http::{HttpDirectory, HttpTransport};
use unique_core::Arbiter;
use unique_lease::{Clock, Directory, LeaseError, ManualClock, MemoryDirectory, NodeRegistry};
use unique_lease_contract::{self as contract, Subject};
use unique_store_memory::MemoryStore;
use unique_wire::{LeaseRoute, MAX_LEASE_ID_CHARS, MAX_LEASE_TTL_MS};

use common::FailingLeases;
#[path = "lease_contract/calls.rs"]
mod calls;
#[path = "lease_contract/refusals.rs"]
mod refusals;
use calls::{assert_invalid, call, ensure_body, ok, post, token_body};

/// Project `game`, every env.
const GAME: &str = "lease-test-token-game-0123";
/// Project `chat`, every env.
const CHAT: &str = "lease-test-token-chat-0123";
/// Project `game`, env `prod` only: not enough for leases, which have no env.
const GAME_PROD: &str = "lease-test-token-game-prod";

fn tokens() -> Tokens {
    let mut tokens = Tokens::new();
    tokens
        .add(GAME, Grant::new("game", vec!["game".into()], None))
        .unwrap()
        .add(CHAT, Grant::new("chat", vec!["chat".into()], None))
        .unwrap()
        .add(
            GAME_PROD,
            Grant::new("game-prod", vec!["game".into()], Some(vec!["prod".into()])),
        )
        .unwrap();
    tokens
}

/// A running service with tokens and a lease directory; stops when dropped.
struct Server {
    addr: SocketAddr,
    clock: Arc<ManualClock>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Server {
    async fn start() -> Self {
        Self::start_on(|clock| MemoryDirectory::with_clock(clock)).await
    }

    async fn start_on<L: unique_arbiter_http::LeaseService>(
        leases: impl FnOnce(Arc<ManualClock>) -> L,
    ) -> Self {
        let clock = Arc::new(ManualClock::new(contract::start_time()));
        let service = ArbiterService::new(Arbiter::new(MemoryStore::new()))
            .with_tokens(tokens())
            .with_leases(Arc::new(leases(Arc::clone(&clock))));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, service, async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            clock,
            _stop: stop,
        }
    }

    fn directory(&self, token: &str, project: &str) -> HttpDirectory {
        HttpTransport::builder(format!("http://{}", self.addr))
            .bearer_token(token)
            .build()
            .unwrap()
            .directory(project)
    }
}

/// A fresh service per case; the subject's clock is the server's store clock.
async fn over_http() -> Subject {
    let server = Server::start().await;
    let directory = Arc::new(server.directory(GAME, "game"));
    let clock = Arc::clone(&server.clock);
    Subject::new(directory, clock)
        .with_max_id_len(MAX_LEASE_ID_CHARS)
        .keep_alive(Arc::new(server))
}

// Every case of the contract, through the routes. Ids over HTTP are at most
// MAX_LEASE_ID_CHARS: the server stores `<project>#<room>` under unique-lease's 256 characters.
unique_lease_contract::lease_contract_tests!(over_http);

/// D9 over HTTP: rooms and nodes of [`MAX_LEASE_ID_CHARS`] work and do not collide with
/// their prefixes; one character more is `InvalidParams`, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http_ids_at_their_length_limit_work() {
    let server = Server::start().await;
    let d = server.directory(GAME, "game");
    let now = server.clock.now();
    let mut room = String::from("d9:room/é#");
    room.push_str(&"r".repeat(MAX_LEASE_ID_CHARS - room.len()));
    let node = "n".repeat(MAX_LEASE_ID_CHARS);
    let ttl = Duration::from_secs(10);
    let lease = d.ensure_owner(&room, &node, now, ttl).await.unwrap();
    assert!(lease.is_held_by(&node), "{lease:?}");
    assert!(d.lookup(&room).await.unwrap().unwrap().same_holding(&lease));
    assert_eq!(d.lookup("d9:room/é#").await.unwrap(), None);
    assert!(
        d.verify_owner(&room, &node, &lease.lease_token, now)
            .await
            .unwrap()
    );
    assert!(
        d.release_owner(&room, &node, &lease.lease_token)
            .await
            .unwrap()
    );
    let registered = d.register_node(&node, "10.0.0.7:7000", ttl).await.unwrap();
    assert_eq!(registered.node_id, node);

    let long = "x".repeat(MAX_LEASE_ID_CHARS + 1);
    let refused = d.ensure_owner(&long, "a", now, ttl).await.unwrap_err();
    assert!(
        matches!(&refused, LeaseError::InvalidParams(m) if m == "room_id is longer than 191 characters"),
        "{refused}"
    );
    let refused = d.ensure_owner("r", &long, now, ttl).await.unwrap_err();
    assert!(refused.is_invalid_params(), "{refused}");
    let refused = d
        .register_node(&long, "10.0.0.7:7000", ttl)
        .await
        .unwrap_err();
    assert!(refused.is_invalid_params(), "{refused}");
    assert_eq!(d.lookup(&long[..MAX_LEASE_ID_CHARS]).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_routes_grant_renew_and_report_the_holder() {
    let server = Server::start().await;
    let addr = server.addr;
    let lookup = json!({"project": "game", "room": "lobby"});
    assert_eq!(
        ok(addr, LeaseRoute::Lookup, &lookup).await,
        json!({"lease": null})
    );

    // A grant: the caller, epoch 1, the whole ttl (the store's clock stands still).
    let granted = ok(
        addr,
        LeaseRoute::Ensure,
        &ensure_body("game", "lobby", "n1", 15_000),
    )
    .await;
    let token = granted["token"].clone();
    assert_eq!(
        granted,
        json!({"room": "lobby", "node": "n1", "token": token, "epoch": 1, "ttl_left_ms": 15_000})
    );
    assert_eq!(
        ok(addr, LeaseRoute::Lookup, &lookup).await,
        json!({"lease": granted})
    );
    // A renewal keeps token and epoch and never shortens.
    server.clock.advance(Duration::from_secs(5));
    let renewed = ok(
        addr,
        LeaseRoute::Ensure,
        &ensure_body("game", "lobby", "n1", 1_000),
    )
    .await;
    assert_eq!(
        renewed,
        json!({"room": "lobby", "node": "n1", "token": token, "epoch": 1, "ttl_left_ms": 10_000})
    );
    // Another node is told who holds it; nothing changes.
    let elsewhere = ok(
        addr,
        LeaseRoute::Ensure,
        &ensure_body("game", "lobby", "n2", 15_000),
    )
    .await;
    assert_eq!(elsewhere, renewed);
    // Verify: the holder with its token only.
    for (node, token, valid) in [
        ("n1", token.clone(), true),
        ("n2", token.clone(), false),
        ("n1", json!("another-token"), false),
    ] {
        let answer = ok(
            addr,
            LeaseRoute::Verify,
            &token_body("game", "lobby", node, &token),
        )
        .await;
        assert_eq!(answer, json!({"valid": valid}), "{node} {token}");
    }
    expire_take_over_and_release(&server, &token).await;
}

/// The holding of `n1` under `token` in room `lobby` (10 s left) expires, is taken over,
/// and released by token.
async fn expire_take_over_and_release(server: &Server, token: &Value) {
    let addr = server.addr;
    let lookup = json!({"project": "game", "room": "lobby"});
    // Expired: the lookup still shows it, with nothing left; verify is false; a takeover
    // gets a new token and a higher epoch.
    server.clock.advance(Duration::from_secs(10));
    let expired = ok(addr, LeaseRoute::Lookup, &lookup).await;
    assert_eq!(expired["lease"]["ttl_left_ms"], 0, "{expired}");
    assert_eq!(&expired["lease"]["token"], token, "{expired}");
    let stale = token_body("game", "lobby", "n1", token);
    assert_eq!(
        ok(addr, LeaseRoute::Verify, &stale).await,
        json!({"valid": false})
    );
    let takeover = ok(
        addr,
        LeaseRoute::Ensure,
        &ensure_body("game", "lobby", "n2", 15_000),
    )
    .await;
    assert_eq!(
        (&takeover["node"], &takeover["epoch"]),
        (&json!("n2"), &json!(2)),
        "{takeover}"
    );
    assert_ne!(&takeover["token"], token);
    // Release by token: the old holding's token frees nothing, the holder's does, once.
    assert_eq!(
        ok(addr, LeaseRoute::Release, &stale).await,
        json!({"released": false})
    );
    let current = token_body("game", "lobby", "n2", &takeover["token"]);
    assert_eq!(
        ok(addr, LeaseRoute::Release, &current).await,
        json!({"released": true})
    );
    assert_eq!(
        ok(addr, LeaseRoute::Release, &current).await,
        json!({"released": false})
    );
    assert_eq!(
        ok(addr, LeaseRoute::Lookup, &lookup).await,
        json!({"lease": null})
    );
    let again = ok(
        addr,
        LeaseRoute::Ensure,
        &ensure_body("game", "lobby", "n1", 15_000),
    )
    .await;
    assert_eq!(
        again["epoch"], 3,
        "a release does not reset the epoch: {again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_routes_register_read_and_remove() {
    let server = Server::start().await;
    let addr = server.addr;
    // Nodes: register, read (its age and what is left add up to the ttl), replace,
    // deregister (twice, and an unknown node: always removed), read as absent.
    let node = json!({"project": "game", "node": "n1"});
    assert_eq!(
        ok(addr, LeaseRoute::LookupNode, &node).await,
        json!({"node": null})
    );
    let register =
        json!({"project": "game", "node": "n1", "addr": "10.0.0.7:7000", "ttl_ms": 15_000});
    let registered = ok(addr, LeaseRoute::RegisterNode, &register).await;
    assert_eq!(
        (&registered["node"], &registered["addr"]),
        (&json!("n1"), &json!("10.0.0.7:7000"))
    );
    let spans = |answer: &Value| {
        answer["age_ms"].as_u64().unwrap() + answer["ttl_left_ms"].as_u64().unwrap()
    };
    assert_eq!(spans(&registered), 15_000, "{registered}");
    server.clock.advance(Duration::from_secs(4));
    let found = ok(addr, LeaseRoute::LookupNode, &node).await;
    assert_eq!(found["node"]["addr"], "10.0.0.7:7000", "{found}");
    assert!(
        found["node"]["age_ms"].as_u64().unwrap() >= 4_000,
        "{found}"
    );
    assert_eq!(spans(&found["node"]), 15_000, "{found}");
    let moved = json!({"project": "game", "node": "n1", "addr": "10.0.0.8:7000", "ttl_ms": 15_000});
    ok(addr, LeaseRoute::RegisterNode, &moved).await;
    let found = ok(addr, LeaseRoute::LookupNode, &node).await;
    assert_eq!(found["node"]["addr"], "10.0.0.8:7000", "{found}");
    for body in [&node, &node, &json!({"project": "game", "node": "never"})] {
        assert_eq!(
            ok(addr, LeaseRoute::DeregisterNode, body).await,
            json!({"removed": true})
        );
    }
    assert_eq!(
        ok(addr, LeaseRoute::LookupNode, &node).await,
        json!({"node": null})
    );
    // A registration expires on the store's clock.
    ok(addr, LeaseRoute::RegisterNode, &register).await;
    server.clock.advance(Duration::from_secs(15));
    assert_eq!(
        ok(addr, LeaseRoute::LookupNode, &node).await,
        json!({"node": null})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_need_a_token_of_the_project_with_every_env() {
    let server = Server::start().await;
    let addr = server.addr;
    let bodies = [
        (LeaseRoute::Ensure, ensure_body("game", "r", "n", 1_000)),
        (
            LeaseRoute::Verify,
            token_body("game", "r", "n", &json!("t")),
        ),
        (
            LeaseRoute::Release,
            token_body("game", "r", "n", &json!("t")),
        ),
        (LeaseRoute::Lookup, json!({"project": "game", "room": "r"})),
        (
            LeaseRoute::RegisterNode,
            json!({"project": "game", "node": "n", "addr": "10.0.0.7:7000", "ttl_ms": 1_000}),
        ),
        (
            LeaseRoute::LookupNode,
            json!({"project": "game", "node": "n"}),
        ),
        (
            LeaseRoute::DeregisterNode,
            json!({"project": "game", "node": "n"}),
        ),
    ];
    for (route, body) in &bodies {
        let route = *route;
        for token in [None, Some("unknown-token-0123456789")] {
            let answer = post(addr, route, token, body).await;
            assert_eq!(
                answer.status,
                StatusCode::UNAUTHORIZED,
                "{route:?} {token:?}"
            );
            assert_eq!(answer.challenge.as_deref(), Some("Bearer"));
            assert_eq!(answer.body["error"], "unauthenticated");
        }
        for token in [CHAT, GAME_PROD] {
            let answer = post(addr, route, Some(token), body).await;
            assert_eq!(answer.status, StatusCode::FORBIDDEN, "{route:?} {token}");
            assert_eq!(answer.body["error"], "forbidden");
        }
        // Another method is 405 with Allow, like every route.
        let answer = call(addr, Method::GET, route.path(), Some(GAME), b"").await;
        assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED, "{route:?}");
        assert_eq!(answer.allow.as_deref(), Some("POST"));
        assert_eq!(answer.body["error"], "method_not_allowed");
    }
    // None of the refused calls wrote anything.
    assert_eq!(
        ok(
            addr,
            LeaseRoute::Lookup,
            &json!({"project": "game", "room": "r"})
        )
        .await,
        json!({"lease": null})
    );
    assert_eq!(
        ok(
            addr,
            LeaseRoute::LookupNode,
            &json!({"project": "game", "node": "n"})
        )
        .await,
        json!({"node": null})
    );
    // Through the client: a refused token is `Forbidden` (no retry fixes it).
    let refused = server
        .directory(CHAT, "game")
        .lookup("r")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, LeaseError::Forbidden(_)) && !refused.is_retryable(),
        "{refused}"
    );
    assert!(refused.to_string().contains("(403)"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_never_share_a_room_or_a_node() {
    let server = Server::start().await;
    let now = server.clock.now();
    let ttl = Duration::from_secs(15);
    let game = server.directory(GAME, "game");
    let chat = server.directory(CHAT, "chat");
    let a = game.ensure_owner("lobby", "a", now, ttl).await.unwrap();
    let b = chat.ensure_owner("lobby", "b", now, ttl).await.unwrap();
    assert!(a.is_held_by("a") && b.is_held_by("b"), "{a:?} {b:?}");
    assert_ne!(a.lease_token, b.lease_token);
    assert!(
        game.lookup("lobby")
            .await
            .unwrap()
            .unwrap()
            .same_holding(&a)
    );
    assert!(
        chat.lookup("lobby")
            .await
            .unwrap()
            .unwrap()
            .same_holding(&b)
    );
    // One holder per project: a second node of either project is told that project's holder.
    let c = game.ensure_owner("lobby", "c", now, ttl).await.unwrap();
    assert!(c.same_holding(&a), "{c:?}");
    let d = chat.ensure_owner("lobby", "d", now, ttl).await.unwrap();
    assert!(d.same_holding(&b), "{d:?}");
    // Neither project's token acts on the other's.
    assert!(
        !chat
            .verify_owner("lobby", "a", &a.lease_token, now)
            .await
            .unwrap()
    );
    assert!(
        !chat
            .release_owner("lobby", "a", &a.lease_token)
            .await
            .unwrap()
    );
    assert!(
        game.verify_owner("lobby", "a", &a.lease_token, now)
            .await
            .unwrap()
    );
    // Nodes likewise.
    game.register_node("n1", "10.0.0.7:7000", ttl)
        .await
        .unwrap();
    assert_eq!(chat.lookup_node("n1").await.unwrap(), None);
    chat.register_node("n1", "10.0.0.9:7000", ttl)
        .await
        .unwrap();
    chat.unregister_node("n1").await.unwrap();
    let kept = game.lookup_node("n1").await.unwrap().unwrap();
    assert_eq!(kept.grpc_addr, "10.0.0.7:7000");
    // A room whose name looks like another project's stored id stays in its own project.
    let tricky = game.ensure_owner("lobby#x", "e", now, ttl).await.unwrap();
    assert!(tricky.is_held_by("e"));
    assert!(chat.lookup("lobby#x").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_failures_keep_their_kind_across_http() {
    let server =
        Server::start_on(|clock| FailingLeases::new("game", MemoryDirectory::with_clock(clock)))
            .await;
    let addr = server.addr;
    for (room, status, code) in [
        ("down", StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        ("corrupt", StatusCode::INTERNAL_SERVER_ERROR, "corrupt"),
        ("broken", StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    ] {
        let answer = post(
            addr,
            LeaseRoute::Ensure,
            Some(GAME),
            &ensure_body("game", room, "n", 1_000),
        )
        .await;
        assert_eq!(answer.status, status, "{room}");
        let fields: Vec<&String> = answer.body.as_object().unwrap().keys().collect();
        assert_eq!(fields, ["error", "message"], "{}", answer.body);
        assert_eq!(answer.body["error"], code, "{room}");
    }
    let d = server.directory(GAME, "game");
    let now = server.clock.now();
    let ttl = Duration::from_secs(1);
    let down = d.ensure_owner("down", "n", now, ttl).await.unwrap_err();
    assert!(down.is_unavailable() && down.is_retryable(), "{down}");
    assert!(
        down.to_string().contains("lease store unreachable"),
        "{down}"
    );
    let corrupt = d.lookup("corrupt").await.unwrap_err();
    assert!(corrupt.is_corrupt(), "{corrupt}");
    let broken = d
        .register_node("broken", "10.0.0.7:7000", ttl)
        .await
        .unwrap_err();
    assert!(matches!(broken, LeaseError::Backend { .. }), "{broken}");
    assert!(
        broken.to_string().contains("epoch counter exhausted"),
        "{broken}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_without_leases_answers_501() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = ArbiterService::new(Arbiter::new(MemoryStore::new()));
    tokio::spawn(serve(listener, service, std::future::pending()));
    for route in LeaseRoute::ALL {
        let answer = post(addr, route, None, &json!({"project": "game", "room": "r"})).await;
        assert_eq!(answer.status, StatusCode::NOT_IMPLEMENTED, "{route:?}");
        assert_eq!(answer.body["error"], "not_implemented");
    }
    let d = HttpTransport::new(&format!("http://{addr}"))
        .unwrap()
        .directory("game");
    let e = d.lookup("r").await.unwrap_err();
    assert!(
        matches!(e, LeaseError::Backend { .. }) && !e.is_retryable(),
        "{e}"
    );
    assert!(e.to_string().contains("501"), "{e}");
    // The verify route answers 501 too through the client's own call.
    assert!(d.verify("r", "n", "t").await.is_err());
}

/// `HttpDirectory::verify` asks the server in one call and agrees with `verify_owner`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verify_route_agrees_with_verify_owner() {
    let server = Server::start().await;
    let d = server.directory(GAME, "game");
    let now = server.clock.now();
    let lease = d
        .ensure_owner("room", "a", now, Duration::from_secs(10))
        .await
        .unwrap();
    for (node, token) in [
        ("a", lease.lease_token.as_str()),
        ("b", lease.lease_token.as_str()),
        ("a", "other"),
    ] {
        assert_eq!(
            d.verify("room", node, token).await.unwrap(),
            d.verify_owner("room", node, token, now).await.unwrap(),
            "{node} {token}"
        );
    }
    server.clock.advance(Duration::from_secs(10));
    assert!(!d.verify("room", "a", &lease.lease_token).await.unwrap());
}
