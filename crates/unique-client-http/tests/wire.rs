//! HttpTransport against real loopback HTTP servers: request shape, one test per status,
//! connection failures, timeouts, keep-alive.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use unique_client::{Claimer, ClaimerOptions, Jitter, Transport};
use unique_client_http::HttpTransport;
use unique_core::{ClaimInput, ClaimOutcome, CurrentView, Error, Key, KickDetail, Owner};

/// What the server saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    content_type: Option<String>,
    authorization: Option<String>,
    body: String,
}

/// A loopback HTTP/1.1 server answering from a script of `(status, body)`.
struct ScriptServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
}

impl ScriptServer {
    async fn start(replies: Vec<(u16, &'static str)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let (s, c) = (Arc::clone(&seen), Arc::clone(&connections));
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                c.fetch_add(1, Ordering::SeqCst);
                let (seen, replies) = (Arc::clone(&s), Arc::clone(&replies));
                let service = service_fn(move |req: Request<Incoming>| {
                    let (seen, replies) = (Arc::clone(&seen), Arc::clone(&replies));
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        seen.lock().unwrap().push(Seen {
                            method: parts.method.to_string(),
                            path: parts.uri.path().to_owned(),
                            content_type: parts
                                .headers
                                .get("content-type")
                                .map(|v| v.to_str().unwrap().to_owned()),
                            authorization: parts
                                .headers
                                .get("authorization")
                                .map(|v| v.to_str().unwrap().to_owned()),
                            body: String::from_utf8(body.to_vec()).unwrap(),
                        });
                        let (status, text) = replies
                            .lock()
                            .unwrap()
                            .pop_front()
                            .expect("reply script exhausted");
                        Ok::<_, Infallible>(
                            Response::builder()
                                .status(status)
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from_static(text.as_bytes())))
                                .unwrap(),
                        )
                    }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        Self {
            addr,
            seen,
            connections,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn transport(&self) -> HttpTransport {
        HttpTransport::new(&self.url()).unwrap()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn key() -> Key {
    Key::new("game", "prod", 42)
}

fn claim_input() -> ClaimInput {
    ClaimInput {
        key: key(),
        owner: Owner::new("eu-west-1", "c1", "http://10.0.0.7:9001/kick"),
        claim_id: "0f8e3c1e-5b7a-4d2c-9a51-3c4b2e1d0f9a".into(),
    }
}

/// Runs one `release` against a server answering `(status, body)`.
async fn release_answered_by(status: u16, body: &'static str) -> Result<bool, Error> {
    let server = ScriptServer::start(vec![(status, body)]).await;
    server.transport().release(&key(), 3).await
}

#[tokio::test]
async fn requests_have_the_exact_wire_shape() {
    let server = ScriptServer::start(vec![
        (
            200,
            r#"{"gen":2,"prev_gen":1,"has_prev":true,"prev_owner":{"region":"eu-west-1","cluster":"c0","endpoint":"http://10.0.0.6:9001/kick"},"kicked":true,"kick_detail":null,"replayed":false}"#,
        ),
        (200, r#"{"gen":2,"owner":{"endpoint":"http://10.0.0.7:9001/kick"},"exists":true}"#),
        (200, r#"{"released":true}"#),
    ])
    .await;
    let t = server.transport();
    let outcome = t.claim(&claim_input()).await.unwrap();
    let view = t.current(&key()).await.unwrap();
    assert!(t.release(&key(), 2).await.unwrap());

    let seen = server.seen();
    let expected = [
        (
            "/v1/claim",
            r#"{"project":"game","env":"prod","uid":42,"owner":{"region":"eu-west-1","cluster":"c1","endpoint":"http://10.0.0.7:9001/kick"},"claim_id":"0f8e3c1e-5b7a-4d2c-9a51-3c4b2e1d0f9a"}"#,
        ),
        ("/v1/current", r#"{"project":"game","env":"prod","uid":42}"#),
        (
            "/v1/release",
            r#"{"project":"game","env":"prod","uid":42,"gen":2}"#,
        ),
    ];
    assert_eq!(seen.len(), 3);
    for (s, (path, body)) in seen.iter().zip(expected) {
        assert_eq!(s.method, "POST");
        assert_eq!(s.path, path);
        assert_eq!(s.content_type.as_deref(), Some("application/json"));
        assert_eq!(s.body, body);
    }

    assert_eq!(
        outcome,
        ClaimOutcome {
            generation: 2,
            prev_generation: 1,
            has_prev: true,
            prev_owner: Some(Owner::new("eu-west-1", "c0", "http://10.0.0.6:9001/kick")),
            kicked: true,
            kick_detail: None,
            replayed: false,
        }
    );
    assert_eq!(
        view,
        CurrentView {
            generation: 2,
            owner: Some(Owner::new("", "", "http://10.0.0.7:9001/kick")),
            exists: true,
        }
    );
}

#[tokio::test]
async fn a_base_path_is_kept_as_prefix() {
    let server = ScriptServer::start(vec![(200, r#"{"gen":0,"owner":null,"exists":false}"#)]).await;
    let t = HttpTransport::new(&format!("{}/unique/", server.url())).unwrap();
    assert_eq!(t.current(&key()).await.unwrap(), CurrentView::default());
    assert_eq!(server.seen()[0].path, "/unique/v1/current");
}

#[tokio::test]
async fn status_200_parses_every_claim_field() {
    let server = ScriptServer::start(vec![(
        200,
        r#"{"gen":9,"prev_gen":8,"has_prev":true,"prev_owner":null,"kicked":false,"kick_detail":"connect-error","replayed":false,"later":"ignored"}"#,
    )])
    .await;
    let outcome = server.transport().claim(&claim_input()).await.unwrap();
    assert_eq!(outcome.generation, 9);
    assert_eq!(outcome.prev_generation, 8);
    assert_eq!(outcome.kick_detail, Some(KickDetail::ConnectError));
    assert_eq!(outcome.prev_owner, None);
    assert!(!outcome.kicked && outcome.has_prev && !outcome.replayed);
}

#[tokio::test]
async fn status_200_with_an_unparseable_body_is_unavailable() {
    for body in ["", "ok", r#"{"released":1}"#, r#"{"gen":1}"#] {
        let e = release_answered_by(200, body).await.unwrap_err();
        assert!(e.is_unavailable(), "{body}: {e}");
    }
}

#[tokio::test]
async fn status_400_is_invalid_params_with_the_server_message() {
    let e = release_answered_by(
        400,
        r#"{"error":"invalid_params","message":"project must not contain '#'"}"#,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidParams(m) if m == "project must not contain '#'"),
        "{e}"
    );
}

#[tokio::test]
async fn status_429_is_throttled() {
    let e = release_answered_by(
        429,
        r#"{"error":"throttled","message":"throttled by the store"}"#,
    )
    .await
    .unwrap_err();
    assert!(e.is_throttled(), "{e}");
}

#[tokio::test]
async fn status_503_is_unavailable() {
    let e = release_answered_by(
        503,
        r#"{"error":"unavailable","message":"store read failed"}"#,
    )
    .await
    .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    assert_eq!(
        e.to_string(),
        "unavailable: release: server unavailable: store read failed"
    );
}

#[tokio::test]
async fn other_5xx_are_unavailable() {
    for status in [500, 502, 504] {
        let e = release_answered_by(status, "{}").await.unwrap_err();
        assert!(e.is_unavailable(), "{status}: {e}");
    }
}

#[tokio::test]
async fn wrong_route_or_oversized_body_fails_at_once() {
    for status in [404, 405, 413] {
        let e = release_answered_by(status, "").await.unwrap_err();
        assert!(e.is_invalid_params() && !e.is_retryable(), "{status}: {e}");
        assert!(e.to_string().contains(&status.to_string()), "{e}");
    }
}

#[tokio::test]
async fn any_other_status_is_unavailable() {
    for status in [201, 204, 302, 410, 418] {
        let e = release_answered_by(status, r#"{"released":true}"#)
            .await
            .unwrap_err();
        assert!(e.is_unavailable(), "{status}: {e}");
    }
}

/// A release with a reason sends it; a server older than the field refuses it as an unknown
/// field (its real answer below), and the release is sent again without it.
#[tokio::test]
async fn a_release_reason_is_sent_and_dropped_for_a_server_older_than_the_field() {
    let older = concat!(
        r#"{"error":"invalid_params","message":"reason: unknown field `reason`, "#,
        r#"expected one of `project`, `env`, `uid`, `slot`, `gen` at line 1 column 47"}"#
    );
    let server = ScriptServer::start(vec![
        (200, r#"{"released":true}"#),
        (400, older),
        (200, r#"{"released":true}"#),
    ])
    .await;
    let t = server.transport();
    let drained = unique_core::ReleaseReason::NodeDraining;
    assert!(t.release_with_reason(&key(), 3, drained).await.unwrap());
    assert!(t.release_with_reason(&key(), 4, drained).await.unwrap());
    let bodies: Vec<_> = server.seen().into_iter().map(|s| s.body).collect();
    let body = |generation: i64, reason: &str| {
        format!(r#"{{"project":"game","env":"prod","uid":42,"gen":{generation}{reason}}}"#)
    };
    let told = r#","reason":"node-draining""#;
    assert_eq!(bodies, [body(3, told), body(4, told), body(4, "")]);
}

#[tokio::test]
async fn a_bearer_token_is_sent_with_every_call() {
    let server = ScriptServer::start(vec![(200, r#"{"released":true}"#); 2]).await;
    let t = HttpTransport::builder(server.url())
        .bearer_token("tok-0123456789abcdef")
        .build()
        .unwrap();
    t.release(&key(), 1).await.unwrap();
    t.release(&key(), 2).await.unwrap();
    let sent: Vec<_> = server.seen().into_iter().map(|s| s.authorization).collect();
    assert_eq!(
        sent,
        vec![Some("Bearer tok-0123456789abcdef".to_owned()); 2]
    );
    // Without a token no authorization header is sent.
    let server = ScriptServer::start(vec![(200, r#"{"released":true}"#)]).await;
    server.transport().release(&key(), 1).await.unwrap();
    assert_eq!(server.seen()[0].authorization, None);
}

#[tokio::test]
async fn refused_credentials_fail_at_once_with_the_server_message() {
    for (status, body) in [
        (
            401,
            r#"{"error":"unauthenticated","message":"unknown bearer token"}"#,
        ),
        (
            403,
            r#"{"error":"forbidden","message":"token \"a\" may not act on project \"x\" env \"y\""}"#,
        ),
    ] {
        let e = release_answered_by(status, body).await.unwrap_err();
        assert!(
            e.is_refused_credentials() && !e.is_retryable(),
            "{status}: {e}"
        );
        let expected = if status == 401 {
            "unauthenticated"
        } else {
            "forbidden"
        };
        assert_eq!(e.code(), expected, "{e}");
        assert!(e.to_string().contains(&format!("({status})")), "{e}");
    }
}

#[tokio::test]
async fn an_oversized_answer_is_unavailable() {
    let server = ScriptServer::start(vec![(200, r#"{"released":true,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#)]).await;
    let t = HttpTransport::builder(server.url())
        .max_response_body(32)
        .build()
        .unwrap();
    let e = t.release(&key(), 1).await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
}

#[tokio::test]
async fn a_closed_port_is_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let e = HttpTransport::new(&format!("http://{addr}"))
        .unwrap()
        .current(&key())
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    assert_eq!(e.to_string(), "unavailable: current: connection failed");
}

#[tokio::test]
async fn a_connection_closed_without_an_answer_is_unavailable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            drop(stream);
        }
    });
    let e = HttpTransport::new(&format!("http://{addr}"))
        .unwrap()
        .current(&key())
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
}

#[tokio::test]
async fn a_server_that_never_answers_is_cut_at_the_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (held_tx, mut held_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            // Keep each connection open and silent.
            let (stream, _) = listener.accept().await.unwrap();
            held_tx.send(stream).unwrap();
        }
    });
    let t = HttpTransport::builder(format!("http://{addr}"))
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let e = t.claim(&claim_input()).await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    assert_eq!(e.to_string(), "unavailable: claim: no answer within 200ms");
    assert!(
        held_rx.recv().await.is_some(),
        "the request did reach the server"
    );
}

#[tokio::test]
async fn connections_are_kept_alive_and_reused() {
    let replies = vec![(200, r#"{"released":false}"#); 10];
    let server = ScriptServer::start(replies).await;
    let t = server.transport();
    let clone = t.clone();
    for i in 0..10 {
        let via = if i % 2 == 0 { &t } else { &clone };
        assert!(!via.release(&key(), 1).await.unwrap());
    }
    assert_eq!(server.seen().len(), 10);
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

/// The claimer over HTTP against a wrong base URL: the 404 fails the login at
/// once, after one request, instead of retrying for the whole budget.
#[tokio::test]
async fn claimer_fails_at_once_on_a_404() {
    let server = ScriptServer::start(vec![(404, "not found")]).await;
    let options = ClaimerOptions::default()
        .initial_backoff(Duration::from_millis(1))
        .jitter(Jitter::none());
    let failed = Claimer::with_options(server.transport(), options)
        .login(key(), claim_input().owner)
        .await
        .unwrap_err();
    assert_eq!(failed.attempts, 1, "{failed}");
    assert!(failed.error.is_invalid_params(), "{failed}");
    assert!(failed.error.to_string().contains("base url"), "{failed}");
    assert_eq!(server.seen().len(), 1, "no retry reached the server");
}

/// The claimer over HTTP: the retry after a 503 carries the same claim_id on the wire.
#[tokio::test]
async fn claimer_retries_over_http_with_the_same_claim_id() {
    let server = ScriptServer::start(vec![
        (503, r#"{"error":"unavailable","message":"cas budget exhausted"}"#),
        (429, r#"{"error":"throttled","message":"throttled by the store"}"#),
        (
            200,
            r#"{"gen":1,"prev_gen":0,"has_prev":false,"prev_owner":null,"kicked":false,"kick_detail":null,"replayed":false}"#,
        ),
    ])
    .await;
    let options = ClaimerOptions::default()
        .initial_backoff(Duration::from_millis(1))
        .jitter(Jitter::none());
    let login = Claimer::with_options(server.transport(), options)
        .login(key(), claim_input().owner)
        .await
        .unwrap();
    assert_eq!(login.attempts, 3);
    let bodies: Vec<_> = server.seen().into_iter().map(|s| s.body).collect();
    assert_eq!(bodies.len(), 3);
    assert!(bodies.iter().all(|b| *b == bodies[0]), "{bodies:?}");
    assert!(bodies[0].contains(&format!(r#""claim_id":"{}""#, login.claim_id)));
}

/// The claimer over HTTP: a retry answered 409 `superseded` (another login replaced this one
/// while its first answer was lost) ends the login at once with `Superseded` and both gens;
/// nothing is sent after it.
#[tokio::test]
async fn claimer_stops_at_once_on_a_409_superseded() {
    let server = ScriptServer::start(vec![
        (503, r#"{"error":"unavailable","message":"connection reset"}"#),
        (
            409,
            r#"{"error":"superseded","message":"this claim_id won an earlier gen and no longer holds the key (replaced or logged out)","gen":1,"current_gen":2}"#,
        ),
        (
            200,
            r#"{"gen":3,"prev_gen":2,"has_prev":true,"prev_owner":null,"kicked":true,"kick_detail":null,"replayed":false}"#,
        ),
    ])
    .await;
    let options = ClaimerOptions::default()
        .initial_backoff(Duration::from_millis(1))
        .jitter(Jitter::none());
    let failed = Claimer::with_options(server.transport(), options)
        .login(key(), claim_input().owner)
        .await
        .unwrap_err();
    assert!(
        matches!(
            failed.error,
            Error::Superseded {
                generation: 1,
                current: 2
            }
        ),
        "{failed}"
    );
    assert!(failed.is_superseded(), "{failed}");
    assert_eq!(failed.attempts, 2, "{failed}");
    assert_eq!(server.seen().len(), 2, "no retry after the 409");
}

#[tokio::test]
async fn status_409_is_read_by_its_code() {
    let server = ScriptServer::start(vec![
        (409, r#"{"error":"superseded","message":"m"}"#),
        (409, r#"{"error":"too_many_slots","message":"m","limit":3}"#),
        (409, "conflict"),
    ])
    .await;
    let t = server.transport();
    let e = t.claim(&claim_input()).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Superseded {
                generation: 0,
                current: 0
            }
        ),
        "superseded even without its gens: {e}"
    );
    let e = t.claim(&claim_input()).await.unwrap_err();
    assert!(matches!(e, Error::TooManySlots { limit: 3 }), "{e}");
    let e = t.claim(&claim_input()).await.unwrap_err();
    assert!(
        e.is_unavailable(),
        "a 409 without a code is not superseded: {e}"
    );
}
