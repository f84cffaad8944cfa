//! The check in push mode, playing the server of a node's kick stream: a real Rust push
//! node (`unique_client` over `HttpTransport`) holding the keys keeps every pushed clause; one
//! without keys fails exactly the signature clauses; a hand-driven stream shows the server
//! side (hello first, pings, fresh ids, the ack route's answers, `closed` `shutdown` last).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use common::{
    KEY, PATIENCE, SIGNATURE_CLAUSES, assert_failed, keys, push_node, signature_clauses_failed,
    until_acked,
};
use http::header::{CONTENT_TYPE, HOST};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use unique_kick_signature::DEFAULT_WINDOW;
use unique_node_check::{Answer, Clause, NodeCheck, Report};
use unique_wire::push::{
    ClosedReason, KickAckAnswer, StreamLine, node_kicks_ack_path, node_kicks_path,
};

/// How many kicks a push run sends: every variant of every pushed clause.
const PUSHED_KICKS: u64 = 21;

fn push_check() -> (NodeCheck, SocketAddr) {
    let check = NodeCheck::push("127.0.0.1:0", keys()).unwrap();
    let addr = check.local_addr().unwrap().expect("push mode listens");
    (check, addr)
}

#[tokio::test]
async fn a_push_node_holding_the_keys_keeps_every_pushed_clause() {
    let (check, addr) = push_check();
    let (node, _events) = push_node(addr, "checked-node", Some(keys()));
    let report = check.run().await;
    assert!(report.passed(), "{report}");
    assert_eq!(check.clauses(), Clause::PUSHED);
    let text = report.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), Clause::PUSHED.len() + 1, "{text}");
    for (line, clause) in lines.iter().zip(Clause::PUSHED) {
        assert!(line.starts_with(&format!("PASS {clause} ")), "{line}");
    }
    assert_eq!(lines[Clause::PUSHED.len()], "all 10 clauses passed");
    // Every kick reached the node's own code and was acknowledged by it, over one stream.
    let status = until_acked(&node, PUSHED_KICKS).await;
    assert_eq!(
        (status.acked, status.connections),
        (PUSHED_KICKS, 1),
        "{status:?}"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn a_push_node_without_keys_fails_every_signature_clause() {
    let (check, addr) = push_check();
    let (node, _events) = push_node(addr, "unsigned-node", None);
    let report = check.run().await;
    assert_failed(&report, &SIGNATURE_CLAUSES);
    let unsigned = &report.results()[2];
    assert_eq!(
        unsigned.to_string(),
        "FAIL unsigned                a kick without Unique-Signature: expected 401, got 200"
    );
    let summary = signature_clauses_failed(Clause::PUSHED.len());
    assert!(report.to_string().ends_with(&summary), "{report}");
    node.shutdown().await;
}

/// A stream opened by hand: the lines it reads.
struct RawStream {
    body: Incoming,
    buffer: Vec<u8>,
}

impl RawStream {
    /// Opens node `node`'s stream on `addr`: its status, and the stream when 200.
    async fn open(addr: SocketAddr, node: &str) -> (StatusCode, Option<Self>) {
        let request = Request::get(node_kicks_path(node))
            .header(HOST, addr.to_string())
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = exchange(addr, request).await;
        let status = response.status();
        if status != StatusCode::OK {
            return (status, None);
        }
        assert_eq!(
            response.headers()[CONTENT_TYPE],
            "application/x-ndjson",
            "{response:?}"
        );
        let body = response.into_body();
        let stream = Self {
            body,
            buffer: Vec::new(),
        };
        (status, Some(stream))
    }

    /// The next line, `None` once the stream ended; a stream that stays silent fails the test.
    async fn next(&mut self) -> Option<StreamLine> {
        loop {
            if let Some(at) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=at).collect();
                return Some(StreamLine::from_line(&line).unwrap());
            }
            let frame = tokio::time::timeout(PATIENCE, self.body.frame())
                .await
                .expect("a line within the patience");
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => panic!("the stream broke: {e}"),
                None => {
                    assert!(self.buffer.is_empty(), "a cut line: {:?}", self.buffer);
                    return None;
                }
            }
        }
    }
}

