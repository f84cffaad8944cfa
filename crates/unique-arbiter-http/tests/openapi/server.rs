//! The server under test: a scripted store that fails on chosen keys, the service on
//! loopback, and requests whose answers are checked against the document.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;
use unique_arbiter_http::{
    ArbiterService, Grant, KickHub, PushConfig, Role, ServeOptions, Tokens, serve_with,
};
use unique_core::{
    Arbiter, CasOutcome, CurrentView, Error, Key, Owner, OwnerState, Store, UserKey, UserSession,
    async_trait,
};
use unique_lease::MemoryDirectory;
use unique_store_memory::MemoryStore;

use crate::common::FailingLeases;
use crate::document::Document;
use crate::{BODY_TIMEOUT, NARROW, TOKEN};

pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) content_type: String,
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: Bytes,
}

/// A memory store that fails on chosen keys, and whose readiness can be switched off:
/// project `fault`, env `throttled` → `Throttled`, env `down` → `Unavailable`.
#[derive(Default)]
pub(crate) struct Scripted {
    pub(crate) inner: MemoryStore,
    pub(crate) not_ready: AtomicBool,
}

impl Scripted {
    pub(crate) fn fault(key: &Key) -> Result<(), Error> {
        match (key.project.as_str(), key.env.as_str()) {
            ("fault", "throttled") => Err(Error::Throttled),
            ("fault", "down") => Err(Error::unavailable("store read failed")),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Store for Scripted {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        Self::fault(key)?;
        self.inner.read_owner(key).await
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        Self::fault(key)?;
        self.inner.claim_cas(key, owner, claim_id, snap).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        Self::fault(key)?;
        self.inner.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        Self::fault(key)?;
        self.inner.release(key, generation).await
    }
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        Self::fault(&user.key(""))?;
        self.inner.list_sessions(user).await
    }
    async fn check_ready(&self) -> Result<(), Error> {
        if self.not_ready.load(Ordering::SeqCst) {
            return Err(Error::unavailable("store check failed"));
        }
        self.inner.check_ready().await
    }
}

pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    /// The same service without a lease directory: its lease routes answer 501.
    pub(crate) without_leases: SocketAddr,
    /// The same service, lease-only (`without_sessions`): its session routes answer 501.
    pub(crate) lease_only: SocketAddr,
    pub(crate) store: Arc<Scripted>,
    pub(crate) doc: Document,
}

impl Server {
    pub(crate) async fn start() -> Self {
        let mut tokens = Tokens::new();
        tokens
            .add(
                TOKEN,
                Grant::new("all", vec!["*".into()], None).with_role(Role::Admin),
            )
            .unwrap()
            .add(NARROW, Grant::new("narrow", vec!["other".into()], None))
            .unwrap();
        let store = Arc::new(Scripted::default());
        // Two kick streams at most, one per token: the test holds them to see 429 and 503.
        let hub = KickHub::new(PushConfig {
            max_streams: 2,
            max_streams_per_token: 1,
            ..PushConfig::default()
        });
        let service = ArbiterService::new(Arbiter::new(Arc::clone(&store)))
            .with_tokens(tokens)
            .with_push_kicks(hub);
        let without_leases = Self::listen(service.clone()).await;
        let lease_only = Self::listen(
            service
                .clone()
                .without_sessions()
                .with_leases(Arc::new(MemoryDirectory::new())),
        )
        .await;
        let addr = Self::listen(service.with_leases(Arc::new(FailingLeases::new(
            "fault",
            MemoryDirectory::new(),
        ))))
        .await;
        Self {
            addr,
            without_leases,
            lease_only,
            store,
            doc: Document::load(),
        }
    }

