//! Signed kicks over real loopback HTTP: a real `HttpKicker` (and raw requests, for what a
//! kicker never sends) against a `KickService` with signing keys mounted on a real server.
//! A refused kick is 401 and never reaches the destroy callback.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use unique_client::{KickHandler, KickOptions, Sessions};
use unique_core::{Arbiter, ClaimInput, Key, KickDetail, KickOutcome, KickPayload, Kicker, Owner};
use unique_kick_http::HttpKicker;
use unique_kick_signature::{DEFAULT_WINDOW, Rejection, SigningKeys};
use unique_kickrecv::KickService;
use unique_store_memory::MemoryStore;

const A: &str = "key-a-0123456789abcdef0123456789abcdef";
const B: &str = "key-b-0123456789abcdef0123456789abcdef";
const WRONG: &str = "key-x-0123456789abcdef0123456789abcdef";

fn keys(list: &[&str]) -> SigningKeys {
    SigningKeys::new(list).unwrap()
}

fn key() -> Key {
    Key::new("game", "prod", 42)
}

fn kick_json(generation: i64) -> String {
    format!(r#"{{"project":"game","env":"prod","uid":42,"gen":{generation}}}"#)
}

/// A node holding a session at gen 1, whose receiver verifies with `receiver_keys`.
struct Node {
    addr: SocketAddr,
    sessions: Sessions,
    /// Every call of the destroy callback.
    destroyed: Arc<Mutex<Vec<(Key, i64)>>>,
}

impl Node {
    async fn start(receiver_keys: &[&str]) -> Self {
        let sessions = Sessions::new();
        sessions.insert(key(), 1);
        let destroyed = Arc::new(Mutex::new(Vec::new()));
        let handler = {
            let (read, remove, log) = (sessions.clone(), sessions.clone(), Arc::clone(&destroyed));
            KickHandler::new(
                move |k| read.generation(k),
                move |k: Key, g| {
                    remove.remove_if(&k, g);
                    log.lock().unwrap().push((k, g));
                    async {}
                },
                KickOptions::default(),
            )
        };
        let service = KickService::new(handler).signing_keys(keys(receiver_keys));
        let addr = common::serve_service(service).await;
        Self {
            addr,
            sessions,
            destroyed,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}/kick", self.addr)
    }

    /// The session at gen 1 is still here and destroy was never called.
    fn untouched(&self) {
        assert_eq!(self.sessions.generation(&key()), Some(1));
        assert!(self.destroyed.lock().unwrap().is_empty());
    }

    fn destroyed_once(&self) {
        assert_eq!(self.sessions.generation(&key()), None);
        assert_eq!(*self.destroyed.lock().unwrap(), [(key(), 1)]);
    }
}

/// POSTs `body` with `signature` (when given) on a fresh connection: status and body.
async fn post(addr: SocketAddr, signature: Option<&str>, body: &str) -> (u16, String) {
    let header = signature.map_or_else(String::new, |s| format!("unique-signature: {s}\r\n"));
    let raw = format!(
        "POST /kick HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{header}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8(buf).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a full response");
    (head[9..12].parse().unwrap(), body.to_owned())
}

/// POSTs `body` with `signature` and asserts the 401 `unauthenticated` answer naming `reason`.
async fn assert_refused(node: &Node, signature: Option<&str>, body: &str, reason: Rejection) {
    assert_eq!(
        post(node.addr, signature, body).await,
        (
            401,
            format!(r#"{{"error":"unauthenticated","message":"{reason}"}}"#)
        ),
        "signature {signature:?} over {body}"
    );
}

async fn kick_with(kicker_keys: Option<&[&str]>, node: &Node) -> KickOutcome {
    let mut builder = HttpKicker::builder();
    if let Some(list) = kicker_keys {
        builder = builder.signing_keys(keys(list));
    }
    let payload = KickPayload {
        project: "game".into(),
        env: "prod".into(),
        uid: 42,
        slot: String::new(),
        generation: 2,
        reason: unique_core::KickReason::LoginElsewhere,
        message: None,
    };
    builder
        .build()
        .unwrap()
        .kick(&node.endpoint(), &payload, Duration::from_secs(5))
        .await
}

#[tokio::test]
async fn a_correctly_signed_kick_destroys_the_session() {
    let node = Node::start(&[A]).await;
    let body = kick_json(2);
    let signature = keys(&[A]).sign(body.as_bytes(), SystemTime::now());
    assert_eq!(
        post(node.addr, Some(&signature), &body).await,
        (200, r#"{"ack":"destroyed"}"#.into())
    );
    node.destroyed_once();
}

#[tokio::test]
async fn a_kick_signed_by_the_http_kicker_is_confirmed() {
    let node = Node::start(&[A]).await;
    assert_eq!(kick_with(Some(&[A]), &node).await, KickOutcome::Confirmed);
    node.destroyed_once();
}

#[tokio::test]
async fn a_kick_signed_with_a_wrong_key_is_401() {
    let node = Node::start(&[A]).await;
    assert_eq!(
        kick_with(Some(&[WRONG]), &node).await,
        KickOutcome::Failed(KickDetail::Non2xx)
    );
    let body = kick_json(2);
    let forged = keys(&[WRONG]).sign(body.as_bytes(), SystemTime::now());
    assert_refused(&node, Some(&forged), &body, Rejection::BadSignature).await;
    node.untouched();
}

#[tokio::test]
async fn an_unsigned_kick_is_401() {
    let node = Node::start(&[A]).await;
    assert_eq!(
        kick_with(None, &node).await,
        KickOutcome::Failed(KickDetail::Non2xx)
    );
    assert_refused(&node, None, &kick_json(2), Rejection::Missing).await;
    node.untouched();
}

#[tokio::test]
async fn a_stale_or_future_signature_is_401() {
    let node = Node::start(&[A]).await;
    let body = kick_json(2);
    let beyond = DEFAULT_WINDOW + Duration::from_mins(1);
    let stale = keys(&[A]).sign(body.as_bytes(), SystemTime::now() - beyond);
    assert_refused(&node, Some(&stale), &body, Rejection::Stale).await;
    let future = keys(&[A]).sign(body.as_bytes(), SystemTime::now() + beyond);
    assert_refused(&node, Some(&future), &body, Rejection::Future).await;
    node.untouched();
}

#[tokio::test]
async fn a_body_changed_after_signing_is_401() {
    let node = Node::start(&[A]).await;
    let signed = kick_json(2);
    let signature = keys(&[A]).sign(signed.as_bytes(), SystemTime::now());
    // A valid header over another body: a higher gen, or the same JSON re-spaced.
    for tampered in [kick_json(3), kick_json(2).replace(',', ", ")] {
        assert_refused(&node, Some(&signature), &tampered, Rejection::BadSignature).await;
    }
    node.untouched();
}

#[tokio::test]
async fn a_malformed_signature_is_401() {
    let node = Node::start(&[A]).await;
    let body = kick_json(2);
    let good = keys(&[A]).sign(body.as_bytes(), SystemTime::now());
    let (t, v1) = good.split_once(',').unwrap();
    for malformed in [
        String::new(),
        "garbage".to_owned(),
        t.to_owned(),
        v1.to_owned(),
        format!("{t},v1=abcd"),
        format!("{t},{t},{v1}"),
    ] {
        assert_refused(&node, Some(&malformed), &body, Rejection::Malformed).await;
    }
    node.untouched();
}

#[tokio::test]
async fn rotation_the_receiver_accepts_any_of_its_keys() {
    // The kicker already signs with B; a receiver holding [A, B] accepts.
    let both = Node::start(&[A, B]).await;
    assert_eq!(kick_with(Some(&[B]), &both).await, KickOutcome::Confirmed);
    both.destroyed_once();
    // A receiver still holding only A refuses.
    let old = Node::start(&[A]).await;
    assert_eq!(
        kick_with(Some(&[B]), &old).await,
        KickOutcome::Failed(KickDetail::Non2xx)
    );
    let body = kick_json(2);
    let by_b = keys(&[B]).sign(body.as_bytes(), SystemTime::now());
    assert_eq!(post(old.addr, Some(&by_b), &body).await.0, 401);
    old.untouched();
}

/// Two logins through an `Arbiter` whose `HttpKicker` signs with `kicker_key`: the first
/// owner's endpoint is the node. Returns the second claim's outcome.
async fn second_login(kicker_key: &str, node: &Node) -> unique_core::ClaimOutcome {
    let kicker = HttpKicker::builder()
        .signing_keys(keys(&[kicker_key]))
        .build()
        .unwrap();
    let arbiter = Arbiter::builder(MemoryStore::new())
        .kicker(kicker)
        .kick_timeout(Duration::from_secs(5))
        .build();
    let claim = |endpoint: String, claim_id: &str| ClaimInput {
        key: key(),
        owner: Owner::new("eu", "c1", endpoint),
        claim_id: claim_id.into(),
    };
    let first = arbiter
        .claim(&claim(node.endpoint(), "login-1"))
        .await
        .unwrap();
    assert_eq!(first.generation, 1);
    arbiter
        .claim(&claim("http://127.0.0.1:1/other-node".into(), "login-2"))
        .await
        .expect("the claim goes on either way")
}

#[tokio::test]
async fn through_the_arbiter_a_signed_kick_is_confirmed() {
    let node = Node::start(&[A]).await;
    let outcome = second_login(A, &node).await;
    assert_eq!(
        (outcome.generation, outcome.kicked, outcome.kick_detail),
        (2, true, None)
    );
    node.destroyed_once();
}

#[tokio::test]
async fn through_the_arbiter_a_refused_kick_is_non_2xx_and_the_claim_fails_open() {
    let node = Node::start(&[A]).await;
    let outcome = second_login(WRONG, &node).await;
    assert_eq!(
        (outcome.generation, outcome.kicked, outcome.kick_detail),
        (2, false, Some(KickDetail::Non2xx))
    );
    // The old session survives the kick; its heartbeat evicts it (I5b).
    node.untouched();
}
