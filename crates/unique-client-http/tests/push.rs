//! HttpTransport as a PushTransport against a loopback HTTP/1.1 server: the kick stream's
//! request (path under the base URL's prefix, bearer token, NDJSON accept), its body read
//! chunk by chunk as the server writes it and its end, the ack's request and answer, and
//! the error each refusal status maps to.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use unique_client::PushTransport;
use unique_client_http::HttpTransport;
use unique_core::Error;

/// A response body the test writes to, chunk by chunk; it ends when the sender drops.
struct Fed(mpsc::UnboundedReceiver<Bytes>);

impl Body for Fed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

/// One request the server saw: method, path, the headers the stream needs, the body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    method: String,
    path: String,
    accept: Option<String>,
    authorization: Option<String>,
    body: String,
}

/// Answers the kick stream with `stream_status` (200: a body fed through the returned
/// sender) and every ack with `{"accepted": true}`.
struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    feeds: mpsc::UnboundedReceiver<mpsc::UnboundedSender<Bytes>>,
}

impl Server {
    async fn start(stream_status: u16, error_body: &'static str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (feeds_tx, feeds) = mpsc::unbounded_channel();
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (log, feeds_tx) = (Arc::clone(&log), feeds_tx.clone());
                let service = service_fn(move |req: Request<Incoming>| {
                    let (log, feeds_tx) = (Arc::clone(&log), feeds_tx.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        let header = |name: &str| {
                            parts
                                .headers
                                .get(name)
                                .map(|v| v.to_str().unwrap().to_owned())
                        };
                        let path = parts.uri.path().to_owned();
                        log.lock().unwrap().push(Seen {
                            method: parts.method.to_string(),
                            path: path.clone(),
                            accept: header("accept"),
                            authorization: header("authorization"),
                            body: String::from_utf8(body.to_vec()).unwrap(),
                        });
                        let (tx, rx) = mpsc::unbounded_channel();
                        let response = if path.ends_with("/ack") {
                            tx.send(Bytes::from_static(br#"{"accepted":true}"#))
                                .unwrap();
                            Response::builder().status(200)
                        } else if stream_status == 200 {
                            feeds_tx.send(tx).unwrap();
                            Response::builder()
                                .status(200)
                                .header("content-type", "application/x-ndjson")
                        } else {
                            tx.send(Bytes::from_static(error_body.as_bytes())).unwrap();
                            Response::builder()
                                .status(stream_status)
                                .header("content-type", "application/json")
                        };
                        Ok::<_, Infallible>(response.body(Fed(rx)).unwrap())
                    }
                });
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { addr, seen, feeds }
    }

    fn transport(&self) -> HttpTransport {
        HttpTransport::builder(format!("http://{}/prefix/", self.addr))
            .bearer_token("tok-push")
            .build()
            .unwrap()
    }
}

#[tokio::test]
async fn the_stream_is_read_as_written_and_acks_are_posted() {
    let mut server = Server::start(200, "").await;
    let transport = server.transport();
    let mut stream = transport.open_kick_stream("n1").await.unwrap();
    let feed = server.feeds.recv().await.unwrap();
    {
        let seen = server.seen.lock().unwrap();
        assert_eq!(
            seen[0],
            Seen {
                method: "GET".into(),
                path: "/prefix/v1/nodes/n1/kicks".into(),
                accept: Some("application/x-ndjson".into()),
                authorization: Some("Bearer tok-push".into()),
                body: String::new(),
            }
        );
    }
    // Each chunk arrives as the server writes it, while the response goes on.
    feed.send(Bytes::from_static(b"{\"type\":\"hello\",\"node\":\"n1\","))
        .unwrap();
    assert_eq!(
        stream.next_chunk().await.unwrap().unwrap(),
        b"{\"type\":\"hello\",\"node\":\"n1\","
    );
    feed.send(Bytes::from_static(b"\"ping_ms\":15000}\n"))
        .unwrap();
    assert_eq!(
        stream.next_chunk().await.unwrap().unwrap(),
        b"\"ping_ms\":15000}\n"
    );

    let accepted = transport
        .ack_kick("n1", "0123456789abcdef0123456789abcdef", 401)
        .await
        .unwrap();
    assert!(accepted);
    {
        let seen = server.seen.lock().unwrap();
        assert_eq!(seen[1].method, "POST");
        assert_eq!(seen[1].path, "/prefix/v1/nodes/n1/kicks/ack");
        assert_eq!(seen[1].authorization.as_deref(), Some("Bearer tok-push"));
        let body: serde_json::Value = serde_json::from_str(&seen[1].body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"id": "0123456789abcdef0123456789abcdef", "status": 401})
        );
    }

    // The server ends the response: the stream ends.
    drop(feed);
    assert_eq!(stream.next_chunk().await.unwrap(), None);
}

#[tokio::test]
async fn a_refused_stream_is_the_error_its_status_says() {
    let body = r#"{"error":"x","message":"why"}"#;
    let refused = |status| async move {
        let server = Server::start(status, body).await;
        match server.transport().open_kick_stream("n1").await {
            Ok(_) => panic!("{status} opened a stream"),
            Err(error) => error,
        }
    };
    assert!(matches!(refused(401).await, Error::Unauthenticated(_)));
    assert!(matches!(refused(403).await, Error::Forbidden(_)));
    assert!(matches!(refused(429).await, Error::Throttled));
    assert!(matches!(refused(503).await, Error::Unavailable { .. }));
    let missing = refused(404).await;
    assert!(
        missing.is_invalid_params() && missing.to_string().contains("push kicks"),
        "{missing}"
    );

    // A node id the server's rule refuses is refused here, with no request sent.
    let server = Server::start(200, "").await;
    let bad = server.transport().open_kick_stream("a/b").await;
    assert!(bad.err().is_some_and(|e| e.is_invalid_params()));
    assert!(server.seen.lock().unwrap().is_empty());
}