/// Sends `request` to `addr` on a connection of its own.
async fn exchange<B>(addr: SocketAddr, request: Request<B>) -> http::Response<Incoming>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender.send_request(request).await.unwrap()
}

/// POSTs `body` to node `node`'s ack route: the status, and the body.
async fn ack(addr: SocketAddr, node: &str, body: String) -> (StatusCode, Bytes) {
    let request = Request::post(node_kicks_ack_path(node))
        .header(HOST, addr.to_string())
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = exchange(addr, request).await;
    let status = response.status();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

/// The `accepted` of an ack of kick `id` by `node` with `status`.
async fn accepted(addr: SocketAddr, node: &str, id: &str, status: u16) -> bool {
    let (code, body) = ack(addr, node, format!(r#"{{"id":"{id}","status":{status}}}"#)).await;
    assert_eq!(code, StatusCode::OK, "{body:?}");
    serde_json::from_slice::<KickAckAnswer>(&body)
        .unwrap()
        .accepted
}

/// A node driven by hand, acking every kick 200 without checking it: the signature and
/// payload clauses fail, the others pass; on the way, the server side of the stream and of
/// the ack route is what `docs/design.md#push-kicks` says.
#[tokio::test]
async fn a_stream_driven_by_hand_sees_the_server_side_of_the_contract() {
    let (check, addr) = push_check();
    let check = check
        .node("raw-node")
        .unwrap()
        .ping(Duration::from_millis(10));
    let run = tokio::spawn(async move { check.run().await });

    // Only the named node's stream is taken.
    let (status, _) = RawStream::open(addr, "other-node").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = RawStream::open(addr, "bad/node").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not a route");
    let (status, stream) = RawStream::open(addr, "raw-node").await;
    assert_eq!(status, StatusCode::OK);
    let mut stream = stream.unwrap();
    assert_eq!(
        stream.next().await,
        Some(StreamLine::Hello {
            node: "raw-node".into(),
            ping_ms: 10
        })
    );

    // The first kick is the signed one: its signature verifies over its body. It is held
    // unanswered until a ping came, so pings are shown to keep coming while a kick waits.
    let mut ids = Vec::new();
    let mut pinged = false;
    let mut first = None;
    while first.is_none() || !pinged {
        match stream.next().await.expect("the stream lasts") {
            StreamLine::Ping => pinged = true,
            StreamLine::Kick(kick) => first = Some(kick),
            other => panic!("{other:?}"),
        }
    }
    let first = first.unwrap();
    let signature = first.signature.as_deref();
    keys()
        .verify(
            signature,
            first.body.as_bytes(),
            SystemTime::now(),
            DEFAULT_WINDOW,
        )
        .unwrap_or_else(|e| panic!("{e:?}: {first:?} signed with {KEY}"));
    // The ack route: a bad body is 400; an unknown id, or another node's ack of this kick,
    // is not accepted and leaves the kick waiting; the node's own ack is.
    let (code, _) = ack(addr, "raw-node", r#"{"id":"x"}"#.into()).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(!accepted(addr, "raw-node", &"0".repeat(32), 200).await);
    assert!(!accepted(addr, "other-node", &first.id, 200).await);
    assert!(accepted(addr, "raw-node", &first.id, 200).await);
    assert!(
        !accepted(addr, "raw-node", &first.id, 200).await,
        "answered"
    );
    ids.push(first.id);

    // Every other kick acked 200 at once, until the run ends the stream.
    let mut last = None;
    while let Some(line) = stream.next().await {
        match line {
            StreamLine::Kick(kick) => {
                assert!(accepted(addr, "raw-node", &kick.id, 200).await);
                ids.push(kick.id);
            }
            StreamLine::Ping => {}
            other => last = Some(other),
        }
    }
    assert_eq!(
        last,
        Some(StreamLine::Closed {
            reason: ClosedReason::Shutdown
        })
    );
    assert_eq!(ids.len() as u64, PUSHED_KICKS);
    for id in &ids {
        assert!(
            id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{id}"
        );
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as u64, PUSHED_KICKS, "a fresh id a kick");

    let report: Report = run.await.unwrap();
    assert_failed(
        &report,
        &[
            &SIGNATURE_CLAUSES[..],
            &[Clause::MalformedPayload, Clause::IncompletePayload],
        ]
        .concat(),
    );
}

#[tokio::test]
async fn a_node_that_never_acks_fails_at_the_timeout() {
    let (check, addr) = push_check();
    let check = check.timeout(Duration::from_millis(200));
    let run = tokio::spawn(async move { check.check(Clause::SignedKick).await });
    let (_, stream) = RawStream::open(addr, "silent-node").await;
    let mut stream = stream.unwrap();
    let result = run.await.unwrap();
    assert_eq!(
        result.to_string(),
        "FAIL signed-kick             a kick signed with the node's key: expected 2xx, got no \
         answer (no ack within 200ms)"
    );
    // It was pushed, and the stream ended after it.
    let mut kicks = 0;
    while let Some(line) = stream.next().await {
        kicks += usize::from(matches!(line, StreamLine::Kick(_)));
    }
    assert_eq!(kicks, 1);
}

#[tokio::test]
async fn no_stream_fails_every_pushed_clause_and_http_only_clauses_are_not_pushed() {
    let (check, _addr) = push_check();
    let check = check.wait(Duration::from_millis(100));
    let report = check.run().await;
    assert_eq!(report.failed(), Clause::PUSHED);
    for result in report.results() {
        assert!(
            result.answers().iter().all(|(_, answer)| matches!(
                answer,
                Answer::NoAnswer(why) if why == "no node opened its kick stream within 100ms"
            )),
            "{result}"
        );
    }
    let result = check.check(Clause::OversizedChunkedBody).await;
    assert!(!result.passed());
    assert!(
        result.to_string().ends_with(
            "got no answer (not checked in push mode: a pushed kick has no method or framing)"
        ),
        "{result}"
    );
}

/// A node that opens its stream again (it reconnected) replaces the first: the first gets
/// `closed` `replaced` and ends, a kick pushed down it can still be acked, and the next kicks
/// come down the newer.
#[tokio::test]
async fn a_second_stream_of_the_node_replaces_the_first() {
    let (check, addr) = push_check();
    let run = tokio::spawn(async move { check.run().await });
    let (_, first) = RawStream::open(addr, "twice-node").await;
    let mut first = first.unwrap();
    let mut kick = None;
    while kick.is_none() {
        match first.next().await.expect("the stream lasts") {
            StreamLine::Kick(line) => kick = Some(line),
            StreamLine::Hello { .. } | StreamLine::Ping => {}
            other => panic!("{other:?}"),
        }
    }
    // The check waits for that kick's ack while the node opens its stream again.
    let (_, second) = RawStream::open(addr, "twice-node").await;
    let mut second = second.unwrap();
    assert!(matches!(
        second.next().await,
        Some(StreamLine::Hello { .. })
    ));
    let mut rest = Vec::new();
    while let Some(line) = first.next().await {
        rest.push(line);
    }
    assert_eq!(
        rest,
        [StreamLine::Closed {
            reason: ClosedReason::Replaced
        }]
    );
    assert!(accepted(addr, "twice-node", &kick.unwrap().id, 200).await);
    let mut kicks = 1;
    while let Some(line) = second.next().await {
        if let StreamLine::Kick(kick) = line {
            assert!(accepted(addr, "twice-node", &kick.id, 200).await);
            kicks += 1;
        }
    }
    assert_eq!(kicks, PUSHED_KICKS);
    let report = run.await.unwrap();
    assert!(report.results()[0].passed(), "{report}");
}
