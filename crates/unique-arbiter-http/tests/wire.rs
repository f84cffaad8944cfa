//! The wire contract (`docs/design.md#wire-contract`) over real HTTP: every route, every status code,
//! and malformed input of every kind.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use unique_arbiter_http::{ArbiterService, serve};
use unique_core::{
    Arbiter, CasOutcome, CurrentView, Error, Key, Owner, OwnerState, Store, async_trait,
};
use unique_store_memory::MemoryStore;

/// Starts a server on a free loopback port; it stops when the test's runtime ends.
async fn start(store: Arc<dyn Store>) -> SocketAddr {
    start_service(ArbiterService::new(Arbiter::new(store))).await
}

async fn start_service(service: ArbiterService<Arc<dyn Store>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, service, std::future::pending()));
    addr
}

async fn memory_server() -> SocketAddr {
    start(Arc::new(MemoryStore::new())).await
}

struct Answer {
    status: StatusCode,
    content_type: String,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not json ({e}): {:?}", self.body))
    }

    /// Asserts an error answer with `status`, `code`, and a message containing `needle`.
    fn assert_error(&self, status: StatusCode, code: &str, needle: &str) {
        assert_eq!(self.status, status, "body: {:?}", self.body);
        assert_eq!(self.content_type, "application/json");
        let body = self.json();
        assert_eq!(body["error"], code, "{body}");
        let message = body["message"].as_str().expect("message is a string");
        assert!(
            message.contains(needle),
            "{message:?} should mention {needle:?}"
        );
    }
}

async fn send<B>(addr: SocketAddr, req: Request<B>) -> Answer
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let res = sender.send_request(req).await.unwrap();
    let status = res.status();
    let content_type = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        content_type,
        body,
    }
}

async fn post(addr: SocketAddr, path: &str, body: impl Into<Bytes>) -> Answer {
    let req = Request::post(path)
        .header("host", "test")
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap();
    send(addr, req).await
}

async fn post_json(addr: SocketAddr, path: &str, body: &Value) -> Answer {
    post(addr, path, serde_json::to_vec(body).unwrap()).await
}

fn claim_body(uid: i64, endpoint: &str, claim_id: &str) -> Value {
    json!({
        "project": "wire", "env": "test", "uid": uid,
        "owner": {"region": "eu", "cluster": "c1", "endpoint": endpoint},
        "claim_id": claim_id,
    })
}

#[tokio::test]
async fn claim_replay_current_release_round_trip() {
    let addr = memory_server().await;
    let first = post_json(
        addr,
        "/v1/claim",
        &claim_body(1, "http://127.0.0.1:9/a", "c1"),
    )
    .await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.content_type, "application/json");
    assert_eq!(
        first.json(),
        json!({"gen": 1, "prev_gen": 0, "has_prev": false, "prev_owner": null,
               "kicked": false, "kick_detail": null, "replayed": false})
    );

    let replay = post_json(
        addr,
        "/v1/claim",
        &claim_body(1, "http://127.0.0.1:9/a", "c1"),
    )
    .await;
    assert_eq!(replay.json()["replayed"], true);
    assert_eq!(replay.json()["gen"], 1);

    // Same endpoint: the node replaces its own session without calling itself.
    let same = post_json(
        addr,
        "/v1/claim",
        &claim_body(1, "http://127.0.0.1:9/a", "c2"),
    )
    .await;
    assert_eq!(
        same.json(),
        json!({"gen": 2, "prev_gen": 1, "has_prev": true,
               "prev_owner": {"region": "eu", "cluster": "c1", "endpoint": "http://127.0.0.1:9/a"},
               "kicked": false, "kick_detail": "self-replace-skipped", "replayed": false})
    );

    let key = json!({"project": "wire", "env": "test", "uid": 1});
    let current = post_json(addr, "/v1/current", &key).await;
    assert_eq!(
        current.json(),
        json!({"gen": 2, "owner": {"region": "eu", "cluster": "c1", "endpoint": "http://127.0.0.1:9/a"}, "exists": true})
    );

    let stale = post_json(
        addr,
        "/v1/release",
        &json!({"project": "wire", "env": "test", "uid": 1, "gen": 1}),
    )
    .await;
    assert_eq!(stale.json(), json!({"released": false}));
    let released = post_json(
        addr,
        "/v1/release",
        &json!({"project": "wire", "env": "test", "uid": 1, "gen": 2}),
    )
    .await;
    assert_eq!(released.json(), json!({"released": true}));
    let tomb = post_json(addr, "/v1/current", &key).await;
    assert_eq!(
        tomb.json(),
        json!({"gen": 2, "owner": null, "exists": true})
    );

    let absent = post_json(
        addr,
        "/v1/current",
        &json!({"project": "wire", "env": "test", "uid": 99}),
    )
    .await;
    assert_eq!(
        absent.json(),
        json!({"gen": 0, "owner": null, "exists": false})
    );
}

