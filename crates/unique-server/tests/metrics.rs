//! `GET /metrics` of the real binary: a scripted sequence of claims (first login, replay, kicks
//! ending confirmed, non-2xx, connect-error and self-replace), releases, an invalid claim and
//! refused callers, then exact counts per label from the scrape, which Prometheus' own linter
//! (`promtool check metrics`) must accept.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, announced_addr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use unique_kick_contract::{Behaviour, Peer};
use unique_testsupport::ChildGuard;

const TOKEN: &str = "metrics-test-token-0123456789";
/// Nothing listens on port 1 of loopback: a kick there is refused at connect.
const CLOSED: &str = "http://127.0.0.1:1/kick";

/// One request on a fresh connection; the status code and the body.
async fn send(
    addr: &str,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &str,
) -> (u16, String) {
    let auth = auth.map_or(String::new(), |a| format!("authorization: {a}\r\n"));
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n{auth}\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

/// A claim of `game/prod/uid` by `endpoint` with the token; the answer's body.
async fn claim(addr: &str, uid: i64, endpoint: &str, claim_id: &str) -> (u16, String) {
    let body = format!(
        r#"{{"project":"game","env":"prod","uid":{uid},"owner":{{"endpoint":"{endpoint}"}},"claim_id":"{claim_id}"}}"#
    );
    send(addr, "POST", "/v1/claim", Some(&bearer()), &body).await
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// Every sample of an exposition: `name{labels}` → value.
fn samples(exposition: &str) -> BTreeMap<&str, f64> {
    exposition
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series, value.parse().unwrap())
        })
        .collect()
}

