//! `docs/openapi.yaml` against the real server, so the document cannot drift from the code.
//!
//! A server runs in-process on loopback (with bearer tokens, a store that fails on chosen keys,
//! and a short body timeout); every route is exercised for success and for every error status
//! the server can give, and each real answer is checked against the document: its status is
//! listed for that operation, its content type is one the document names, its body validates
//! against the response schema, and its required headers are there. The request of every 2xx is
//! checked against the request schema. At the end every documented (path, method, status) must
//! have been seen, and the document's paths and methods must be exactly the routes of
//! `unique_wire::Route`.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_util::rt::TokioIo;
use jsonschema::{Registry, Validator};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use unique_arbiter_http::{ArbiterService, Grant, Role, ServeOptions, Tokens, serve_with};
use unique_core::{
    Arbiter, CasOutcome, CurrentView, Error, Key, Owner, OwnerState, Store, UserKey, UserSession,
    async_trait,
};
use unique_lease::MemoryDirectory;
use unique_store_memory::MemoryStore;
use unique_wire::{LeaseRoute, Route};

use common::FailingLeases;

/// The base URI the document is registered under, so `$ref`s resolve inside it.
const BASE: &str = "https://unique.invalid/openapi.json";
/// Every project, and the admin role (so every route answers it).
const TOKEN: &str = "openapi-test-token-all-projects";
/// Project `other` only, no role.
const NARROW: &str = "openapi-test-token-other-only";
/// Short, so the 408 cases take a second; full bodies are sent with their head and never wait.
const BODY_TIMEOUT: Duration = Duration::from_secs(1);
/// The methods checked against `Route::allows` when comparing the document with the routes.
const METHODS: [Method; 7] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::OPTIONS,
];

/// The document, its schemas ready to validate, and what the test has seen so far.
struct Document {
    root: Value,
    registry: Registry<'static>,
    seen: Mutex<BTreeSet<(String, String, String)>>,
}

