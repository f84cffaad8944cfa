//! The kick receiver over real HTTP: every status, the body limit both ways, single-flight
//! across connections, mounting as a service, graceful shutdown.

mod common;

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use unique_client::{KickHandler, KickOptions, Sessions};
use unique_core::{Key, ValidationLimits};
use unique_kickrecv::{KickService, MAX_BODY_BYTES, serve};

/// A node: its sessions, its destroy log, and a receiver serving them.
struct Node {
    addr: SocketAddr,
    sessions: Sessions,
    destroyed: Arc<Mutex<Vec<(Key, i64)>>>,
    /// One message each time the handler has read the local gen of a kick.
    asked: tokio::sync::mpsc::UnboundedReceiver<()>,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Node {
    /// `hold` makes every destroy wait until it is notified.
    async fn start(options: KickOptions, hold: Option<Arc<Notify>>) -> Self {
        let sessions = Sessions::new();
        let destroyed = Arc::new(Mutex::new(Vec::new()));
        let (asked_tx, asked) = tokio::sync::mpsc::unbounded_channel();
        let handler = {
            let (read, remove, log) = (sessions.clone(), sessions.clone(), Arc::clone(&destroyed));
            KickHandler::new(
                move |k| {
                    let local = read.generation(k);
                    let _ = asked_tx.send(());
                    local
                },
                move |k: Key, g| {
                    let (remove, log, hold) = (remove.clone(), Arc::clone(&log), hold.clone());
                    async move {
                        if let Some(hold) = hold {
                            hold.notified().await;
                        }
                        remove.remove_if(&k, g);
                        log.lock().unwrap().push((k, g));
                    }
                },
                options,
            )
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(serve(listener, handler, async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            sessions,
            destroyed,
            asked,
            stop: Some(stop),
            served,
        }
    }

    async fn plain() -> Self {
        Self::start(KickOptions::default(), None).await
    }
}

fn key() -> Key {
    Key::new("game", "prod", 42)
}

fn kick_json(generation: i64) -> String {
    format!(r#"{{"project":"game","env":"prod","uid":42,"gen":{generation}}}"#)
}

/// One raw HTTP/1.1 exchange on a fresh connection: returns status, head and body.
async fn exchange(addr: SocketAddr, raw: &[u8]) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8(buf).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a full response");
    let status = head[9..12].parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

async fn post(addr: SocketAddr, body: &str) -> (u16, String) {
    let raw = format!(
        "POST /kick HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, _, body) = exchange(addr, raw.as_bytes()).await;
    (status, body)
}

#[tokio::test]
async fn an_older_session_is_destroyed_then_200() {
    let node = Node::plain().await;
    node.sessions.insert(key(), 1);
    assert_eq!(
        post(node.addr, &kick_json(2)).await,
        (200, r#"{"ack":"destroyed"}"#.into())
    );
    assert_eq!(*node.destroyed.lock().unwrap(), [(key(), 1)]);
    assert!(node.sessions.is_empty());
}

#[tokio::test]
async fn nothing_to_destroy_is_200_too() {
    let node = Node::plain().await;
    assert_eq!(
        post(node.addr, &kick_json(2)).await,
        (200, r#"{"ack":"no-session"}"#.into())
    );
    node.sessions.insert(key(), 5);
    assert_eq!(
        post(node.addr, &kick_json(5)).await,
        (200, r#"{"ack":"not-older"}"#.into())
    );
    assert_eq!(
        post(node.addr, &kick_json(4)).await,
        (200, r#"{"ack":"not-older"}"#.into())
    );
    assert_eq!(
        node.sessions.generation(&key()),
        Some(5),
        "a newer session is never killed"
    );
    assert!(node.destroyed.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_destroy_past_its_timeout_is_503() {
    let hold = Arc::new(Notify::new());
    let node = Node::start(
        KickOptions::default().destroy_timeout(Duration::from_millis(100)),
        Some(Arc::clone(&hold)),
    )
    .await;
    node.sessions.insert(key(), 1);
    let (status, body) = post(node.addr, &kick_json(2)).await;
    assert_eq!(status, 503);
    assert_eq!(
        body,
        r#"{"error":"unavailable","message":"destroy timed out"}"#
    );
    // Once the destroy completes, the next kick finds nothing older: 200.
    hold.notify_one();
    let (status, _) = post(node.addr, &kick_json(2)).await;
    assert_eq!(status, 200);
    assert_eq!(*node.destroyed.lock().unwrap(), [(key(), 1)]);
}

#[tokio::test]
async fn malformed_payloads_are_400() {
    let node = Node::plain().await;
    node.sessions.insert(key(), 1);
    let cases = [
        ("", "malformed kick"),
        ("not json", "malformed kick"),
        (
            r#"{"project":"game","env":"prod","uid":42}"#,
            "missing field `gen`",
        ),
        (
            r#"{"project":"game","env":"prod","uid":"42","gen":2}"#,
            "invalid type",
        ),
        (
            r#"{"project":"game","env":"prod","uid":42.5,"gen":2}"#,
            "invalid type",
        ),
        ("[1,2]", "malformed kick"),
    ];
    for (body, needle) in cases {
        let (status, reply) = post(node.addr, body).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            reply.starts_with(r#"{"error":"invalid_params","message":"#),
            "{reply}"
        );
        assert!(reply.contains(needle), "{body}: {reply}");
    }
    assert!(node.destroyed.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unknown_field_is_ignored_and_the_kick_applies() {
    let node = Node::plain().await;
    node.sessions.insert(key(), 1);
    let body = r#"{"project":"game","env":"prod","uid":42,"gen":2,"extra":1,"why":{"a":[]}}"#;
    assert_eq!(
        post(node.addr, body).await,
        (200, r#"{"ack":"destroyed"}"#.into())
    );
    assert_eq!(*node.destroyed.lock().unwrap(), [(key(), 1)]);
    // The four named fields stay required, extra fields or not.
    let (status, reply) = post(
        node.addr,
        r#"{"project":"game","env":"prod","uid":42,"extra":1}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert!(reply.contains("missing field `gen`"), "{reply}");
}

#[tokio::test]
async fn invalid_keys_are_400() {
    let node = Node::plain().await;
    let long = "p".repeat(65);
    let cases = [
        (
            r#"{"project":"game","env":"prod","uid":0,"gen":2}"#.to_owned(),
            "uid must be >= 1",
        ),
        (
            r#"{"project":"ga#me","env":"prod","uid":1,"gen":2}"#.to_owned(),
            "project must not contain '#'",
        ),
        (
            r#"{"project":"game","env":"","uid":1,"gen":2}"#.to_owned(),
            "env must not be empty",
        ),
        (
            r#"{"project":"game","env":"pr\u0007od","uid":1,"gen":2}"#.to_owned(),
            "env must not contain control characters",
        ),
        (
            format!(r#"{{"project":"{long}","env":"prod","uid":1,"gen":2}}"#),
            "project must be at most 64 characters",
        ),
    ];
    for (body, message) in cases {
        let (status, reply) = post(node.addr, &body).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(
            reply,
            format!(r#"{{"error":"invalid_params","message":"{message}"}}"#)
        );
    }
}

/// A handler over `sessions` that destroys by removing the session.
fn sessions_handler(sessions: &Sessions) -> KickHandler {
    let (read, remove) = (sessions.clone(), sessions.clone());
    KickHandler::new(
        move |k: &Key| read.generation(k),
        move |k: Key, g| {
            remove.remove_if(&k, g);
            async {}
        },
        KickOptions::default(),
    )
}

#[tokio::test]
async fn raised_validation_limits_accept_a_long_project_through_serve_with() {
    let long = "p".repeat(100);
    let kick = format!(r#"{{"project":"{long}","env":"prod","uid":1,"gen":2}}"#);
    let long_key = Key::new(long.as_str(), "prod", 1);

    // The default limits (64 bytes) refuse the kick and destroy nothing.
    let sessions = Sessions::new();
    sessions.insert(long_key.clone(), 1);
    let addr = common::serve_service(KickService::new(sessions_handler(&sessions))).await;
    assert_eq!(
        post(addr, &kick).await,
        (
            400,
            r#"{"error":"invalid_params","message":"project must be at most 64 characters"}"#
                .into()
        )
    );
    assert_eq!(sessions.generation(&long_key), Some(1));

    // Limits raised to match a server that accepts longer names: the kick applies.
    let raised = ValidationLimits {
        tenant: 128,
        ..ValidationLimits::default()
    };
    let addr = common::serve_service(
        KickService::new(sessions_handler(&sessions)).validation_limits(raised),
    )
    .await;
    assert_eq!(
        post(addr, &kick).await,
        (200, r#"{"ack":"destroyed"}"#.into())
    );
    assert!(sessions.is_empty());
}

#[tokio::test]
async fn other_methods_are_405() {
    let node = Node::plain().await;
    for method in ["GET", "PUT", "DELETE"] {
        let raw = format!(
            "{method} /kick HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        let (status, head, body) = exchange(node.addr, raw.as_bytes()).await;
        assert_eq!(status, 405, "{method}");
        assert!(
            head.to_ascii_lowercase().contains("\r\nallow: post"),
            "{head}"
        );
        assert!(body.contains(r#""error":"method_not_allowed""#), "{body}");
    }
}

/// A JSON kick padded with spaces to exactly `len` bytes.
fn padded_kick(len: usize) -> String {
    let json = kick_json(2);
    format!("{json}{}", " ".repeat(len - json.len()))
}

#[tokio::test]
async fn the_body_limit_is_4_kib_by_content_length() {
    let node = Node::plain().await;
    node.sessions.insert(key(), 1);
    let (status, body) = post(node.addr, &padded_kick(MAX_BODY_BYTES + 1)).await;
    assert_eq!((status, body.contains("too_large")), (413, true), "{body}");
    assert!(node.destroyed.lock().unwrap().is_empty());
    assert_eq!(post(node.addr, &padded_kick(MAX_BODY_BYTES)).await.0, 200);

    // A huge declared length is refused before any body byte is read.
    let raw =
        "POST /kick HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000\r\nconnection: close\r\n\r\n";
    assert_eq!(exchange(node.addr, raw.as_bytes()).await.0, 413);
}

/// Encodes `body` as HTTP/1.1 chunks of at most 1000 bytes.
fn chunked(body: &str) -> String {
    let mut out = String::new();
    for chunk in body.as_bytes().chunks(1000) {
        let text = std::str::from_utf8(chunk).unwrap();
        write!(out, "{:x}\r\n{text}\r\n", chunk.len()).unwrap();
    }
    out.push_str("0\r\n\r\n");
    out
}

#[tokio::test]
async fn the_body_limit_is_enforced_while_reading_a_chunked_body() {
    let node = Node::plain().await;
    node.sessions.insert(key(), 1);
    let head =
        "POST /kick HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    let raw = format!("{head}{}", chunked(&padded_kick(MAX_BODY_BYTES + 1)));
    assert_eq!(exchange(node.addr, raw.as_bytes()).await.0, 413);
    assert!(node.destroyed.lock().unwrap().is_empty());

    let raw = format!("{head}{}", chunked(&padded_kick(MAX_BODY_BYTES)));
    let (status, _, body) = exchange(node.addr, raw.as_bytes()).await;
    assert_eq!((status, body.as_str()), (200, r#"{"ack":"destroyed"}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_kicks_over_http_destroy_once() {
    let hold = Arc::new(Notify::new());
    let node = Node::start(KickOptions::default(), Some(Arc::clone(&hold))).await;
    node.sessions.insert(key(), 1);
    let kicks: Vec<_> = (0..16)
        .map(|i| {
            let addr = node.addr;
            tokio::spawn(async move { post(addr, &kick_json(2 + i % 2)).await })
        })
        .collect();
    // Release the (single) destroy only after every kick has read the local gen: each has
    // then joined the running destroy, so every answer is `destroyed`.
    let mut node = node;
    for _ in 0..16 {
        node.asked.recv().await.unwrap();
    }
    hold.notify_one();
    for k in kicks {
        let (status, body) = k.await.unwrap();
        assert_eq!((status, body.as_str()), (200, r#"{"ack":"destroyed"}"#));
    }
    assert_eq!(*node.destroyed.lock().unwrap(), [(key(), 1)]);
}

#[tokio::test]
async fn mounts_as_a_service_inside_another_server() {
    let sessions = Sessions::new();
    sessions.insert(key(), 3);
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
    let kicks = KickService::new(handler);
    // An application server that routes `/internal/kick` to the kick service via the tower
    // trait and answers everything else itself.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (kicks, c) = (kicks.clone(), Arc::clone(&c));
            let app = service_fn(move |req: Request<Incoming>| {
                let (mut kicks, c) = (kicks.clone(), Arc::clone(&c));
                async move {
                    if req.uri().path() == "/internal/kick" {
                        c.fetch_add(1, Ordering::SeqCst);
                        tower_service::Service::call(&mut kicks, req).await
                    } else {
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"app"))))
                    }
                }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), app));
        }
    });
    let raw = format!(
        "POST /internal/kick HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
        kick_json(4).len(),
        kick_json(4)
    );
    let (status, _, body) = exchange(addr, raw.as_bytes()).await;
    assert_eq!((status, body.as_str()), (200, r#"{"ack":"destroyed"}"#));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(sessions.is_empty());
    let (status, _, body) = exchange(
        addr,
        b"GET /other HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "app"));
}

#[tokio::test]
async fn the_service_takes_any_body_type() {
    let handler = KickHandler::new(|_: &Key| None, |_: Key, _| async {}, KickOptions::default());
    let service = KickService::new(handler);
    let request = Request::post("/")
        .body(Full::new(Bytes::from(kick_json(2))))
        .unwrap();
    let response = service.respond(request).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn shutdown_stops_accepting_and_returns() {
    let mut node = Node::plain().await;
    assert_eq!(post(node.addr, &kick_json(2)).await.0, 200);
    node.stop.take().unwrap().send(()).unwrap();
    (&mut node.served).await.unwrap().unwrap();
    assert!(
        TcpStream::connect(node.addr).await.is_err(),
        "listener closed"
    );
}