fn start_server(extra: &[&str]) -> (String, ChildGuard, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    common::write_secret(
        &tokens,
        &format!(r#"{{"tokens": [{{"name": "game", "token": "{TOKEN}", "projects": ["game"]}}]}}"#),
    );
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--store", "memory"])
        .args(["--kick-timeout", "5s", "--auth-tokens"])
        .arg(&tokens)
        .args(extra)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    (addr, ChildGuard::new(child, "unique-server"), dir)
}

/// What the scrape must say after the script.
const EXPECTED: [(&str, f64); 32] = [
    (r#"unique_claims_total{result="ok"}"#, 6.0),
    (r#"unique_claims_total{result="invalid_params"}"#, 1.0),
    (r#"unique_claims_total{result="throttled"}"#, 0.0),
    (r#"unique_claims_total{result="unavailable"}"#, 0.0),
    ("unique_claim_replays_total", 1.0),
    (r#"unique_kicks_total{detail="confirmed"}"#, 1.0),
    (r#"unique_kicks_total{detail="non-2xx"}"#, 1.0),
    (r#"unique_kicks_total{detail="connect-error"}"#, 1.0),
    (r#"unique_kicks_total{detail="self-replace-skipped"}"#, 1.0),
    (r#"unique_kicks_total{detail="timeout"}"#, 0.0),
    (r#"unique_kicks_total{detail="no-endpoint"}"#, 0.0),
    (r#"unique_releases_total{released="true"}"#, 1.0),
    (r#"unique_releases_total{released="false"}"#, 1.0),
    (r#"unique_auth_rejections_total{reason="missing"}"#, 1.0),
    (r#"unique_auth_rejections_total{reason="malformed"}"#, 1.0),
    (r#"unique_auth_rejections_total{reason="unknown"}"#, 1.0),
    (r#"unique_auth_rejections_total{reason="forbidden"}"#, 1.0),
    ("unique_store_lost_races_total", 0.0),
    // The six claims that reached the store took one attempt each; the invalid one none.
    ("unique_claim_attempts_count", 6.0),
    ("unique_claim_attempts_sum", 6.0),
    (r#"unique_claim_attempts_bucket{le="1"}"#, 6.0),
    ("unique_claim_duration_seconds_count", 7.0),
    // The slot limit (on by default) counts the user's sessions before a store that writes
    // first (C11) may take a vacant slot: every claim lists first. The first login then
    // writes first; the replay and the four takeovers find their slot listed online and
    // read instead, and each takeover then makes its fenced write.
    (
        r#"unique_store_operation_duration_seconds_count{operation="list_sessions"}"#,
        6.0,
    ),
    (
        r#"unique_store_operation_duration_seconds_count{operation="claim_vacant"}"#,
        1.0,
    ),
    (
        r#"unique_store_operation_duration_seconds_count{operation="read_owner"}"#,
        5.0,
    ),
    (
        r#"unique_store_operation_duration_seconds_count{operation="claim_cas"}"#,
        4.0,
    ),
    (
        r#"unique_store_operation_duration_seconds_count{operation="current"}"#,
        1.0,
    ),
    (
        r#"unique_store_operation_duration_seconds_count{operation="release"}"#,
        2.0,
    ),
    (
        r#"unique_http_connections_refused_total{reason="max-connections"}"#,
        0.0,
    ),
    (
        r#"unique_http_connections_refused_total{reason="max-connections-per-ip"}"#,
        0.0,
    ),
    // The scrape itself.
    ("unique_http_requests_in_flight", 1.0),
    ("unique_http_connections_open", 1.0),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_scripted_sequence_exactly_and_pass_promtool() {
    let (addr, _server, _dir) = start_server(&[]);
    let up = Peer::start(Behaviour::status(200)).await;
    let failing = Peer::start(Behaviour::status(500)).await;
    let (up, failing) = (up.http_url("/kick"), failing.http_url("/kick"));

    let ok = |(status, body): (u16, String)| {
        assert_eq!(status, 200, "{body}");
        body
    };
    // First login and its replay.
    assert!(ok(claim(&addr, 1, &up, "c1").await).contains(r#""gen":1"#));
    assert!(ok(claim(&addr, 1, &up, "c1").await).contains(r#""replayed":true"#));
    // Takeovers whose kicks end four ways.
    assert!(ok(claim(&addr, 1, &failing, "c2").await).contains(r#""kicked":true"#));
    assert!(ok(claim(&addr, 1, CLOSED, "c3").await).contains(r#""kick_detail":"non-2xx""#));
    let refused_connect = ok(claim(&addr, 1, &up, "c4").await);
    assert!(refused_connect.contains(r#""kick_detail":"connect-error""#));
    let own = ok(claim(&addr, 1, &up, "c5").await);
    assert!(
        own.contains(r#""kick_detail":"self-replace-skipped""#),
        "{own}"
    );
    assert!(own.contains(r#""gen":5"#), "{own}");
    // Releases: the live gen, then a stale one.
    let release = |generation: i64| {
        let body = format!(r#"{{"project":"game","env":"prod","uid":1,"gen":{generation}}}"#);
        let addr = addr.clone();
        async move { send(&addr, "POST", "/v1/release", Some(&bearer()), &body).await }
    };
    assert!(ok(release(5).await).contains(r#""released":true"#));
    assert!(ok(release(2).await).contains(r#""released":false"#));
    let current = r#"{"project":"game","env":"prod","uid":1}"#;
    ok(send(&addr, "POST", "/v1/current", Some(&bearer()), current).await);
    // An invalid claim, and four refused callers.
    assert_eq!(claim(&addr, 0, &up, "c6").await.0, 400);
    for auth in [
        None,
        Some("Basic Zm9vOmJhcg=="),
        Some("Bearer unknown-token-0123456789"),
    ] {
        assert_eq!(
            send(&addr, "POST", "/v1/current", auth, current).await.0,
            401
        );
    }
    let elsewhere = r#"{"project":"other","env":"prod","uid":1}"#;
    assert_eq!(
        send(&addr, "POST", "/v1/current", Some(&bearer()), elsewhere)
            .await
            .0,
        403
    );

    // Open without a token, like /healthz; other methods are refused.
    assert_eq!(send(&addr, "POST", "/metrics", None, "").await.0, 405);
    let exposition = scrape_when_only_the_scrape_is_open(&addr).await;
    let got = samples(&exposition);
    for (series, value) in EXPECTED {
        assert_eq!(got.get(series), Some(&value), "{series} in\n{exposition}");
    }
    let store_errors: Vec<_> = got
        .iter()
        .filter(|(series, _)| series.starts_with("unique_store_errors_total{"))
        .collect();
    assert_eq!(
        store_errors.len(),
        24,
        "8 operations (read_owners, list_sessions and count_online included) × 3 kinds: \
         {store_errors:?}"
    );
    assert!(
        store_errors.iter().all(|(_, n)| **n == 0.0),
        "{store_errors:?}"
    );

    if let Err(problems) = unique_testsupport::promtool::check_metrics(&exposition) {
        panic!("{problems}\n{exposition}");
    }
}

/// Scrapes until the connections of the earlier requests have closed on the server's side too
/// (the server drops its end just after the client reads the last byte), so the scrape's own
/// connection is the only one open; bounded.
async fn scrape_when_only_the_scrape_is_open(addr: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, exposition) = send(addr, "GET", "/metrics", None, "").await;
        assert_eq!(status, 200, "{exposition}");
        if exposition.contains("\nunique_http_connections_open 1\n") || Instant::now() > deadline {
            return exposition;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn without_metrics_there_is_no_metrics_path() {
    let (addr, _server, _dir) = start_server(&["--no-metrics"]);
    let (status, body) = send(&addr, "GET", "/metrics", None, "").await;
    assert_eq!(status, 404, "{body}");
}