impl Document {
    fn load() -> Self {
        // YAML 1.2 subset read by serde_norway straight into serde_json::Value (status keys are
        // quoted in the document, so every map key is a string as JSON needs).
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let root: Value = serde_norway::from_str(&text).expect("docs/openapi.yaml is valid YAML");
        assert!(
            root["openapi"]
                .as_str()
                .is_some_and(|v| v.starts_with("3.1.")),
            "not an OpenAPI 3.1 document"
        );
        let registry = Registry::new()
            .add(BASE, root.clone())
            .and_then(jsonschema::RegistryBuilder::prepare)
            .expect("the document registers as a schema resource");
        Self {
            root,
            registry,
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    /// A validator for the schema at JSON pointer `pointer` in the document.
    fn validator(&self, pointer: &str) -> Validator {
        assert!(
            self.root.pointer(pointer).is_some(),
            "no schema at {pointer}"
        );
        jsonschema::draft202012::options()
            .with_registry(&self.registry)
            .build(&json!({"$ref": format!("{BASE}#{pointer}")}))
            .unwrap_or_else(|e| panic!("schema at {pointer}: {e}"))
    }

    fn validate(&self, pointer: &str, instance: &Value, what: &str) {
        let errors: Vec<String> = self
            .validator(pointer)
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{what} does not match {pointer}: {errors:?}\n{instance}"
        );
    }

    /// The operation object of `method path`, with its pointer, if the document has it.
    fn operation(&self, method: &Method, path: &str) -> Option<String> {
        let pointer = format!(
            "/paths/{}/{}",
            escape(path),
            method.as_str().to_ascii_lowercase()
        );
        self.root.pointer(&pointer).map(|_| pointer)
    }

    /// Follows a `$ref` (local only) to the object it names, returning its pointer.
    fn resolve(&self, pointer: String) -> String {
        match self.root.pointer(&pointer).and_then(|v| v["$ref"].as_str()) {
            Some(target) => target.strip_prefix('#').expect("local $ref").to_owned(),
            None => pointer,
        }
    }

    /// Checks one real exchange against the document and records it as seen.
    fn check(&self, method: &Method, path: &str, request: Option<&Value>, answer: &Answer) {
        let status = answer.status.as_str().to_owned();
        let (operation, response) = match self.operation(method, path) {
            Some(op) => {
                let response = format!("{op}/responses/{status}");
                assert!(
                    self.root.pointer(&response).is_some(),
                    "{method} {path} answered {status}, which the document does not list: {:?}",
                    answer.body
                );
                (Some(op), response)
            }
            // No operation: the server's answers for unknown paths and methods.
            None if Route::from_path(path).is_some() => {
                assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
                (None, "/components/responses/MethodNotAllowed".to_owned())
            }
            None => {
                assert_eq!(answer.status, StatusCode::NOT_FOUND);
                (None, "/components/responses/NotFound".to_owned())
            }
        };
        let response = self.resolve(response);
        let what = format!("{method} {path} {status}");
        self.check_headers(&response, answer, &what);
        match self.root.pointer(&format!("{response}/content")) {
            Some(content) => {
                let media = answer.content_type.split(';').next().unwrap_or("").trim();
                assert!(
                    content.get(media).is_some(),
                    "{what}: content type {media:?} is not one of {content}"
                );
                let body = match media {
                    "application/json" => serde_json::from_slice(&answer.body)
                        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {:?}", answer.body)),
                    _ => Value::String(String::from_utf8(answer.body.to_vec()).unwrap()),
                };
                let schema = format!("{response}/content/{}/schema", escape(media));
                self.validate(&schema, &body, &what);
            }
            None => assert!(
                answer.body.is_empty(),
                "{what}: the document says no body, got {:?}",
                answer.body
            ),
        }
        if let (Some(op), Some(request), true) = (&operation, request, answer.status.is_success()) {
            let schema = format!("{op}/requestBody/content/application~1json/schema");
            self.validate(&schema, request, &format!("{what} request"));
        }
        let seen = operation.map_or_else(|| response.clone(), |op| format!("{op} {status}"));
        self.seen
            .lock()
            .unwrap()
            .insert((seen, method.to_string(), status));
    }

    fn check_headers(&self, response: &str, answer: &Answer, what: &str) {
        let Some(Value::Object(headers)) = self.root.pointer(&format!("{response}/headers")) else {
            return;
        };
        for (name, header) in headers {
            let value = answer.headers.get(name.as_str());
            if header["required"] == true {
                assert!(value.is_some(), "{what}: required header {name} missing");
            }
            if let Some(value) = value {
                let value = Value::String(value.to_str().unwrap().to_owned());
                let pointer = format!("{response}/headers/{}/schema", escape(name));
                self.validate(&pointer, &value, &format!("{what} header {name}"));
            }
        }
    }

    /// Every (operation, status) the document lists, plus the 404 and 405 components.
    fn documented(&self) -> BTreeSet<String> {
        let mut all = BTreeSet::from([
            "/components/responses/NotFound".to_owned(),
            "/components/responses/MethodNotAllowed".to_owned(),
        ]);
        for (path, item) in self.root["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for status in op["responses"].as_object().unwrap().keys() {
                    all.insert(format!("/paths/{}/{method} {status}", escape(path)));
                }
            }
        }
        all
    }
}

/// JSON pointer escaping of one reference token.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

struct Answer {
    status: StatusCode,
    content_type: String,
    headers: http::HeaderMap,
    body: Bytes,
}

/// A memory store that fails on chosen keys, and whose readiness can be switched off:
/// project `fault`, env `throttled` → `Throttled`, env `down` → `Unavailable`.
#[derive(Default)]
struct Scripted {
    inner: MemoryStore,
    not_ready: AtomicBool,
}

