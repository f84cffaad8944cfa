//! The receivers the tests check: ours (`unique-kickrecv`, signed, on loopback), and a small
//! hand-written one with one deliberate flaw at a time.

#![allow(dead_code)] // each test target uses a part

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use unique_client::{KickHandler, KickOptions, Node, NodeEvents, PushOptions, PushStatus};
use unique_client_http::HttpTransport;
use unique_core::{Key, KickPayload, Owner};
use unique_kickrecv::{KickReceiver, KickService};
use unique_node_check::{Clause, Report, SigningKeys};

/// The key the receivers verify with and the check signs with.
pub(crate) const KEY: &str = "node-check-test-key-0123456789abcdef0123";

/// The clauses a node that does not check signatures fails, in order.
pub(crate) const SIGNATURE_CLAUSES: [Clause; 6] = [
    Clause::Unsigned,
    Clause::Forged,
    Clause::TamperedBody,
    Clause::StaleTimestamp,
    Clause::FutureTimestamp,
    Clause::MalformedSignature,
];

/// The summary line of a run in which exactly [`SIGNATURE_CLAUSES`] failed, of `total`.
pub(crate) fn signature_clauses_failed(total: usize) -> String {
    let names: Vec<&str> = SIGNATURE_CLAUSES.iter().map(|c| c.name()).collect();
    format!("6 of {total} clauses failed: {}", names.join(", "))
}

pub(crate) fn keys() -> SigningKeys {
    SigningKeys::new([KEY]).unwrap()
}

/// A handler for a node without sessions.
pub(crate) fn handler() -> KickHandler {
    KickHandler::new(|_: &Key| None, |_: Key, _| async {}, KickOptions::default())
}

/// Our receiver, on loopback, serving `service`.
pub(crate) async fn ours(service: KickService) -> KickReceiver {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    KickReceiver::builder(service).spawn(listener).unwrap()
}

/// `http://ADDR/kick`.
pub(crate) fn url(addr: SocketAddr) -> String {
    format!("http://{addr}/kick")
}

/// One deliberate break of the kick contract, in a receiver that otherwise keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flaw {
    /// None: the hand-written receiver keeps the contract.
    None,
    /// Reads bodies of any size.
    NoBodyLimit,
    /// Checks the declared `Content-Length` only, not the bytes of a chunked body.
    DeclaredLengthOnly,
    /// Answers every method as if it were POST.
    AnyMethod,
    /// Refuses fields the payload does not define (400).
    RejectsUnknownFields,
    /// Answers 200 to a payload it cannot read.
    AcceptsBadPayloads,
    /// Accepts a genuine signature whatever its timestamp.
    NoWindow,
    /// Verifies the signature over the payload written back out, not the bytes received.
    VerifiesReserialised,
}

/// The hand-written receiver, with `flaw`, on a loopback port; it serves until the test ends.
pub(crate) async fn flawed(flaw: Flaw) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = service_fn(move |request| async move {
                Ok::<_, Infallible>(answer(flaw, request).await)
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    addr
}

fn status(code: u16) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::from_u16(code).unwrap();
    response
}

/// The contract in a few lines, as a receiver in another language might write it.
async fn answer(flaw: Flaw, request: Request<Incoming>) -> Response<Full<Bytes>> {
    const LIMIT: usize = unique_wire::MAX_KICK_BODY_BYTES;
    if request.method() != Method::POST && flaw != Flaw::AnyMethod {
        return status(405);
    }
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if flaw != Flaw::NoBodyLimit && declared.is_some_and(|n| n > LIMIT) {
        return status(413);
    }
    let signature = request
        .headers()
        .get(unique_kick_signature::HEADER)
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    let body = if matches!(flaw, Flaw::NoBodyLimit | Flaw::DeclaredLengthOnly) {
        request.into_body().collect().await.unwrap().to_bytes()
    } else {
        match Limited::new(request.into_body(), LIMIT).collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => return status(413),
        }
    };
    let payload = if flaw == Flaw::RejectsUnknownFields {
        serde_json::from_slice::<Strict>(&body).map(KickPayload::from)
    } else {
        unique_wire::decode_kick(&body)
    };
    let signed = match (flaw, &payload) {
        (Flaw::VerifiesReserialised, Ok(payload)) => unique_wire::encode_kick(payload),
        _ => body.to_vec(),
    };
    let window = if flaw == Flaw::NoWindow {
        std::time::Duration::from_secs(u64::from(u32::MAX))
    } else {
        unique_kick_signature::DEFAULT_WINDOW
    };
    if keys()
        .verify(signature.as_deref(), &signed, SystemTime::now(), window)
        .is_err()
    {
        return status(401);
    }
    match payload {
        Ok(_) => status(200),
        Err(_) if flaw == Flaw::AcceptsBadPayloads => status(200),
        Err(_) => status(400),
    }
}

/// The payload with unknown fields refused.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Strict {
    project: String,
    env: String,
    uid: i64,
    #[serde(rename = "gen")]
    generation: i64,
    // The payload's own optional fields, known and so accepted.
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    slot: String,
}

impl From<Strict> for KickPayload {
    fn from(s: Strict) -> Self {
        Self {
            project: s.project,
            env: s.env,
            uid: s.uid,
            slot: s.slot,
            generation: s.generation,
            reason: s.reason.as_deref().map_or(
                unique_core::KickReason::LoginElsewhere,
                unique_core::KickReason::from_wire,
            ),
            message: s.message,
        }
    }
}

/// The report's failed clauses, with the report itself in the message when they differ.
pub(crate) fn assert_failed(report: &Report, expected: &[Clause]) {
    assert_eq!(report.failed(), expected, "{report}");
}

/// A Rust push node (`unique_client` with [`PushOptions`] over `HttpTransport`) that opens
/// its kick stream at `http://ADDR`, verifying kicks with `keys` (none: it accepts every
/// kick). It holds no session.
pub(crate) fn push_node(
    addr: SocketAddr,
    id: &str,
    keys: Option<SigningKeys>,
) -> (Node<HttpTransport>, NodeEvents) {
    let options = PushOptions::new(id).unwrap();
    let options = match keys {
        Some(keys) => options.signing_keys(keys),
        None => options,
    };
    let transport = HttpTransport::new(&format!("http://{addr}")).unwrap();
    Node::builder(transport, Owner::new("", id, ""))
        .push(options)
        .build()
}

/// Waits until `node` has acknowledged `acked` kicks (it counts an ack once the check
/// answered it, which may come after the check's run returned); fails the test, with the
/// last status, if that never comes.
pub(crate) async fn until_acked(node: &Node<HttpTransport>, acked: u64) -> PushStatus {
    let mut status = node.push_status().expect("a push node");
    let waited = tokio::time::timeout(PATIENCE, status.wait_for(|s| s.acked >= acked)).await;
    let last = node.push_status().expect("a push node").borrow().clone();
    match waited {
        Ok(Ok(_)) => last,
        _ => panic!("the node never acknowledged {acked} kicks: {last:?}"),
    }
}

/// How long a test waits for something that should come at once before failing.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);
