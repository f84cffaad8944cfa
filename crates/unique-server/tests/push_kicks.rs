//! Push kicks on the real binary (`docs/design.md#push-kicks`): a node with no listening port
//! logs in with the owner `{"node": …}`, holds `GET /v1/nodes/{node}/kicks` open, and is kicked
//! over it when another login takes its session; it answers on
//! `POST /v1/nodes/{node}/kicks/ack`. The stream is read off a raw TCP connection (chunked
//! HTTP/1.1, one JSON object a line).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::SystemTime;

use common::{BIN, announced_addr, post_json, stop_with_sigterm, write_secret};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use unique_kick_signature::{DEFAULT_WINDOW, SigningKeys};
use unique_testsupport::ChildGuard;
use unique_testsupport::net::PATIENCE;

const GAME: &str = "push-test-token-game-0123456789abcdef";
const OTHER: &str = "push-test-token-other-0123456789abcdef";
const THIRD: &str = "push-test-token-third-0123456789abcdef";
const SIGNING_KEY: &str = "push-test-signing-key-0123456789abcdef";
/// An endpoint nobody listens on: the new owner of a takeover is never kicked itself.
const NOWHERE: &str = "http://127.0.0.1:1/kick";

/// A server on the memory store with three tokens (`game` on project game, `other` on
/// project other, `third` on both), signing keys, and `extra` flags. Keeps its files.
struct Server {
    addr: String,
    _guard: ChildGuard,
    _dir: tempfile::TempDir,
}

fn command(extra: &[&str]) -> (Command, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    write_secret(
        &tokens,
        &format!(
            r#"{{"tokens": [
                {{"name": "game", "token": "{GAME}", "projects": ["game"]}},
                {{"name": "other", "token": "{OTHER}", "projects": ["other"]}},
                {{"name": "third", "token": "{THIRD}", "projects": ["game", "other"]}}
            ]}}"#
        ),
    );
    let keys = dir.path().join("kick.keys");
    write_secret(&keys, &format!("{SIGNING_KEY}\n"));
    let mut command = Command::new(BIN);
    command
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--auth-tokens",
        ])
        .arg(&tokens)
        .arg("--kick-signing-keys")
        .arg(&keys)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped());
    (command, dir)
}

impl Server {
    fn start(extra: &[&str]) -> Self {
        let (mut command, dir) = command(extra);
        let mut child = command.spawn().unwrap();
        let addr = announced_addr(&mut child);
        Self {
            addr,
            _guard: ChildGuard::new(child, "unique-server"),
            _dir: dir,
        }
    }
}