impl Scripted {
    fn fault(key: &Key) -> Result<(), Error> {
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

struct Server {
    addr: SocketAddr,
    /// The same service without a lease directory: its lease routes answer 501.
    without_leases: SocketAddr,
    store: Arc<Scripted>,
    doc: Document,
}

impl Server {
    async fn start() -> Self {
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
        let service = ArbiterService::new(Arbiter::new(Arc::clone(&store))).with_tokens(tokens);
        let without_leases = Self::listen(service.clone()).await;
        let addr = Self::listen(service.with_leases(Arc::new(FailingLeases::new(
            "fault",
            MemoryDirectory::new(),
        ))))
        .await;
        Self {
            addr,
            without_leases,
            store,
            doc: Document::load(),
        }
    }

    async fn listen(service: ArbiterService<Arc<Scripted>>) -> SocketAddr {
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
    async fn exchange<B>(&self, req: Request<B>, request_json: Option<&Value>) -> Answer
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.exchange_at(self.addr, req, request_json).await
    }

    /// As [`exchange`](Self::exchange), with the server at `addr`.
    async fn exchange_at<B>(
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

    fn request(method: Method, path: &str, token: Option<&str>) -> http::request::Builder {
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
    async fn post(&self, path: &str, token: Option<&str>, body: &Value, status: u16) -> Answer {
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
    async fn post_without_leases(&self, path: &str, body: &Value, status: u16) -> Answer {
        let bytes = serde_json::to_vec(body).unwrap();
        let req = Self::request(Method::POST, path, Some(TOKEN))
            .body(Full::new(Bytes::from(bytes)))
            .unwrap();
        let answer = self.exchange_at(self.without_leases, req, None).await;
        assert_eq!(answer.status.as_u16(), status, "POST {path} {body}");
        answer
    }

    async fn post_raw(&self, path: &str, body: impl Into<Bytes>, status: u16) {
        let req = Self::request(Method::POST, path, Some(TOKEN))
            .body(Full::new(body.into()))
            .unwrap();
        let answer = self.exchange(req, None).await;
        assert_eq!(answer.status.as_u16(), status, "POST {path}");
    }

    /// A body that starts and never finishes: the server's body timeout answers it.
    async fn post_stalled(&self, path: &str) {
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

    async fn probe(&self, method: Method, path: &str, status: u16) -> Answer {
        let req = Self::request(method.clone(), path, None)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = self.exchange(req, None).await;
        assert_eq!(answer.status.as_u16(), status, "{method} {path}");
        answer
    }
}

fn key(project: &str, env: &str, uid: i64) -> Value {
    json!({"project": project, "env": env, "uid": uid})
}

fn claim(project: &str, env: &str, uid: i64, endpoint: &str, claim_id: &str) -> Value {
    json!({"project": project, "env": env, "uid": uid,
           "owner": {"region": "eu", "cluster": "c1", "endpoint": endpoint},
           "claim_id": claim_id})
}

fn release(project: &str, env: &str, uid: i64, generation: i64) -> Value {
    json!({"project": project, "env": env, "uid": uid, "gen": generation})
}

fn logout(project: &str, env: &str, uid: i64, reason: Option<&str>) -> Value {
    let mut body = json!({"project": project, "env": env, "uid": uid});
    if let Some(reason) = reason {
        body["reason"] = json!(reason);
    }
    body
}

fn batch(keys: &[Value]) -> Value {
    json!({"keys": keys})
}

/// One valid body per `/v1/*` route, on the key `project/env/1`.
fn every_operation(project: &str, env: &str) -> [(&'static str, Value); 6] {
    [
        (
            Route::CurrentBatch.path(),
            batch(&[key(project, env, 1), key(project, env, 2)]),
        ),
        (
            Route::Claim.path(),
            claim(project, env, 1, "http://127.0.0.1:9/k", "c"),
        ),
        (Route::Current.path(), key(project, env, 1)),
        (Route::Release.path(), release(project, env, 1, 1)),
        (Route::Logout.path(), logout(project, env, 1, Some("r"))),
        (Route::Sessions.path(), key(project, env, 1)),
    ]
}

/// One valid body per lease route, on room or node `id` of `project`.
fn lease_operations(project: &str, id: &str) -> [(&'static str, Value); 7] {
    [
        (
            LeaseRoute::Ensure.path(),
            json!({"project": project, "room": id, "node": "n1", "ttl_ms": 15_000}),
        ),
        (
            LeaseRoute::Verify.path(),
            json!({"project": project, "room": id, "node": "n1", "token": "t"}),
        ),
        (
            LeaseRoute::Release.path(),
            json!({"project": project, "room": id, "node": "n1", "token": "t"}),
        ),
        (
            LeaseRoute::Lookup.path(),
            json!({"project": project, "room": id}),
        ),
        (
            LeaseRoute::RegisterNode.path(),
            json!({"project": project, "node": id, "addr": "10.0.0.7:7000", "ttl_ms": 15_000}),
        ),
        (
            LeaseRoute::LookupNode.path(),
            json!({"project": project, "node": id}),
        ),
        (
            LeaseRoute::DeregisterNode.path(),
            json!({"project": project, "node": id}),
        ),
    ]
}

/// Every shape of each lease answer: a grant, a renewal, another node's lease, verify true
/// and false, a lookup with and without a lease, releases that delete and that do not, and a
/// node registered, read, removed and read as absent.
async fn lease_successes(s: &Server) {
    let post = |path: &'static str, body: Value| async move {
        let answer = s.post(path, Some(TOKEN), &body, 200).await;
        serde_json::from_slice::<Value>(&answer.body).unwrap()
    };
    let lookup = json!({"project": "game", "room": "lobby"});
    assert_eq!(
        post(LeaseRoute::Lookup.path(), lookup.clone()).await,
        json!({"lease": null})
    );
    let ensure =
        |node: &str| json!({"project": "game", "room": "lobby", "node": node, "ttl_ms": 15_000});
    let granted = post(LeaseRoute::Ensure.path(), ensure("n1")).await;
    assert_eq!(
        (&granted["room"], &granted["node"], &granted["epoch"]),
        (&json!("lobby"), &json!("n1"), &json!(1)),
        "{granted}"
    );
    let renewed = post(LeaseRoute::Ensure.path(), ensure("n1")).await;
    assert_eq!(renewed["token"], granted["token"], "{renewed}");
    let elsewhere = post(LeaseRoute::Ensure.path(), ensure("n2")).await;
    assert_eq!(elsewhere["node"], "n1", "{elsewhere}");
    let held = post(LeaseRoute::Lookup.path(), lookup).await;
    assert_eq!(held["lease"]["token"], granted["token"], "{held}");
    let token = |node: &str, token: &Value| json!({"project": "game", "room": "lobby", "node": node, "token": token});
    for (node, want) in [("n1", true), ("n2", false)] {
        let verify = post(LeaseRoute::Verify.path(), token(node, &granted["token"])).await;
        assert_eq!(verify, json!({"valid": want}));
    }
    for (node, want) in [("n2", false), ("n1", true), ("n1", false)] {
        let release = post(LeaseRoute::Release.path(), token(node, &granted["token"])).await;
        assert_eq!(release, json!({"released": want}));
    }
    let register =
        json!({"project": "game", "node": "n1", "addr": "10.0.0.7:7000", "ttl_ms": 15_000});
    let registered = post(LeaseRoute::RegisterNode.path(), register).await;
    assert_eq!(
        (&registered["node"], &registered["addr"]),
        (&json!("n1"), &json!("10.0.0.7:7000")),
        "{registered}"
    );
    let node = json!({"project": "game", "node": "n1"});
    let found = post(LeaseRoute::LookupNode.path(), node.clone()).await;
    assert_eq!(found["node"]["addr"], "10.0.0.7:7000", "{found}");
    for _ in 0..2 {
        let removed = post(LeaseRoute::DeregisterNode.path(), node.clone()).await;
        assert_eq!(removed, json!({"removed": true}));
    }
    assert_eq!(
        post(LeaseRoute::LookupNode.path(), node).await,
        json!({"node": null})
    );
}

/// Every error status of every lease route.
async fn lease_failures(s: &Server) {
    for (path, body) in lease_operations("game", "r1") {
        // 400: a bad value (a zero ttl, or a project with '#'), a wrong type, not JSON.
        let mut bad = body.clone();
        if bad.get("ttl_ms").is_some() {
            bad["ttl_ms"] = json!(0);
        } else {
            bad["project"] = json!("a#b");
        }
        s.post(path, Some(TOKEN), &bad, 400).await;
        let mut mistyped = body.clone();
        mistyped["project"] = json!(5);
        s.post(path, Some(TOKEN), &mistyped, 400).await;
        s.post_raw(path, "{not json", 400).await;
        // 401 without a token or with an unknown one; 403 outside the token's projects.
        s.post(path, None, &body, 401).await;
        s.post(path, Some("unknown-token-0123456789"), &body, 401)
            .await;
        s.post(path, Some(NARROW), &body, 403).await;
        s.post_raw(
            path,
            vec![b' '; unique_wire::MAX_REQUEST_BODY_BYTES + 1],
            413,
        )
        .await;
        // 501 on the server without a lease directory.
        let refused = s.post_without_leases(path, &body, 501).await;
        let refused: Value = serde_json::from_slice(&refused.body).unwrap();
        assert_eq!(refused["error"], "not_implemented", "{refused}");
    }
    for (id, status, code) in [
        ("down", 503, "unavailable"),
        ("corrupt", 500, "corrupt"),
        ("broken", 500, "internal"),
    ] {
        for (path, body) in lease_operations("fault", id) {
            let answer = s.post(path, Some(TOKEN), &body, status).await;
            let answer: Value = serde_json::from_slice(&answer.body).unwrap();
            assert_eq!(answer["error"], code, "{path}: {answer}");
        }
    }
    futures::future::join_all(lease_operations("game", "r1").map(|(path, _)| s.post_stalled(path)))
        .await;
}

fn on_slot(mut body: Value, slot: &str) -> Value {
    body["slot"] = json!(slot);
    body
}

/// Success, with every shape of each answer.
async fn successes(s: &Server) {
    // first login, replay, replacement (an owner
    // and a kick detail in the answer), an owner with only an endpoint, absent, live and
    // tombstoned records, released and not.
    s.post("/v1/current", Some(TOKEN), &key("game", "prod", 1), 200)
        .await;
    let c1 = claim("game", "prod", 1, "http://127.0.0.1:9/a", "c1");
    s.post("/v1/claim", Some(TOKEN), &c1, 200).await;
    s.post("/v1/claim", Some(TOKEN), &c1, 200).await;
    let c2 = claim("game", "prod", 1, "http://127.0.0.1:9/a", "c2");
    let replaced = s.post("/v1/claim", Some(TOKEN), &c2, 200).await;
    assert!(String::from_utf8_lossy(&replaced.body).contains("self-replace-skipped"));
    let bare = json!({"project": "game", "env": "prod", "uid": 2,
                      "owner": {"endpoint": "http://127.0.0.1:9/b"}, "claim_id": "b"});
    s.post("/v1/claim", Some(TOKEN), &bare, 200).await;
    s.post("/v1/current", Some(TOKEN), &key("game", "prod", 2), 200)
        .await;
    // Superseded: cA wins gen 1, cB takes the key (gen 2), and cA retried is 409 with both gens.
    let ca = claim("game", "prod", 7, "http://127.0.0.1:9/a", "cA");
    let cb = claim("game", "prod", 7, "http://127.0.0.1:9/b", "cB");
    s.post("/v1/claim", Some(TOKEN), &ca, 200).await;
    s.post("/v1/claim", Some(TOKEN), &cb, 200).await;
    let superseded = s.post("/v1/claim", Some(TOKEN), &ca, 409).await;
    let body: Value = serde_json::from_slice(&superseded.body).unwrap();
    assert_eq!(
        (&body["error"], &body["gen"], &body["current_gen"]),
        (&json!("superseded"), &json!(1), &json!(2)),
        "{body}"
    );
    s.post(
        "/v1/release",
        Some(TOKEN),
        &release("game", "prod", 1, 2),
        200,
    )
    .await;
    s.post(
        "/v1/release",
        Some(TOKEN),
        &release("game", "prod", 1, 9),
        200,
    )
    .await;
    s.post("/v1/current", Some(TOKEN), &key("game", "prod", 1), 200)
        .await;
    // A batch with every kind of entry: live, tombstone, absent, another tenant, a repeat,
    // and a corrupt owner (an error entry; `/v1/current` answers that key 503).
    s.store
        .inner
        .put_raw(&Key::new("game", "prod", 3), 4, Some("{"), Some("x"), None);
    let mixed = batch(&[
        key("game", "prod", 2),
        key("game", "prod", 1),
        key("game", "prod", 99),
        key("chat", "dev", 1),
        key("game", "prod", 2),
        key("game", "prod", 3),
    ]);
    let answer = s.post("/v1/current/batch", Some(TOKEN), &mixed, 200).await;
    let views: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(views["views"][5]["error"], "unavailable", "{views}");
    assert_eq!(views["views"][0], views["views"][4], "{views}");
    s.post("/v1/current", Some(TOKEN), &key("game", "prod", 3), 503)
        .await;
    s.post("/v1/current/batch", Some(TOKEN), &batch(&[]), 200)
        .await;
    let hundred: Vec<Value> = (1..=100).map(|uid| key("game", "prod", uid)).collect();
    s.post("/v1/current/batch", Some(TOKEN), &batch(&hundred), 200)
        .await;
    let too_many: Vec<Value> = (1..=101).map(|uid| key("game", "prod", uid)).collect();
    s.post("/v1/current/batch", Some(TOKEN), &batch(&too_many), 400)
        .await;
    // One key outside the token's scope refuses the whole batch.
    let partly = batch(&[key("other", "prod", 1), key("game", "prod", 1)]);
    s.post("/v1/current/batch", Some(NARROW), &partly, 403)
        .await;
}

/// Every shape of a logout's answer, and its 403 for a token without the admin role.
async fn logout_successes(s: &Server) {
    // Admin logouts: an online session (released and kicked: this server has no kicker),
    // a corrupt one (released, `no-endpoint`), none (a tombstone, no record); with and
    // without a reason, and a null one.
    let online = claim("game", "prod", 20, "http://127.0.0.1:9/a", "l1");
    s.post("/v1/claim", Some(TOKEN), &online, 200).await;
    let done = s
        .post(
            "/v1/logout",
            Some(TOKEN),
            &logout("game", "prod", 20, Some("abuse")),
            200,
        )
        .await;
    let body: Value = serde_json::from_slice(&done.body).unwrap();
    assert_eq!(
        body,
        json!({"released": true, "gen": 1, "kicked": true, "kick_detail": null})
    );
    s.post(
        "/v1/logout",
        Some(TOKEN),
        &logout("game", "prod", 20, None),
        200,
    )
    .await;
    s.store
        .inner
        .put_raw(&Key::new("game", "prod", 21), 5, Some("{"), Some("x"), None);
    let corrupt = s
        .post(
            "/v1/logout",
            Some(TOKEN),
            &logout("game", "prod", 21, None),
            200,
        )
        .await;
    let body: Value = serde_json::from_slice(&corrupt.body).unwrap();
    assert_eq!(body["kick_detail"], "no-endpoint", "{body}");
    let null = json!({"project": "game", "env": "prod", "uid": 22, "reason": null});
    s.post("/v1/logout", Some(TOKEN), &null, 200).await;
    // Inside its scope but without the admin role: 403.
    s.post(
        "/v1/logout",
        Some(NARROW),
        &logout("other", "prod", 1, None),
        403,
    )
    .await;
}

/// Slots on every route that carries a key, and every shape of a listing.
async fn slot_successes(s: &Server) {
    let list = |uid| key("game", "prod", uid);
    let none = s.post("/v1/sessions", Some(TOKEN), &list(30), 200).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&none.body).unwrap(),
        json!({"sessions": []})
    );
    let pc = on_slot(
        claim("game", "prod", 30, "http://127.0.0.1:9/pc", "s1"),
        "pc",
    );
    let mobile = on_slot(
        claim("game", "prod", 30, "http://127.0.0.1:9/m", "s2"),
        "mobile",
    );
    let default = claim("game", "prod", 30, "http://127.0.0.1:9/d", "s3");
    for body in [&pc, &mobile, &default] {
        let answer = s.post("/v1/claim", Some(TOKEN), body, 200).await;
        let answer: Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(answer["gen"], 1, "each slot has its own gen: {answer}");
    }
    let listed = s.post("/v1/sessions", Some(TOKEN), &list(30), 200).await;
    let listed: Value = serde_json::from_slice(&listed.body).unwrap();
    let slots: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["slot"].as_str().unwrap())
        .collect();
    assert_eq!(slots, ["", "mobile", "pc"], "{listed}");
    let pc_key = on_slot(key("game", "prod", 30), "pc");
    s.post("/v1/current", Some(TOKEN), &pc_key, 200).await;
    let both = batch(&[pc_key.clone(), key("game", "prod", 30)]);
    s.post("/v1/current/batch", Some(TOKEN), &both, 200).await;
    let release_pc = on_slot(release("game", "prod", 30, 1), "pc");
    s.post("/v1/release", Some(TOKEN), &release_pc, 200).await;
    let logout_mobile = on_slot(logout("game", "prod", 30, None), "mobile");
    s.post("/v1/logout", Some(TOKEN), &logout_mobile, 200).await;
    let left = s.post("/v1/sessions", Some(TOKEN), &list(30), 200).await;
    let left: Value = serde_json::from_slice(&left.body).unwrap();
    assert_eq!(
        left,
        json!({"sessions": [{"slot": "", "gen": 1,
            "owner": {"region": "eu", "cluster": "c1", "endpoint": "http://127.0.0.1:9/d"}}]})
    );
    // A bad slot is a 400 on every route that takes one; the listing takes none.
    for (path, body) in [
        ("/v1/claim", on_slot(pc.clone(), "a#b")),
        ("/v1/current", on_slot(list(30), &"s".repeat(65))),
        ("/v1/release", on_slot(release_pc.clone(), "tab\t")),
        ("/v1/logout", on_slot(logout_mobile.clone(), "a#b")),
        ("/v1/sessions", on_slot(list(30), "pc")),
    ] {
        s.post(path, Some(TOKEN), &body, 400).await;
    }
    // A corrupt owner on any slot makes the listing 503.
    s.store.inner.put_raw(
        &Key::new("game", "prod", 31).with_slot("tv"),
        2,
        Some("{"),
        Some("x"),
        None,
    );
    s.post("/v1/sessions", Some(TOKEN), &list(31), 503).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_of_the_server_matches_the_document() {
    let server = Server::start().await;
    let s = &server;

    successes(s).await;
    logout_successes(s).await;
    slot_successes(s).await;
    lease_successes(s).await;
    lease_failures(s).await;

    for (path, body) in every_operation("game", "prod") {
        // 400: a bad value, a wrong type, and a body that is not JSON.
        let mut bad = body.clone();
        let uid = match bad.get_mut("keys") {
            Some(keys) => &mut keys[1]["uid"],
            None => &mut bad["uid"],
        };
        *uid = json!(0);
        s.post(path, Some(TOKEN), &bad, 400).await;
        let uid = match bad.get_mut("keys") {
            Some(keys) => &mut keys[1]["uid"],
            None => &mut bad["uid"],
        };
        *uid = json!("1");
        s.post(path, Some(TOKEN), &bad, 400).await;
        s.post_raw(path, "{not json", 400).await;
        // 401 without a token or with an unknown one; 403 outside the token's scope.
        s.post(path, None, &body, 401).await;
        s.post(path, Some("unknown-token-0123456789"), &body, 401)
            .await;
        s.post(path, Some(NARROW), &body, 403).await;
        // 413, and the store's 429 and 503.
        s.post_raw(
            path,
            vec![b' '; unique_wire::MAX_REQUEST_BODY_BYTES + 1],
            413,
        )
        .await;
    }
    for (path, body) in every_operation("fault", "throttled") {
        s.post(path, Some(TOKEN), &body, 429).await;
    }
    for (path, body) in every_operation("fault", "down") {
        s.post(path, Some(TOKEN), &body, 503).await;
    }
    // 408: one body per operation that stalls past the body timeout, all at once.
    futures::future::join_all(
        every_operation("game", "prod").map(|(path, _)| s.post_stalled(path)),
    )
    .await;

    // Probes, ready and not.
    for path in [Route::Health.path(), Route::Ready.path()] {
        assert_eq!(&s.probe(Method::GET, path, 200).await.body[..], b"ok");
        s.probe(Method::HEAD, path, 200).await;
    }
    s.store.not_ready.store(true, Ordering::SeqCst);
    s.probe(Method::GET, Route::Ready.path(), 503).await;
    s.probe(Method::HEAD, Route::Ready.path(), 503).await;
    s.probe(Method::GET, Route::Health.path(), 200).await;

    // Unknown paths and methods.
    s.probe(Method::GET, "/v1/nope", 404).await;
    s.probe(Method::POST, "/", 404).await;
    for route in Route::ALL {
        let wrong = if route.allows(&Method::POST) {
            Method::GET
        } else {
            Method::POST
        };
        s.probe(wrong, route.path(), 405).await;
    }

    let seen: BTreeSet<String> = server
        .doc
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(at, _, _)| at.clone())
        .collect();
    let documented = server.doc.documented();
    let never_seen: Vec<_> = documented.difference(&seen).collect();
    assert!(
        never_seen.is_empty(),
        "documented but never answered: {never_seen:?}"
    );
}

#[test]
fn the_document_lists_exactly_the_routes_and_methods() {
    let doc = Document::load();
    let paths: BTreeSet<&str> = doc.root["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let routes: BTreeSet<&str> = Route::ALL.iter().map(|r| r.path()).collect();
    assert_eq!(paths, routes, "document paths against unique_wire::Route");
    for route in Route::ALL {
        for method in &METHODS {
            assert_eq!(
                doc.operation(method, route.path()).is_some(),
                route.allows(method),
                "{method} {}: document and Route::allows disagree",
                route.path()
            );
        }
    }
}

#[test]
fn the_schemas_reject_what_the_server_rejects() {
    // The document is not vacuous: its request and answer schemas refuse shapes the server
    // never sends or accepts.
    let doc = Document::load();
    let claim_request = "/components/schemas/ClaimRequest";
    let valid = claim("p", "e", 1, "http://h/k", "c");
    assert!(doc.validator(claim_request).is_valid(&valid));
    let mut unknown = valid.clone();
    unknown["owner"]["zone"] = json!("z");
    assert!(!doc.validator(claim_request).is_valid(&unknown));
    let view = "/components/schemas/CurrentView";
    assert!(
        doc.validator(view)
            .is_valid(&json!({"gen": 0, "owner": null, "exists": false}))
    );
    assert!(
        !doc.validator(view)
            .is_valid(&json!({"gen": 0, "exists": false}))
    );
    let error = "/components/responses/Forbidden/content/application~1json/schema";
    assert!(
        !doc.validator(error)
            .is_valid(&json!({"error": "not_found", "message": "m"}))
    );
    let superseded = "/components/schemas/SupersededError";
    let answer = json!({"error": "superseded", "message": "m", "gen": 1, "current_gen": 2});
    assert!(doc.validator(superseded).is_valid(&answer));
    for missing in ["gen", "current_gen"] {
        let mut partial = answer.clone();
        partial.as_object_mut().unwrap().remove(missing);
        assert!(!doc.validator(superseded).is_valid(&partial), "{partial}");
    }
    // The plain error shape has no room for the gens.
    let plain = "/components/schemas/Error";
    assert!(!doc.validator(plain).is_valid(&answer));
    // A logout names a key (with or without a slot) and maybe a reason, nothing else; its
    // answer always carries all four fields.
    let logout_request = "/components/schemas/LogoutRequest";
    for valid in [
        logout("p", "e", 1, None),
        logout("p", "e", 1, Some("r")),
        json!({"project": "p", "env": "e", "uid": 1, "reason": null}),
        json!({"project": "p", "env": "e", "uid": 1, "slot": "pc"}),
    ] {
        assert!(doc.validator(logout_request).is_valid(&valid), "{valid}");
    }
    for invalid in [
        json!({"project": "p", "env": "e", "uid": 1, "device": "a"}),
        json!({"project": "p", "env": "e", "uid": 1, "slot": 5}),
        json!({"project": "p", "env": "e", "uid": 1, "reason": ""}),
        json!({"project": "p", "env": "e", "uid": 1, "reason": 5}),
        json!({"project": "p", "env": "e"}),
    ] {
        assert!(
            !doc.validator(logout_request).is_valid(&invalid),
            "{invalid}"
        );
    }
    // A listing takes a user, never a slot, and answers every field of every session.
    let user_request = "/components/schemas/UserRequest";
    assert!(doc.validator(user_request).is_valid(&key("p", "e", 1)));
    let with_slot = json!({"project": "p", "env": "e", "uid": 1, "slot": "pc"});
    assert!(!doc.validator(user_request).is_valid(&with_slot));
    let sessions_answer = "/components/schemas/SessionsAnswer";
    let session = json!({"slot": "", "gen": 1, "owner": {"endpoint": "http://h/k"}});
    assert!(
        doc.validator(sessions_answer)
            .is_valid(&json!({"sessions": [session]}))
    );
    let mut partial = session.clone();
    partial.as_object_mut().unwrap().remove("slot");
    assert!(
        !doc.validator(sessions_answer)
            .is_valid(&json!({"sessions": [partial]}))
    );
    let logout_answer = "/components/schemas/LogoutAnswer";
    let released = json!({"released": true, "gen": 3, "kicked": false, "kick_detail": "timeout"});
    assert!(doc.validator(logout_answer).is_valid(&released));
    let mut self_replace = released.clone();
    self_replace["kick_detail"] = json!("self-replace-skipped");
    assert!(
        !doc.validator(logout_answer).is_valid(&self_replace),
        "a logout replaces no one"
    );
    let mut partial = released;
    partial.as_object_mut().unwrap().remove("kick_detail");
    assert!(!doc.validator(logout_answer).is_valid(&partial));
}

#[test]
fn the_lease_schemas_reject_what_the_server_rejects() {
    let doc = Document::load();
    // A lease request takes a positive whole ttl of at most an hour, and nothing else.
    let ensure = "/components/schemas/LeaseEnsureRequest";
    let valid = json!({"project": "p", "room": "r", "node": "n", "ttl_ms": 3_600_000});
    assert!(doc.validator(ensure).is_valid(&valid));
    for (field, value) in [
        ("ttl_ms", json!(0)),
        ("ttl_ms", json!(-1)),
        ("ttl_ms", json!(1.5)),
        ("ttl_ms", json!(3_600_001)),
        ("ttl_ms", json!("1")),
        ("room", json!("")),
        ("extra", json!(1)),
    ] {
        let mut invalid = valid.clone();
        invalid[field] = value;
        assert!(!doc.validator(ensure).is_valid(&invalid), "{invalid}");
    }
    let lease = "/components/schemas/Lease";
    let answer = json!({"room": "r", "node": "n", "token": "t", "epoch": 1, "ttl_left_ms": 0});
    assert!(doc.validator(lease).is_valid(&answer));
    let mut partial = answer.clone();
    partial.as_object_mut().unwrap().remove("epoch");
    assert!(!doc.validator(lease).is_valid(&partial));
    let lookup = "/components/schemas/LeaseLookupAnswer";
    assert!(doc.validator(lookup).is_valid(&json!({"lease": null})));
    assert!(!doc.validator(lookup).is_valid(&json!({})));
    let removed = "/components/schemas/NodeDeregisterAnswer";
    assert!(!doc.validator(removed).is_valid(&json!({"removed": false})));
}
