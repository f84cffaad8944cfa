//! HTTP helpers of the lease route tests: one call, its answer, the bodies.

use super::*;

/// One answer: status, `Allow` and `WWW-Authenticate`, and the body as JSON (`null` when
/// it is not JSON).
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) allow: Option<String>,
    pub(crate) challenge: Option<String>,
    pub(crate) body: Value,
}

pub(crate) async fn call(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> Answer {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "test")
        .header("content-type", "application/json");
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let req = req.body(Full::new(Bytes::copy_from_slice(body))).unwrap();
    let res = sender.send_request(req).await.unwrap();
    let header = |name: &str| {
        res.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (status, allow, challenge) = (res.status(), header("allow"), header("www-authenticate"));
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        allow,
        challenge,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

pub(crate) async fn post(
    addr: SocketAddr,
    route: LeaseRoute,
    token: Option<&str>,
    body: &Value,
) -> Answer {
    let bytes = serde_json::to_vec(body).unwrap();
    call(addr, Method::POST, route.path(), token, &bytes).await
}

/// POSTs with the `game` token, expecting 200; the body.
pub(crate) async fn ok(addr: SocketAddr, route: LeaseRoute, body: &Value) -> Value {
    let answer = post(addr, route, Some(GAME), body).await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "{route:?} {body}: {}",
        answer.body
    );
    answer.body
}

/// Asserts a 400 with exactly the error body shape, whose message contains `needle`.
#[track_caller]
pub(crate) fn assert_invalid(answer: &Answer, needle: &str, what: &str) {
    assert_eq!(
        answer.status,
        StatusCode::BAD_REQUEST,
        "{what}: {}",
        answer.body
    );
    let fields: Vec<&String> = answer.body.as_object().unwrap().keys().collect();
    assert_eq!(fields, ["error", "message"], "{what}: {}", answer.body);
    assert_eq!(answer.body["error"], "invalid_params", "{what}");
    let message = answer.body["message"].as_str().unwrap();
    assert!(
        message.contains(needle),
        "{what}: {message:?} lacks {needle:?}"
    );
}

pub(crate) fn ensure_body(project: &str, room: &str, node: &str, ttl_ms: u64) -> Value {
    json!({"project": project, "room": room, "node": node, "ttl_ms": ttl_ms})
}

pub(crate) fn token_body(project: &str, room: &str, node: &str, token: &Value) -> Value {
    json!({"project": project, "room": room, "node": node, "token": token})
}
