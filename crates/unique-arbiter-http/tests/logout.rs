//! `POST /v1/logout` over real HTTP: only a token with the admin role, inside its scope, may
//! log a user out; the session is tombstoned (gen kept) and its node kicked with reason
//! `admin`, the gen after the session's and the operator's reason; a refused or invalid
//! request reads and writes nothing.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use unique_arbiter_http::{ArbiterService, Grant, Role, Tokens, serve};
use unique_core::{
    Arbiter, Key, KickOutcome, KickPayload, KickReason, Kicker, MAX_LOGOUT_REASON_CHARS, Store,
    async_trait,
};
mod common;

use common::CountingStore;

const ADMIN: &str = "game-admin-token-0123456789";
const PLAIN: &str = "game-plain-token-0123456789";
const CHAT_ADMIN: &str = "chat-admin-token-0123456789";
const ENDPOINT: &str = "http://127.0.0.1:9/node-a";

/// Records every kick and confirms it.
#[derive(Clone, Default)]
struct Recording(Arc<Mutex<Vec<(String, KickPayload)>>>);

#[async_trait]
impl Kicker for Recording {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, _: Duration) -> KickOutcome {
        self.0
            .lock()
            .unwrap()
            .push((endpoint.to_owned(), payload.clone()));
        KickOutcome::Confirmed
    }
}

impl Recording {
    fn kicks(&self) -> Vec<(String, KickPayload)> {
        self.0.lock().unwrap().clone()
    }
}

fn tokens() -> Tokens {
    let game = || vec!["game".to_owned()];
    let mut tokens = Tokens::new();
    tokens
        .add(
            ADMIN,
            Grant::new("game-admin", game(), None).with_role(Role::Admin),
        )
        .unwrap()
        .add(PLAIN, Grant::new("game-plain", game(), None))
        .unwrap()
        .add(
            CHAT_ADMIN,
            Grant::new("chat-admin", vec!["chat".into()], None).with_role(Role::Admin),
        )
        .unwrap();
    tokens
}

struct Server {
    addr: SocketAddr,
    store: Arc<CountingStore>,
    kicker: Recording,
}

async fn start(tokens: Option<Tokens>) -> Server {
    let store = Arc::new(CountingStore::default());
    let kicker = Recording::default();
    let arbiter = Arbiter::builder(Arc::clone(&store))
        .kicker(kicker.clone())
        .build();
    let mut service = ArbiterService::new(arbiter);
    if let Some(tokens) = tokens {
        service = service.with_tokens(tokens);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, service, std::future::pending()));
    Server {
        addr,
        store,
        kicker,
    }
}

impl Server {
    /// POSTs `body` (JSON text) to `path`; the status and the body as JSON.
    async fn post(&self, path: &str, token: Option<&str>, body: &str) -> (StatusCode, Value) {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut req = Request::post(path).header("host", "test");
        if let Some(token) = token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
        let res = sender.send_request(req).await.unwrap();
        let status = res.status();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn logout(&self, token: Option<&str>, body: &Value) -> (StatusCode, Value) {
        self.post("/v1/logout", token, &body.to_string()).await
    }

    /// Logs uid 7 of `game/prod` in from [`ENDPOINT`]; returns its gen.
    async fn login(&self, claim_id: &str) -> i64 {
        let claim = json!({"project": "game", "env": "prod", "uid": 7,
                           "owner": {"endpoint": ENDPOINT}, "claim_id": claim_id});
        let (status, body) = self
            .post("/v1/claim", Some(PLAIN), &claim.to_string())
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["gen"].as_i64().unwrap()
    }

    async fn current(&self) -> Value {
        let key = json!({"project": "game", "env": "prod", "uid": 7}).to_string();
        self.post("/v1/current", Some(PLAIN), &key).await.1
    }
}

fn logout(project: &str, reason: Option<&str>) -> Value {
    let mut body = json!({"project": project, "env": "prod", "uid": 7});
    if let Some(reason) = reason {
        body["reason"] = json!(reason);
    }
    body
}

fn answer(released: bool, generation: i64, kicked: bool) -> Value {
    json!({"released": released, "gen": generation, "kicked": kicked, "kick_detail": null})
}

#[tokio::test]
async fn an_admin_token_tombstones_the_session_and_kicks_its_node_with_the_reason() {
    let s = start(Some(tokens())).await;
    s.login("login-1").await;
    s.login("login-2").await; // the same endpoint: gen 2, no kick (self-replace)
    assert!(s.kicker.kicks().is_empty());

    let (status, body) = s
        .logout(Some(ADMIN), &logout("game", Some("chargeback \"42\"")))
        .await;

    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, answer(true, 2, true));
    assert_eq!(
        s.current().await,
        json!({"gen": 2, "owner": null, "exists": true}),
        "tombstoned, gen kept"
    );
    let mut expected = KickPayload::new(&Key::new("game", "prod", 7), 3, KickReason::Admin);
    expected.message = Some("chargeback \"42\"".into());
    assert_eq!(s.kicker.kicks(), [(ENDPOINT.to_owned(), expected)]);

    // Nothing online any more: released false, the tombstone's gen, no second kick.
    let (status, body) = s.logout(Some(ADMIN), &logout("game", None)).await;
    assert_eq!((status, body), (StatusCode::OK, answer(false, 2, false)));
    assert_eq!(s.kicker.kicks().len(), 1);
    // The next login gets the next gen.
    assert_eq!(s.login("login-3").await, 3);
}