    pub(crate) async fn listen(service: ArbiterService<Arc<Scripted>>) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let options = ServeOptions::default().body_timeout(BODY_TIMEOUT);
        tokio::spawn(serve_with(
            listener,
            service,
            options,
            std::future::pending(),
        ));
        addr
    }

    /// Sends one request on a fresh connection and checks the answer against the document.
    pub(crate) async fn exchange<B>(&self, req: Request<B>, request_json: Option<&Value>) -> Answer
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.exchange_at(self.addr, req, request_json).await
    }

    /// As [`exchange`](Self::exchange), with the server at `addr`.
    pub(crate) async fn exchange_at<B>(
        &self,
        addr: SocketAddr,
        req: Request<B>,
        request_json: Option<&Value>,
    ) -> Answer
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (method, path) = (req.method().clone(), req.uri().path().to_owned());
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let res = sender.send_request(req).await.unwrap();
        let status = res.status();
        let headers = res.headers().clone();
        let content_type = headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let answer = Answer {
            status,
            content_type,
            headers,
            body,
        };
        self.doc.check(&method, &path, request_json, &answer);
        answer
    }

    pub(crate) fn request(
        method: Method,
        path: &str,
        token: Option<&str>,
    ) -> http::request::Builder {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "test")
            .header("content-type", "application/json");
        if let Some(token) = token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        req
    }

    /// POSTs `body` with `token`, expecting `status`.
    pub(crate) async fn post(
        &self,
        path: &str,
        token: Option<&str>,
        body: &Value,
        status: u16,
    ) -> Answer {
        let bytes = serde_json::to_vec(body).unwrap();
        let req = Self::request(Method::POST, path, token)
            .body(Full::new(Bytes::from(bytes)))
            .unwrap();
        let answer = self.exchange(req, Some(body)).await;
        assert_eq!(
            answer.status.as_u16(),
            status,
            "POST {path} {body}: {:?}",
            answer.body
        );
        answer
    }

    /// POSTs `body` to the server without a lease directory, expecting `status`.
    pub(crate) async fn post_without_leases(
        &self,
        path: &str,
        body: &Value,
        status: u16,
    ) -> Answer {
        self.post_at(self.without_leases, path, body, status).await
    }

    /// POSTs `body` with [`TOKEN`] to the server at `addr`, expecting `status`.
    pub(crate) async fn post_at(
        &self,
        addr: SocketAddr,
        path: &str,
        body: &Value,
        status: u16,
    ) -> Answer {
        let bytes = serde_json::to_vec(body).unwrap();
        let req = Self::request(Method::POST, path, Some(TOKEN))
            .body(Full::new(Bytes::from(bytes)))
            .unwrap();
        let answer = self.exchange_at(addr, req, None).await;
        assert_eq!(answer.status.as_u16(), status, "POST {path} {body}");
        answer
    }

    pub(crate) async fn post_raw(&self, path: &str, body: impl Into<Bytes>, status: u16) {
        let req = Self::request(Method::POST, path, Some(TOKEN))
            .body(Full::new(body.into()))
            .unwrap();
        let answer = self.exchange(req, None).await;
        assert_eq!(answer.status.as_u16(), status, "POST {path}");
    }

    /// A body that starts and never finishes: the server's body timeout answers it.
    pub(crate) async fn post_stalled(&self, path: &str) {
        let (tx, rx) = futures::channel::mpsc::unbounded::<
            Result<http_body::Frame<Bytes>, std::convert::Infallible>,
        >();
        tx.unbounded_send(Ok(http_body::Frame::data(Bytes::from_static(b"{\"pro"))))
            .unwrap();
        let req = Self::request(Method::POST, path, Some(TOKEN))
            .header("content-length", "100")
            .body(StreamBody::new(rx))
            .unwrap();
        let answer = self.exchange(req, None).await;
        drop(tx);
        assert_eq!(answer.status, StatusCode::REQUEST_TIMEOUT, "POST {path}");
    }

    /// GETs `path` at `addr` with `token`, expecting `status` (an answer that ends).
    pub(crate) async fn get_at(
        &self,
        addr: SocketAddr,
        path: &str,
        token: Option<&str>,
        status: u16,
    ) -> Answer {
        let req = Self::request(Method::GET, path, token)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = self.exchange_at(addr, req, None).await;
        assert_eq!(answer.status.as_u16(), status, "GET {path}");
        answer
    }

    /// Opens a kick stream of `node` with `token` and holds it: the connection, after the
    /// answer's head (200). Its body never ends, so it is not read (nor checked against the
    /// document: tests/push_kicks.rs of unique-server reads streams).
    pub(crate) async fn hold_stream(&self, node: &str, token: &str) -> TcpStream {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        let request = format!(
            "GET /v1/nodes/{node}/kicks HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {token}\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "stream closed");
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        stream
    }

    pub(crate) async fn probe(&self, method: Method, path: &str, status: u16) -> Answer {
        let req = Self::request(method.clone(), path, None)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = self.exchange(req, None).await;
        assert_eq!(answer.status.as_u16(), status, "{method} {path}");
        answer
    }
}