#[tokio::test]
async fn owner_region_and_cluster_may_be_omitted() {
    let addr = memory_server().await;
    let body = json!({"project": "p", "env": "e", "uid": 5,
                      "owner": {"endpoint": "https://h/k"}, "claim_id": "c"});
    let answer = post_json(addr, "/v1/claim", &body).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    let current = post_json(
        addr,
        "/v1/current",
        &json!({"project": "p", "env": "e", "uid": 5}),
    )
    .await;
    assert_eq!(current.json()["owner"], json!({"endpoint": "https://h/k"}));
}

fn probe(method: Method, path: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", "t")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[tokio::test]
async fn healthz_answers_ok() {
    let addr = memory_server().await;
    let answer = send(addr, probe(Method::GET, "/healthz")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(&answer.body[..], b"ok");
}

#[tokio::test]
async fn readyz_answers_ok_when_the_store_answers() {
    let addr = memory_server().await;
    let answer = send(addr, probe(Method::GET, "/readyz")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.content_type, "text/plain");
    assert_eq!(&answer.body[..], b"ok");
    let head = send(addr, probe(Method::HEAD, "/readyz")).await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty(), "{:?}", head.body);
}

#[tokio::test]
async fn unknown_path_is_404_json() {
    let addr = memory_server().await;
    post(addr, "/v1/nope", "{}")
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found", "path");
    post(addr, "/", "{}")
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found", "path");
}

#[tokio::test]
async fn wrong_method_is_405_on_every_route() {
    let addr = memory_server().await;
    for (method, path) in [
        (Method::GET, "/v1/claim"),
        (Method::PUT, "/v1/current"),
        (Method::DELETE, "/v1/release"),
        (Method::POST, "/healthz"),
        (Method::PUT, "/readyz"),
    ] {
        send(addr, probe(method, path)).await.assert_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "method",
        );
    }
}