#[tokio::test]
async fn without_a_reason_the_kick_has_no_message() {
    let s = start(Some(tokens())).await;
    s.login("login-1").await;

    let (status, body) = s.logout(Some(ADMIN), &logout("game", None)).await;

    assert_eq!((status, body), (StatusCode::OK, answer(true, 1, true)));
    let kicks = s.kicker.kicks();
    assert_eq!(kicks.len(), 1);
    assert_eq!(
        (
            &kicks[0].1.reason,
            &kicks[0].1.message,
            kicks[0].1.generation
        ),
        (&KickReason::Admin, &None, 2)
    );
}

#[tokio::test]
async fn no_session_is_released_false_with_no_kick() {
    let s = start(Some(tokens())).await;

    let (status, body) = s.logout(Some(ADMIN), &logout("game", Some("r"))).await;

    assert_eq!((status, body), (StatusCode::OK, answer(false, 0, false)));
    assert!(s.kicker.kicks().is_empty());
    assert_eq!(s.store.writes.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_token_without_the_admin_role_is_403_and_changes_nothing() {
    let s = start(Some(tokens())).await;
    s.login("login-1").await;
    let before = s.current().await;
    let touched = s.store.calls();

    let (status, body) = s.logout(Some(PLAIN), &logout("game", Some("r"))).await;

    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"], "forbidden");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("game-plain") && message.contains("admin"),
        "{message}"
    );
    assert!(!message.contains(PLAIN), "never the secret: {message}");
    assert_eq!(s.store.calls(), touched, "nothing read or written");
    assert!(s.kicker.kicks().is_empty());
    assert_eq!(s.current().await, before, "the session is still online");
}

#[tokio::test]
async fn an_admin_token_outside_its_scope_is_403_and_changes_nothing() {
    let s = start(Some(tokens())).await;
    s.login("login-1").await;
    let touched = s.store.calls();

    let (status, body) = s.logout(Some(CHAT_ADMIN), &logout("game", None)).await;

    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"], "forbidden");
    assert!(body["message"].as_str().unwrap().contains("chat-admin"));
    assert_eq!(s.store.calls(), touched, "nothing read or written");
    assert!(s.kicker.kicks().is_empty());
}

#[tokio::test]
async fn missing_or_unknown_tokens_are_401() {
    let s = start(Some(tokens())).await;
    for token in [None, Some("not-a-configured-token-0123")] {
        let (status, body) = s.logout(token, &logout("game", None)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
        assert_eq!(body["error"], "unauthenticated");
    }
    assert_eq!(s.store.calls(), 0);
}

#[tokio::test]
async fn invalid_bodies_are_400_and_touch_nothing() {
    let s = start(Some(tokens())).await;
    s.login("login-1").await;
    let touched = s.store.calls();
    let too_long = "x".repeat(MAX_LOGOUT_REASON_CHARS + 1);
    let key = |extra: Value| {
        let mut body = json!({"project": "game", "env": "prod", "uid": 7});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    // Refused by the parser (`true`: before any grant check, so for the non-admin token
    // too) or by the arbiter's rules (after the grant checks, as on every route).
    for (body, needle, parser) in [
        (
            key(json!({"reason": too_long})),
            "reason must be at most 256 characters",
            false,
        ),
        (
            key(json!({"reason": ""})),
            "reason must not be empty",
            false,
        ),
        (
            key(json!({"reason": "a\u{1b}[31m"})),
            "reason must not contain control characters",
            false,
        ),
        (
            json!({"project": "game", "env": "prod", "uid": 0}),
            "uid must be >= 1",
            false,
        ),
        (key(json!({"reason": 5})), "reason: invalid type", true),
        (key(json!({"device": "a"})), "unknown field `device`", true),
        (
            key(json!({"slot": "a#b"})),
            "slot must not contain '#'",
            false,
        ),
        (key(json!({"slot": 5})), "slot: invalid type", true),
        (
            json!({"project": "game", "env": "prod"}),
            "missing field `uid`",
            true,
        ),
    ] {
        let tokens: &[&str] = if parser { &[ADMIN, PLAIN] } else { &[ADMIN] };
        for &token in tokens {
            let (status, answer) = s.logout(Some(token), &body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
            assert_eq!(answer["error"], "invalid_params");
            let message = answer["message"].as_str().unwrap();
            assert!(message.contains(needle), "{body}: {message}");
        }
    }
    assert_eq!(s.store.calls(), touched, "nothing read or written");
    assert!(s.kicker.kicks().is_empty());
    let exactly = key(json!({"reason": "x".repeat(MAX_LOGOUT_REASON_CHARS)}));
    let (status, answer) = s.logout(Some(ADMIN), &exactly).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}

/// On a listener with no tokens every caller is trusted, as for every other route.
#[tokio::test]
async fn without_tokens_every_caller_may_log_users_out() {
    let s = start(None).await;
    let claim = json!({"project": "game", "env": "prod", "uid": 7,
                       "owner": {"endpoint": ENDPOINT}, "claim_id": "c"});
    let (status, _) = s.post("/v1/claim", None, &claim.to_string()).await;
    assert_eq!(status, StatusCode::OK);

    let (status, body) = s.logout(None, &logout("game", None)).await;

    assert_eq!((status, body), (StatusCode::OK, answer(true, 1, true)));
    let view = s.store.current(&Key::new("game", "prod", 7)).await.unwrap();
    assert!(view.exists && view.owner.is_none() && view.generation == 1);
}
