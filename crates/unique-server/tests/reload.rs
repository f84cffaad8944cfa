//! SIGHUP reloads the secret files of the real binary under load: a token and a signing key
//! are rotated while one keep-alive connection claims without pause, and not one request
//! of it fails; a bad file keeps the sets in force.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use unique_client::{KickHandler, KickOptions};
use unique_kick_signature::SigningKeys;
use unique_kickrecv::{KickService, ServeOptions, serve_with};
use unique_testsupport::ChildGuard;
use unique_testsupport::net::PATIENCE;

use common::{BIN, announced_addr, write_secret};

const T1: &str = "reload-test-token-one-0123456789";
const T2: &str = "reload-test-token-two-0123456789";
const K1: &str = "reload-test-key-one-0123456789abcdef012345";
const K2: &str = "reload-test-key-two-0123456789abcdef012345";
/// Claims the load makes between two steps of the script.
const STEP: usize = 25;
/// The load stops by itself after this many claims, or after [`LOAD_TIME`].
const MAX_CLAIMS: usize = 20_000;
const LOAD_TIME: Duration = Duration::from_mins(2);

fn tokens_file(list: &[(&str, &str)]) -> String {
    let entries: Vec<Value> = list
        .iter()
        .map(|(name, token)| json!({"name": name, "token": token, "projects": ["reload"]}))
        .collect();
    json!({ "tokens": entries }).to_string()
}

/// A node's kick receiver that verifies signatures with `keys` and holds no session, so a
/// kick it accepts is answered 200 (confirmed) and one it refuses 401 (`non-2xx`).
async fn receiver(keys: &[&str]) -> SocketAddr {
    let handler = KickHandler::new(|_| None, |_, _| async {}, KickOptions::default());
    let service = KickService::new(handler).signing_keys(SigningKeys::new(keys).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_with(
        listener,
        service,
        ServeOptions::default(),
        std::future::pending(),
    ));
    addr
}

/// The server's stderr, line by line, as it comes (and every line, for the final checks).
struct Logs {
    lines: mpsc::Receiver<String>,
    all: Arc<Mutex<Vec<String>>>,
}

impl Logs {
    fn follow(stderr: std::process::ChildStderr) -> Self {
        let (sender, lines) = mpsc::channel();
        let all = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&all);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                keep.lock().unwrap().push(line.clone());
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Self { lines, all }
    }

    /// The next line containing `needle`; panics after [`PATIENCE`].
    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!("no log line with {needle:?}: {e}"),
            }
        }
    }

    fn all(&self) -> String {
        self.all.lock().unwrap().join("\n")
    }
}