/// A login of `uid` in `project` with `owner`: the claim's answer.
async fn claim(addr: &str, token: &str, project: &str, uid: i64, owner: Value, id: &str) -> Value {
    let body =
        json!({"project": project, "env": "prod", "uid": uid, "owner": owner, "claim_id": id});
    let (status, answer) = post_json(addr, "/v1/claim", token, &body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

fn node(id: &str) -> Value {
    json!({"node": id})
}

fn endpoint() -> Value {
    json!({"endpoint": NOWHERE})
}

/// The ack of kick `id` by `node_id` with `status`: the route's status and answer.
async fn ack(addr: &str, token: &str, node_id: &str, id: &str, status: u16) -> (u16, Value) {
    let path = format!("/v1/nodes/{node_id}/kicks/ack");
    post_json(addr, &path, token, &json!({"id": id, "status": status})).await
}

/// One open kick stream, read line by line off its chunked body.
struct KickStream {
    socket: TcpStream,
    /// Bytes read and not yet decoded (after the head: chunk framing).
    raw: Vec<u8>,
    /// Decoded body bytes not yet returned as a line.
    body: Vec<u8>,
    ended: bool,
}

/// The answer to a stream request that was refused: status line and headers, and body.
struct Refused {
    head: String,
    body: String,
}

impl KickStream {
    /// Opens the stream of `node_id` with `token` on `socket`: the stream, or the refusal.
    async fn open_on(mut socket: TcpStream, node_id: &str, token: &str) -> Result<Self, Refused> {
        let request = format!(
            "GET /v1/nodes/{node_id}/kicks HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {token}\r\n\r\n"
        );
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let head_end = loop {
            if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break at;
            }
            let mut buf = [0u8; 4096];
            let n = within(socket.read(&mut buf)).await.unwrap();
            assert!(
                n > 0,
                "closed before the head: {}",
                String::from_utf8_lossy(&raw)
            );
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
        let rest = raw[head_end + 4..].to_vec();
        if !head.starts_with("HTTP/1.1 200") {
            let mut body = rest;
            // Refusals are whole answers with a content length; the connection stays open.
            let length: usize = header(&head, "content-length").map_or(0, |v| v.parse().unwrap());
            while body.len() < length {
                let mut buf = [0u8; 4096];
                let n = within(socket.read(&mut buf)).await.unwrap();
                assert!(n > 0);
                body.extend_from_slice(&buf[..n]);
            }
            return Err(Refused {
                head,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        assert_eq!(
            header(&head, "content-type"),
            Some("application/x-ndjson"),
            "{head}"
        );
        assert_eq!(header(&head, "cache-control"), Some("no-store"), "{head}");
        assert_eq!(
            header(&head, "transfer-encoding"),
            Some("chunked"),
            "{head}"
        );
        Ok(Self {
            socket,
            raw: rest,
            body: Vec::new(),
            ended: false,
        })
    }

    async fn open(addr: &str, node_id: &str, token: &str) -> Result<Self, Refused> {
        Self::open_on(TcpStream::connect(addr).await.unwrap(), node_id, token).await
    }

    /// Opens the stream and reads its hello.
    async fn hello(addr: &str, node_id: &str, token: &str) -> Self {
        let mut stream = Self::open(addr, node_id, token)
            .await
            .unwrap_or_else(|r| panic!("stream refused: {} {}", r.head, r.body));
        let hello = stream.line().await.expect("a hello line");
        assert_eq!(hello["type"], "hello", "{hello}");
        assert_eq!(hello["node"], node_id, "{hello}");
        stream
    }

    /// Decodes whole chunks from `raw` into `body`; `ended` at the last chunk.
    fn decode(&mut self) {
        loop {
            let Some(line_end) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let size_text = String::from_utf8_lossy(&self.raw[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.trim(), 16)
                .unwrap_or_else(|_| panic!("bad chunk size {size_text:?}"));
            if size == 0 {
                self.ended = true;
                return;
            }
            let start = line_end + 2;
            if self.raw.len() < start + size + 2 {
                return;
            }
            self.body.extend_from_slice(&self.raw[start..start + size]);
            self.raw.drain(..start + size + 2);
        }
    }

    /// The next line of any type, or `None` at the end of the body (or of the connection).
    async fn line(&mut self) -> Option<Value> {
        loop {
            // Bytes read with the head, or with an earlier line, may hold whole chunks.
            self.decode();
            if let Some(at) = self.body.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.body.drain(..=at).collect();
                return Some(serde_json::from_slice(&line).unwrap_or_else(|e| {
                    panic!("not JSON: {e}: {}", String::from_utf8_lossy(&line))
                }));
            }
            if self.ended {
                assert!(self.body.is_empty(), "a partial last line");
                return None;
            }
            let mut buf = [0u8; 8192];
            let n = within(self.socket.read(&mut buf)).await.unwrap_or(0);
            if n == 0 {
                self.ended = true;
                continue;
            }
            self.raw.extend_from_slice(&buf[..n]);
        }
    }

    /// The next line that is not a ping.
    async fn next(&mut self) -> Option<Value> {
        loop {
            let line = self.line().await?;
            if line["type"] != "ping" {
                return Some(line);
            }
        }
    }

    /// The next line, which must be a kick: its id and its body, decoded.
    async fn kick(&mut self) -> (String, Value, Value) {
        let line = self.next().await.expect("a kick line");
        assert_eq!(line["type"], "kick", "{line}");
        let id = line["id"].as_str().unwrap().to_owned();
        assert_eq!(id.len(), 32, "{line}");
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{id}"
        );
        let body: Value = serde_json::from_str(line["body"].as_str().unwrap()).unwrap();
        (id, body, line)
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// `future`, or a test failure after [`PATIENCE`] (a server that stops answering must not
/// hang the run).
async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("no answer within the test's patience")
}

/// A takeover of `uid`'s session (held by node `n1`) by an endpoint owner, run in a task:
/// its claim answer arrives once the kick is answered.
fn takeover(addr: &str, uid: i64, id: &str) -> tokio::task::JoinHandle<Value> {
    let (addr, id) = (addr.to_owned(), id.to_owned());
    tokio::spawn(async move { claim(&addr, GAME, "game", uid, endpoint(), &id).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_pushes_a_signed_kick_and_the_ack_confirms_it() {
    let server = Server::start(&["--kick-stream-ping", "250ms"]);
    let addr = &server.addr;
    let info = common::request(addr, "GET", "/v1/info", "");
    assert!(info.contains(r#""push_kicks":true"#), "{info}");

    let mut stream = KickStream::open(addr, "n1", GAME).await.ok().unwrap();
    let hello = stream.line().await.unwrap();
    assert_eq!(
        hello,
        json!({"type": "hello", "node": "n1", "ping_ms": 250})
    );
    // Pings come before anything else happens.
    assert_eq!(stream.line().await.unwrap(), json!({"type": "ping"}));

    let first = claim(addr, GAME, "game", 1, node("n1"), "login-1").await;
    assert_eq!(first["gen"], 1, "{first}");
    let taking = takeover(addr, 1, "login-2");
    let (id, body, line) = stream.kick().await;
    assert_eq!(
        body,
        json!({"project": "game", "env": "prod", "uid": 1, "gen": 2, "reason": "login-elsewhere"})
    );
    let keys = SigningKeys::new([SIGNING_KEY]).unwrap();
    let signature = line["signature"].as_str();
    let signed = line["body"].as_str().unwrap().as_bytes();
    assert_eq!(
        keys.verify(signature, signed, SystemTime::now(), DEFAULT_WINDOW),
        Ok(()),
        "{line}"
    );
    assert_eq!(
        ack(addr, GAME, "n1", &id, 200).await,
        (200, json!({"accepted": true}))
    );
    let second = within(taking).await.unwrap();
    assert_eq!(
        (&second["gen"], &second["kicked"], &second["kick_detail"]),
        (&json!(2), &json!(true), &Value::Null),
        "{second}"
    );
    assert_eq!(second["prev_owner"], json!({"node": "n1"}), "{second}");
    // Answered once: a repeat, another node's path, an unknown id are not waiting.
    for (node_id, kick_id) in [("n1", id.as_str()), ("n2", id.as_str()), ("n1", "00")] {
        assert_eq!(
            ack(addr, GAME, node_id, kick_id, 200).await,
            (200, json!({"accepted": false}))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_ack_is_non_2xx_and_no_ack_is_timeout() {
    let server = Server::start(&["--kick-timeout", "500ms"]);
    let addr = &server.addr;
    let mut stream = KickStream::hello(addr, "n1", GAME).await;
    claim(addr, GAME, "game", 1, node("n1"), "a-1").await;
    let taking = takeover(addr, 1, "a-2");
    let (id, _, _) = stream.kick().await;
    assert_eq!(
        ack(addr, GAME, "n1", &id, 409).await.1,
        json!({"accepted": true})
    );
    let refused = within(taking).await.unwrap();
    assert_eq!(
        (&refused["kicked"], &refused["kick_detail"]),
        (&json!(false), &json!("non-2xx")),
        "{refused}"
    );

    claim(addr, GAME, "game", 2, node("n1"), "b-1").await;
    let taking = takeover(addr, 2, "b-2");
    let (late, body, _) = stream.kick().await;
    assert_eq!(body["uid"], 2);
    let unanswered = within(taking).await.unwrap();
    assert_eq!(
        (&unanswered["kicked"], &unanswered["kick_detail"]),
        (&json!(false), &json!("timeout")),
        "{unanswered}"
    );
    assert_eq!(
        ack(addr, GAME, "n1", &late, 200).await.1,
        json!({"accepted": false})
    );
    // A bad ack body names the problem.
    let (status, bad) = post_json(addr, "/v1/nodes/n1/kicks/ack", GAME, &json!({"id": "x"})).await;
    assert_eq!(
        (status, &bad["error"]),
        (400, &json!("invalid_params")),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_stream_the_kick_is_connect_error_and_another_projects_stream_gets_nothing() {
    let server = Server::start(&[]);
    let addr = &server.addr;
    claim(addr, GAME, "game", 1, node("n9"), "c-1").await;
    let answer = claim(addr, GAME, "game", 1, endpoint(), "c-2").await;
    assert_eq!(
        (&answer["kicked"], &answer["kick_detail"]),
        (&json!(false), &json!("connect-error")),
        "{answer}"
    );

    // n1's stream holds a token of project other: a game session of n1 has no stream.
    let mut stream = KickStream::hello(addr, "n1", OTHER).await;
    claim(addr, GAME, "game", 2, node("n1"), "d-1").await;
    let answer = claim(addr, GAME, "game", 2, endpoint(), "d-2").await;
    assert_eq!(answer["kick_detail"], "connect-error", "{answer}");
    // A session of project other on n1 is kicked over it, and is the first kick it sees.
    claim(addr, OTHER, "other", 3, node("n1"), "e-1").await;
    let addr2 = addr.clone();
    let taking =
        tokio::spawn(async move { claim(&addr2, OTHER, "other", 3, endpoint(), "e-2").await });
    let (id, body, _) = stream.kick().await;
    assert_eq!(
        (&body["project"], &body["uid"]),
        (&json!("other"), &json!(3)),
        "{body}"
    );
    // The game token cannot answer a kick of project other.
    assert_eq!(
        ack(addr, GAME, "n1", &id, 200).await.1,
        json!({"accepted": false})
    );
    assert_eq!(
        ack(addr, OTHER, "n1", &id, 200).await.1,
        json!({"accepted": true})
    );
    assert_eq!(within(taking).await.unwrap()["kicked"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stream_replaces_the_first_and_self_replace_sends_nothing() {
    let server = Server::start(&[]);
    let addr = &server.addr;
    let mut first = KickStream::hello(addr, "n1", GAME).await;
    let mut second = KickStream::hello(addr, "n1", THIRD).await;
    assert_eq!(
        first.next().await,
        Some(json!({"type": "closed", "reason": "replaced"}))
    );
    assert_eq!(first.next().await, None, "the replaced stream ends");

    claim(addr, GAME, "game", 1, node("n1"), "f-1").await;
    // The same node logs in again: nothing is sent to it.
    let again = claim(
        addr,
        GAME,
        "game",
        1,
        json!({"node": "n1", "region": "eu"}),
        "f-2",
    )
    .await;
    assert_eq!(
        (&again["gen"], &again["kicked"], &again["kick_detail"]),
        (&json!(2), &json!(false), &json!("self-replace-skipped")),
        "{again}"
    );
    let taking = takeover(addr, 1, "f-3");
    let (id, body, _) = second.kick().await;
    assert_eq!(
        body["gen"], 3,
        "the first line after the self-replace is this kick: {body}"
    );
    assert_eq!(
        ack(addr, THIRD, "n1", &id, 204).await.1,
        json!({"accepted": true})
    );
    assert_eq!(within(taking).await.unwrap()["kicked"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_capped_per_token_and_in_total() {
    let server = Server::start(&[
        "--max-kick-streams",
        "2",
        "--max-kick-streams-per-token",
        "1",
    ]);
    let addr = &server.addr;
    let _a = KickStream::hello(addr, "n1", GAME).await;
    let refused = KickStream::open(addr, "n2", GAME)
        .await
        .err()
        .expect("over the token's cap");
    assert!(refused.head.starts_with("HTTP/1.1 429"), "{}", refused.head);
    assert!(refused.body.contains("throttled"), "{}", refused.body);
    // Replacing its own stream is within the token's cap.
    let _a = KickStream::hello(addr, "n1", GAME).await;
    let _b = KickStream::hello(addr, "n3", OTHER).await;
    let full = KickStream::open(addr, "n4", THIRD)
        .await
        .err()
        .expect("over the total cap");
    assert!(full.head.starts_with("HTTP/1.1 503"), "{}", full.head);
    assert_eq!(
        header(&full.head, "retry-after"),
        Some("1"),
        "{}",
        full.head
    );
    // A bad node id is a 400 naming the rule.
    let bad = KickStream::open(addr, "n%201", GAME)
        .await
        .err()
        .expect("a bad id");
    assert!(bad.head.starts_with("HTTP/1.1 400"), "{}", bad.head);
    assert!(bad.body.contains("A-Z a-z 0-9"), "{}", bad.body);
    let metrics = common::request(addr, "GET", "/metrics", "");
    assert!(metrics.contains("unique_kick_streams_open 2"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outlives_the_idle_timeout_and_ends_with_shutdown() {
    let (mut command, _dir) = command(&["--idle-timeout", "1s", "--kick-stream-ping", "100ms"]);
    let mut child: Child = command.stderr(Stdio::piped()).spawn().unwrap();
    let addr = announced_addr(&mut child);
    let mut stream = KickStream::hello(&addr, "n1", GAME).await;
    // 30 pings: three seconds, three idle timeouts, and the stream is still open.
    for _ in 0..30 {
        assert_eq!(stream.line().await, Some(json!({"type": "ping"})));
    }
    claim(&addr, GAME, "game", 1, node("n1"), "g-1").await;
    let taking = takeover(&addr, 1, "g-2");
    let (id, _, _) = stream.kick().await;
    assert_eq!(
        ack(&addr, GAME, "n1", &id, 200).await.1,
        json!({"accepted": true})
    );
    assert_eq!(within(taking).await.unwrap()["kicked"], true);

    let stopping = tokio::task::spawn_blocking(move || stop_with_sigterm(child));
    assert_eq!(
        stream.next().await,
        Some(json!({"type": "closed", "reason": "shutdown"}))
    );
    assert_eq!(stream.next().await, None);
    within(stopping).await.unwrap();
}