#[tokio::test]
async fn body_over_64k_is_413_with_length_and_chunked() {
    let addr = memory_server().await;
    let big = vec![b' '; 65 * 1024];
    post(addr, "/v1/claim", big.clone()).await.assert_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        "65536",
    );

    // No Content-Length: the limit holds while streaming.
    let chunks = big
        .chunks(8 * 1024)
        .map(|c| Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::copy_from_slice(c))))
        .collect::<Vec<_>>();
    let req = Request::post("/v1/claim")
        .header("host", "t")
        .body(StreamBody::new(futures::stream::iter(chunks)))
        .unwrap();
    send(addr, req)
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "too_large", "65536");

    // Exactly 64 KiB of valid JSON padding is accepted as a body (and then parsed).
    let mut at_limit = serde_json::to_vec(&claim_body(3, "http://h/k", "c")).unwrap();
    at_limit.resize(64 * 1024, b' ');
    assert_eq!(
        post(addr, "/v1/claim", at_limit).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn malformed_json_is_400() {
    let addr = memory_server().await;
    for (path, body) in [
        ("/v1/claim", "{"),
        ("/v1/claim", ""),
        ("/v1/current", "not json"),
        ("/v1/release", "{\"project\":\"p\"} trailing"),
        ("/v1/current", "[1,2]"),
        ("/v1/current", "null"),
    ] {
        let answer = post(addr, path, body).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{path} {body:?}");
        assert_eq!(answer.json()["error"], "invalid_params");
    }
    post(addr, "/v1/claim", "{").await.assert_error(
        StatusCode::BAD_REQUEST,
        "invalid_params",
        "malformed json",
    );
    // A byte that is not UTF-8 inside a string value: refused, nothing claimed.
    let mut not_utf8 = serde_json::to_vec(&claim_body(5, "http://h/k", "cid")).unwrap();
    let at = not_utf8.windows(3).position(|w| w == b"cid").unwrap();
    not_utf8[at] = 0xff;
    post(addr, "/v1/claim", not_utf8).await.assert_error(
        StatusCode::BAD_REQUEST,
        "invalid_params",
        "malformed json",
    );
    let key = json!({"project": "wire", "env": "test", "uid": 5});
    let current = post_json(addr, "/v1/current", &key).await;
    assert_eq!(current.json()["exists"], false, "{:?}", current.json());
}

#[tokio::test]
async fn missing_field_is_400_naming_it() {
    let addr = memory_server().await;
    let full = claim_body(1, "http://h/k", "c");
    for field in ["project", "env", "uid", "owner", "claim_id"] {
        let mut body = full.clone();
        body.as_object_mut().unwrap().remove(field);
        post_json(addr, "/v1/claim", &body).await.assert_error(
            StatusCode::BAD_REQUEST,
            "invalid_params",
            field,
        );
    }
    let mut no_endpoint = full.clone();
    no_endpoint["owner"]
        .as_object_mut()
        .unwrap()
        .remove("endpoint");
    post_json(addr, "/v1/claim", &no_endpoint)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_params", "endpoint");
    post_json(
        addr,
        "/v1/release",
        &json!({"project": "p", "env": "e", "uid": 1}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_params", "gen");
    post_json(addr, "/v1/current", &json!({"project": "p", "uid": 1}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_params", "env");
}

#[tokio::test]
async fn unknown_field_at_any_level_is_400_naming_it() {
    let addr = memory_server().await;
    let mut top = claim_body(1, "http://h/k", "c");
    top["surprise"] = json!(1);
    post_json(addr, "/v1/claim", &top).await.assert_error(
        StatusCode::BAD_REQUEST,
        "invalid_params",
        "surprise",
    );
    let mut nested = claim_body(1, "http://h/k", "c");
    nested["owner"]["zone"] = json!("z");
    post_json(addr, "/v1/claim", &nested).await.assert_error(
        StatusCode::BAD_REQUEST,
        "invalid_params",
        "owner.zone",
    );
    post_json(
        addr,
        "/v1/current",
        &json!({"project": "p", "env": "e", "uid": 1, "gen": 1}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_params", "gen");
    post_json(
        addr,
        "/v1/release",
        &json!({"project": "p", "env": "e", "uid": 1, "gen": 1, "force": true}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_params", "force");
}

#[tokio::test]
async fn wrong_types_are_400_naming_the_field() {
    let addr = memory_server().await;
    let cases = [
        ("uid", json!("1")),
        ("uid", json!(1.5)),
        ("uid", json!(null)),
        ("project", json!(7)),
        ("claim_id", json!(["c"])),
        ("owner", json!("http://h/k")),
    ];
    for (field, value) in cases {
        let mut body = claim_body(1, "http://h/k", "c");
        body[field] = value.clone();
        post_json(addr, "/v1/claim", &body).await.assert_error(
            StatusCode::BAD_REQUEST,
            "invalid_params",
            field,
        );
    }
    let mut endpoint = claim_body(1, "http://h/k", "c");
    endpoint["owner"]["endpoint"] = json!(5);
    post_json(addr, "/v1/claim", &endpoint).await.assert_error(
        StatusCode::BAD_REQUEST,
        "invalid_params",
        "owner.endpoint",
    );
    post_json(
        addr,
        "/v1/release",
        &json!({"project": "p", "env": "e", "uid": 1, "gen": "2"}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_params", "gen");
}

#[tokio::test]
async fn uid_zero_and_negative_are_400() {
    let addr = memory_server().await;
    for uid in [0, -1] {
        post_json(addr, "/v1/claim", &claim_body(uid, "http://h/k", "c"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_params", "uid");
        post_json(
            addr,
            "/v1/current",
            &json!({"project": "p", "env": "e", "uid": uid}),
        )
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_params", "uid");
    }
    // Validated before anything else: an invalid key is 400 even when gen <= 0.
    post_json(
        addr,
        "/v1/release",
        &json!({"project": "p", "env": "e", "uid": 0, "gen": 0}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_params", "uid");
    // A valid key with gen <= 0 is a no-op, not an error.
    let noop = post_json(
        addr,
        "/v1/release",
        &json!({"project": "p", "env": "e", "uid": 1, "gen": 0}),
    )
    .await;
    assert_eq!(noop.json(), json!({"released": false}));
}

#[tokio::test]
async fn control_character_in_each_string_field_is_400() {
    let addr = memory_server().await;
    let base = claim_body(1, "http://h/k", "c");
    let fields: [&[&str]; 6] = [
        &["project"],
        &["env"],
        &["claim_id"],
        &["owner", "region"],
        &["owner", "cluster"],
        &["owner", "endpoint"],
    ];
    for path in fields {
        let mut body = base.clone();
        let slot = path.iter().fold(&mut body, |v, p| &mut v[*p]);
        let value = format!("{}\u{7}x", slot.as_str().unwrap());
        *slot = json!(value);
        post_json(addr, "/v1/claim", &body).await.assert_error(
            StatusCode::BAD_REQUEST,
            "invalid_params",
            path.last().unwrap(),
        );
    }
    post_json(
        addr,
        "/v1/current",
        &json!({"project": "p\n", "env": "e", "uid": 1}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_params", "project");
}

#[tokio::test]
async fn bad_endpoint_never_echoes_its_query_string() {
    let addr = memory_server().await;
    let answer = post_json(
        addr,
        "/v1/claim",
        &claim_body(1, "ftp://h/k?token=hunter2", "c"),
    )
    .await;
    answer.assert_error(StatusCode::BAD_REQUEST, "invalid_params", "endpoint");
    assert!(!String::from_utf8_lossy(&answer.body).contains("hunter2"));
}

/// A store that answers no call: every call fails the same way, or never finishes.
enum BrokenStore {
    Fails(fn() -> Error),
    Hangs,
}

impl BrokenStore {
    async fn answer<T>(&self) -> Result<T, Error> {
        match self {
            Self::Fails(fail) => Err(fail()),
            Self::Hangs => std::future::pending().await,
        }
    }
}

#[async_trait]
impl Store for BrokenStore {
    async fn read_owner(&self, _: &Key) -> Result<OwnerState, Error> {
        self.answer().await
    }
    async fn claim_cas(
        &self,
        _: &Key,
        _: &Owner,
        _: &str,
        _: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        self.answer().await
    }
    async fn current(&self, _: &Key) -> Result<CurrentView, Error> {
        self.answer().await
    }
    async fn release(&self, _: &Key, _: i64) -> Result<bool, Error> {
        self.answer().await
    }
}

/// Every route answers `status` / `code` when the store fails with `fail()`.
async fn assert_every_route_fails(
    fail: fn() -> Error,
    status: StatusCode,
    code: &str,
    needle: &str,
) {
    let addr = start(Arc::new(BrokenStore::Fails(fail))).await;
    let key = json!({"project": "p", "env": "e", "uid": 1});
    let release = json!({"project": "p", "env": "e", "uid": 1, "gen": 1});
    for (path, body) in [
        ("/v1/claim", claim_body(1, "http://h/k", "c")),
        ("/v1/current", key),
        ("/v1/release", release),
    ] {
        post_json(addr, path, &body)
            .await
            .assert_error(status, code, needle);
    }
}

#[tokio::test]
async fn throttled_store_is_429_on_every_route() {
    assert_every_route_fails(
        || Error::Throttled,
        StatusCode::TOO_MANY_REQUESTS,
        "throttled",
        "throttled",
    )
    .await;
}

#[tokio::test]
async fn unavailable_store_is_503_on_every_route() {
    assert_every_route_fails(
        || Error::unavailable("disk on fire"),
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "disk on fire",
    )
    .await;
}

/// A failing store check is 503 with its reason, a throttle included (the store cannot
/// take traffic now); `/healthz` does not ask the store.
#[tokio::test]
async fn readyz_is_503_with_the_reason_when_the_store_check_fails() {
    let addr = start(Arc::new(BrokenStore::Fails(|| {
        Error::unavailable("disk on fire")
    })))
    .await;
    send(addr, probe(Method::GET, "/readyz"))
        .await
        .assert_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "store not ready: disk on fire",
        );
    let head = send(addr, probe(Method::HEAD, "/readyz")).await;
    assert_eq!(head.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        send(addr, probe(Method::GET, "/healthz")).await.status,
        StatusCode::OK
    );

    let throttled = start(Arc::new(BrokenStore::Fails(|| Error::Throttled))).await;
    send(throttled, probe(Method::GET, "/readyz"))
        .await
        .assert_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "throttled");
}

/// The ready timeout answers for a store that does not: 503, saying so.
#[tokio::test]
async fn readyz_is_503_when_the_store_check_hangs() {
    let service = ArbiterService::new(Arbiter::new(Arc::new(BrokenStore::Hangs) as Arc<dyn Store>))
        .ready_timeout(Duration::from_millis(100));
    let addr = start_service(service).await;
    send(addr, probe(Method::GET, "/readyz"))
        .await
        .assert_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "store not ready: no answer within 100ms",
        );
}

#[tokio::test]
async fn keep_alive_serves_many_requests_on_one_connection() {
    let addr = memory_server().await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    for uid in 1..=20 {
        let body = serde_json::to_vec(&claim_body(uid, "http://h/k", "c")).unwrap();
        let req = Request::post("/v1/claim")
            .header("host", "t")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let res = sender.send_request(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["gen"], 1);
    }
}