fn sighup(server: &ChildGuard) {
    let status = Command::new("kill")
        .args(["-HUP", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Sender {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// One claim of `uid` by `endpoint` with `token`: the status and the body, or why the
/// exchange failed.
async fn claim(
    sender: &mut Sender,
    token: &str,
    uid: i64,
    endpoint: &str,
    claim_id: &str,
) -> Result<(u16, Value), String> {
    let body = json!({"project": "reload", "env": "test", "uid": uid,
                      "owner": {"endpoint": endpoint}, "claim_id": claim_id});
    let request = Request::post("/v1/claim")
        .header("host", "reload")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    sender
        .ready()
        .await
        .map_err(|e| format!("connection: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    let value = serde_json::from_slice(&bytes).map_err(|e| format!("answer: {e}"))?;
    Ok((status, value))
}

/// A claim on a connection of its own.
async fn claim_once(
    addr: SocketAddr,
    token: &str,
    uid: i64,
    endpoint: &str,
    id: &str,
) -> (u16, Value) {
    let mut sender = connect(addr).await;
    claim(&mut sender, token, uid, endpoint, id).await.unwrap()
}

/// Whether a kick from the server now reaches `endpoint` confirmed: `endpoint` claims
/// `uid`, then another owner claims it, which kicks `endpoint`.
async fn kick_confirmed(
    addr: SocketAddr,
    token: &str,
    uid: i64,
    endpoint: &str,
    other: &str,
    round: &str,
) -> bool {
    let (status, _) = claim_once(addr, token, uid, endpoint, &format!("{round}-a")).await;
    assert_eq!(status, 200);
    let (status, answer) = claim_once(addr, token, uid, other, &format!("{round}-b")).await;
    assert_eq!(status, 200, "{answer}");
    answer["kicked"] == json!(true)
}

/// What the load saw.
#[derive(Default)]
struct Seen {
    claims: usize,
    /// Requests that did not answer 200, or whose kick did not confirm.
    failures: Vec<String>,
    by_token: [usize; 2],
}

/// Claims one key without pause on one keep-alive connection, alternating two endpoints of
/// `node` so every claim after the first kicks the previous one. The token is
/// `use_second`'s choice at each request; `progress` counts the claims done.
async fn load(
    addr: SocketAddr,
    node: SocketAddr,
    use_second: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    progress: watch::Sender<usize>,
) -> Seen {
    let mut sender = connect(addr).await;
    let mut seen = Seen::default();
    let started = Instant::now();
    while !stop.load(Ordering::SeqCst) && seen.claims < MAX_CLAIMS && started.elapsed() < LOAD_TIME
    {
        let second = use_second.load(Ordering::SeqCst);
        let token = if second { T2 } else { T1 };
        let endpoint = format!("http://{node}/kick/{}", seen.claims % 2);
        let id = format!("load-{}", seen.claims);
        match claim(&mut sender, token, 1, &endpoint, &id).await {
            Ok((200, answer)) if seen.claims == 0 || answer["kicked"] == json!(true) => {}
            Ok((status, answer)) => seen.failures.push(format!("{id}: {status} {answer}")),
            Err(e) => seen.failures.push(format!("{id}: {e}")),
        }
        seen.by_token[usize::from(second)] += 1;
        seen.claims += 1;
        progress.send_replace(seen.claims);
    }
    seen
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The server under test, its files, its log and the load's progress.
struct Rig {
    server: ChildGuard,
    addr: SocketAddr,
    logs: Logs,
    tokens: std::path::PathBuf,
    keys: std::path::PathBuf,
    progress: watch::Receiver<usize>,
    /// A node that knows only K2.
    only_k2: String,
    /// An endpoint of the node under load, for the checks' second claims.
    elsewhere: String,
}

impl Rig {
    /// Writes `text` to `file` and sends SIGHUP; returns the log line containing `expect`.
    fn reload(&self, file: &Path, text: &str, expect: &str) -> String {
        write_secret(file, text);
        sighup(&self.server);
        self.logs.wait_for(expect)
    }

    async fn claims_go_on(&mut self) {
        let target = *self.progress.borrow_and_update() + STEP;
        tokio::time::timeout(PATIENCE, self.progress.wait_for(|done| *done >= target))
            .await
            .expect("the load stalled")
            .expect("the load stopped");
    }

    /// Whether a kick signed now reaches the node that knows only K2 confirmed.
    async fn k2_node_confirms(&self, token: &str, round: &str) -> bool {
        kick_confirmed(self.addr, token, 2, &self.only_k2, &self.elsewhere, round).await
    }

    /// Adds T2, moves the load to it, drops T1: T1 is then refused.
    async fn rotate_the_token(&mut self, use_second: &AtomicBool) {
        let both = tokens_file(&[("one", T1), ("two", T2)]);
        let reloaded = self.reload(&self.tokens, &both, "caller tokens reloaded");
        assert!(
            reloaded.contains("tokens=2") && reloaded.contains(r#"added=["two"]"#),
            "{reloaded}"
        );
        self.claims_go_on().await;
        use_second.store(true, Ordering::SeqCst);
        self.claims_go_on().await;
        let reloaded = self.reload(
            &self.tokens,
            &tokens_file(&[("two", T2)]),
            "caller tokens reloaded",
        );
        assert!(reloaded.contains(r#"removed=["one"]"#), "{reloaded}");
        let (status, answer) = claim_once(self.addr, T1, 3, &self.elsewhere, "t1-after").await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (401, Some("unauthenticated")),
            "{answer}"
        );
        self.claims_go_on().await;
    }

    /// Makes K2 the signing key (K1 still listed), then drops K1: the K2-only node accepts.
    async fn rotate_the_key(&mut self) {
        let (k1, k2) = (id(K1), id(K2));
        let rotated = format!("# signs\n{K2}\n# accepted until every node has K2\n{K1}\n");
        let reloaded = self.reload(&self.keys, &rotated, "kick signing keys reloaded");
        assert!(reloaded.contains(&format!("signing={k2}")), "{reloaded}");
        assert!(
            reloaded.contains(&format!("previous_signing={k1}")),
            "{reloaded}"
        );
        self.claims_go_on().await;
        assert!(self.k2_node_confirms(T2, "after").await);
        self.reload(&self.keys, &format!("{K2}\n"), "kick signing keys reloaded");
        self.claims_go_on().await;
    }

    /// Invalid tokens JSON and a keys file open to others: both sets stay in force.
    async fn bad_files_keep_the_sets(&mut self) {
        write_secret(&self.tokens, "{\"tokens\": [");
        write_secret(&self.keys, &format!("{K1}\n"));
        set_mode(&self.keys, 0o644);
        sighup(&self.server);
        let kept = self.logs.wait_for("not reloaded");
        assert!(kept.contains("caller tokens not reloaded"), "{kept}");
        let kept = self.logs.wait_for("not reloaded");
        assert!(
            kept.contains("kick signing keys not reloaded") && kept.contains("chmod 600"),
            "{kept}"
        );
        self.claims_go_on().await;
        assert!(self.k2_node_confirms(T2, "kept").await);
    }
}

fn id(key: &str) -> String {
    SigningKeys::new([key]).unwrap().signing_id().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_and_a_signing_key_rotate_under_load_without_a_failed_request() {
    let dir = tempfile::tempdir().unwrap();
    let (tokens, keys) = (dir.path().join("tokens.json"), dir.path().join("kick.keys"));
    write_secret(&tokens, &tokens_file(&[("one", T1)]));
    write_secret(&keys, &format!("# signs\n{K1}\n"));
    // The node under load knows both keys (step one of a rotation); a newer node only K2.
    let both = receiver(&[K1, K2]).await;
    let only_k2 = format!("http://{}/kick", receiver(&[K2]).await);

    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--kick-timeout",
            "5s",
        ])
        .arg("--auth-tokens")
        .arg(&tokens)
        .arg("--kick-signing-keys")
        .arg(&keys)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr: SocketAddr = announced_addr(&mut child).parse().unwrap();
    let logs = Logs::follow(child.stderr.take().unwrap());
    assert!(logs.wait_for("kicks are signed").contains(&id(K1)));
    let (progress, progressed) = watch::channel(0);
    let mut rig = Rig {
        server: ChildGuard::new(child, "unique-server"),
        addr,
        logs,
        tokens,
        keys,
        progress: progressed,
        only_k2,
        elsewhere: format!("http://{both}/elsewhere"),
    };
    // Signed with K1: the node that knows only K2 refuses the kick.
    assert!(!rig.k2_node_confirms(T1, "before").await);

    let use_second = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(load(
        addr,
        both,
        Arc::clone(&use_second),
        Arc::clone(&stop),
        progress,
    ));
    rig.claims_go_on().await;
    rig.rotate_the_token(&use_second).await;
    rig.rotate_the_key().await;
    rig.bad_files_keep_the_sets().await;
    stop.store(true, Ordering::SeqCst);

    let seen = load.await.unwrap();
    assert!(
        seen.failures.is_empty(),
        "failed under load: {:#?}",
        seen.failures
    );
    assert!(
        seen.by_token[0] >= 2 * STEP && seen.by_token[1] >= 4 * STEP,
        "{:?}",
        seen.by_token
    );
    rig.server.assert_running();
    let all = rig.logs.all();
    for secret in [T1, T2, K1, K2] {
        assert!(!all.contains(secret), "the logs show a secret:\n{all}");
    }
}

#[test]
fn sighup_without_secret_files_reloads_nothing_and_keeps_serving() {
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--store", "memory"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    let logs = Logs::follow(child.stderr.take().unwrap());
    let mut server = ChildGuard::new(child, "unique-server");
    sighup(&server);
    logs.wait_for("nothing to reload");
    let health = common::request(&addr, "GET", "/healthz", "");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    server.assert_running();
}

#[tokio::test]
async fn a_reload_may_revoke_every_token_and_then_every_caller_gets_401() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    // A server that starts with no token is refused: more likely a mistake than a wish.
    write_secret(&tokens, r#"{"tokens": []}"#);
    let out = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--auth-tokens",
        ])
        .arg(&tokens)
        .output()
        .unwrap();
    assert!(!out.status.success(), "started with no token");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tokens file holds no token"), "{stderr}");

    write_secret(&tokens, &tokens_file(&[("one", T1)]));
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--auth-tokens",
        ])
        .arg(&tokens)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    let logs = Logs::follow(child.stderr.take().unwrap());
    let server = ChildGuard::new(child, "unique-server");
    let body = |claim_id: &str| {
        json!({"project": "reload", "env": "e", "uid": 1,
               "owner": {"endpoint": "http://127.0.0.1:9/k"}, "claim_id": claim_id})
    };
    let (status, answer) = common::post_json(&addr, "/v1/claim", T1, &body("a")).await;
    assert_eq!(status, 200, "{answer}");

    write_secret(&tokens, r#"{"tokens": []}"#);
    sighup(&server);
    let loud = logs.wait_for("caller tokens reloaded");
    assert!(
        loud.contains("ERROR") && loud.contains("every /v1 request is now refused 401"),
        "{loud}"
    );
    assert!(loud.contains(r#"removed=["one"]"#), "{loud}");
    let (status, refused) = common::post_json(&addr, "/v1/claim", T1, &body("b")).await;
    assert_eq!(status, 401, "{refused}");
    assert_eq!(refused["error"], "unauthenticated", "{refused}");

    // A reload with a token brings callers back.
    write_secret(&tokens, &tokens_file(&[("two", T2)]));
    sighup(&server);
    logs.wait_for("caller tokens reloaded");
    let (status, answer) = common::post_json(&addr, "/v1/claim", T2, &body("c")).await;
    assert_eq!(status, 200, "{answer}");
    assert!(!logs.all().contains(T1), "the logs show a secret");
}
