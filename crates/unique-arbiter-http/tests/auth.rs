//! Caller authentication over real HTTP: a missing or unknown token is 401, a key outside
//! the token's scope 403, and neither reaches the store; `/healthz` and `/readyz` stay open.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use unique_arbiter_http::{ArbiterService, Grant, Tokens, serve};
use unique_client::Transport;
use unique_client_http::HttpTransport;
use unique_core::{Arbiter, ClaimInput, Error, Key, Owner};
mod common;

use common::CountingStore;

const GAME_PROD: &str = "game-prod-token-0123456789";
const OPS: &str = "ops-token-0123456789abcdef";

fn tokens() -> Tokens {
    let mut tokens = Tokens::new();
    tokens
        .add(
            GAME_PROD,
            Grant::new("game-prod", vec!["game".into()], Some(vec!["prod".into()])),
        )
        .unwrap()
        .add(OPS, Grant::new("ops", vec!["*".into()], None))
        .unwrap();
    tokens
}

async fn start() -> (SocketAddr, Arc<CountingStore>) {
    let store = Arc::new(CountingStore::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = ArbiterService::new(Arbiter::new(Arc::clone(&store))).with_tokens(tokens());
    tokio::spawn(serve(listener, service, std::future::pending()));
    (addr, store)
}

struct Answer {
    status: StatusCode,
    challenge: Option<String>,
    body: Value,
}

async fn call(addr: SocketAddr, path: &str, token: Option<&str>, body: &Value) -> Answer {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::post(path).header("host", "test");
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let req = req
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap();
    let res = sender.send_request(req).await.unwrap();
    let status = res.status();
    let challenge = res
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        status,
        challenge,
        body,
    }
}

fn claim(project: &str, env: &str) -> Value {
    json!({
        "project": project, "env": env, "uid": 7,
        "owner": {"endpoint": "http://127.0.0.1:9/kick"},
        "claim_id": "login-1",
    })
}

fn key(project: &str, env: &str) -> Value {
    json!({"project": project, "env": env, "uid": 7})
}

fn release(project: &str, env: &str) -> Value {
    json!({"project": project, "env": env, "uid": 7, "gen": 1})
}

/// Every route, with the body each takes, for `project` / `env`.
fn every_route(project: &str, env: &str) -> [(&'static str, Value); 5] {
    [
        ("/v1/claim", claim(project, env)),
        ("/v1/current", key(project, env)),
        ("/v1/release", release(project, env)),
        ("/v1/logout", key(project, env)),
        ("/v1/sessions", key(project, env)),
    ]
}

#[tokio::test]
async fn missing_or_unknown_tokens_are_401_and_touch_nothing() {
    let (addr, store) = start().await;
    let unknown = "game-prod-token-0123456788";
    for token in [None, Some(unknown), Some("short")] {
        for (path, body) in every_route("game", "prod") {
            let answer = call(addr, path, token, &body).await;
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{path} {token:?}");
            assert_eq!(answer.body["error"], "unauthenticated");
            assert_eq!(answer.challenge.as_deref(), Some("Bearer"));
            let message = answer.body["message"].as_str().unwrap();
            assert!(!message.contains(unknown), "{message}");
        }
    }
    assert_eq!(store.calls(), 0, "nothing read or written");
}

#[tokio::test]
async fn keys_outside_the_scope_are_403_and_touch_nothing() {
    let (addr, store) = start().await;
    for (project, env) in [("game", "staging"), ("chat", "prod")] {
        for (path, body) in every_route(project, env) {
            let answer = call(addr, path, Some(GAME_PROD), &body).await;
            assert_eq!(
                answer.status,
                StatusCode::FORBIDDEN,
                "{path} {project}/{env}"
            );
            assert_eq!(answer.body["error"], "forbidden");
            let message = answer.body["message"].as_str().unwrap();
            assert!(message.contains("game-prod"), "names the token: {message}");
            assert!(!message.contains(GAME_PROD), "never the secret: {message}");
        }
    }
    assert_eq!(store.calls(), 0, "nothing read or written");
}

#[tokio::test]
async fn tokens_act_inside_their_scope() {
    let (addr, _store) = start().await;
    let first = call(addr, "/v1/claim", Some(GAME_PROD), &claim("game", "prod")).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(first.body["gen"], 1);
    // The same key through the all-projects token: a replay of the same login.
    let again = call(addr, "/v1/claim", Some(OPS), &claim("game", "prod")).await;
    assert_eq!(again.body["replayed"], true);
    let current = call(addr, "/v1/current", Some(OPS), &key("game", "prod")).await;
    assert_eq!(current.body["gen"], 1);
    let listed = call(addr, "/v1/sessions", Some(GAME_PROD), &key("game", "prod")).await;
    assert_eq!(listed.body["sessions"][0]["gen"], 1, "{}", listed.body);
    let other = call(addr, "/v1/claim", Some(OPS), &claim("chat", "eu")).await;
    assert_eq!(other.status, StatusCode::OK);
    let released = call(
        addr,
        "/v1/release",
        Some(GAME_PROD),
        &release("game", "prod"),
    )
    .await;
    assert_eq!(released.body, json!({"released": true}));
}

/// Probes need no token: `/healthz` answers without the store, `/readyz` reads it.
#[tokio::test]
async fn healthz_and_readyz_stay_open() {
    let (addr, store) = start().await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    for path in ["/healthz", "/readyz"] {
        let req = Request::get(path)
            .header("host", "test")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let res = sender.send_request(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok", "{path}");
    }
    assert_eq!(store.calls(), 1, "one readiness read");
}

#[tokio::test]
async fn the_http_transport_sends_its_token() {
    let (addr, store) = start().await;
    let base = format!("http://{addr}");
    let input = ClaimInput {
        key: Key::new("game", "prod", 9),
        owner: Owner::new("", "", "http://127.0.0.1:9/kick"),
        claim_id: "login-9".into(),
    };
    let with = |token: &str| {
        HttpTransport::builder(&base)
            .bearer_token(token)
            .build()
            .unwrap()
    };
    let outcome = with(GAME_PROD).claim(&input).await.unwrap();
    assert_eq!(outcome.generation, 1);
    let touched = store.calls();

    let anonymous = HttpTransport::new(&base).unwrap();
    let e = anonymous.claim(&input).await.unwrap_err();
    assert!(
        matches!(e, Error::Unauthenticated(_)) && !e.is_retryable(),
        "a missing token fails at once: {e}"
    );
    let outside = ClaimInput {
        key: Key::new("game", "staging", 9),
        ..input.clone()
    };
    let e = with(GAME_PROD).claim(&outside).await.unwrap_err();
    assert!(
        matches!(e, Error::Forbidden(_)) && !e.is_retryable(),
        "an out-of-scope key fails at once: {e}"
    );
    assert_eq!(store.calls(), touched, "refusals touch nothing");
}
