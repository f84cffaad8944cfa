//! Push kicks across servers (issue 46, `docs/design.md#push-kicks-across-servers`): three
//! real servers on one PostgreSQL database (and on one DynamoDB table, dynalite), joined by
//! `--peer-url` and one `--peer-secret-file`. A node with no listening port holds its kick
//! stream on one server and is kicked for a takeover claimed on another: the claim's server
//! forwards the kick to the stream's, which pushes it and answers with the node's ack. An ack
//! sent to a third server is forwarded to the one waiting for it. A SIGKILLed server's nodes
//! are presumed offline at once (`connect-error`, not a timeout), and once it is back on its
//! port (a new epoch) its nodes reconnect and are kicked again. The peer routes refuse callers
//! without the secret.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::push::{push_node, takeover_kicks, until};
use common::{BIN, http, request_with, start, status_json, write_secret};
use unique_core::{Key, KickDetail};
use unique_history::{PoolReport, PoolWorkload, run_duration};
use unique_testsupport::dynalite::{ACCESS_KEY_ID, Dynalite, REGION, SECRET_ACCESS_KEY};
use unique_testsupport::net::PATIENCE;
use unique_testsupport::{ChildGuard, free_port, postgres};

const PEER_SECRET: &str = "push-cluster-peer-secret-0123456789abcdef";

/// One server of the cluster: where it listens (also its `--peer-url`) and how to start it
/// again on the same port.
struct Server {
    addr: String,
    command: Box<dyn Fn() -> Command + Send>,
    guard: Option<ChildGuard>,
}

impl Server {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn kill(&mut self) {
        // The guard SIGKILLs the process and waits for it.
        drop(self.guard.take());
    }

    fn restart(&mut self) {
        let (addr, guard) = start(&mut (self.command)());
        assert_eq!(addr, self.addr, "restarted on its port");
        self.guard = Some(guard);
    }
}

/// `count` servers from `base` (the store's command: its flags and environment), each on a
/// port of its own with that port's URL as its `--peer-url`, all with one peer secret.
fn cluster(
    dir: &Path,
    count: usize,
    base: impl Fn() -> Command + Clone + Send + 'static,
) -> Vec<Server> {
    let secret = dir.join("peer.secret");
    write_secret(&secret, PEER_SECRET);
    (0..count)
        .map(|_| {
            let addr = format!("127.0.0.1:{}", free_port());
            let (secret, base, listen) = (secret.clone(), base.clone(), addr.clone());
            let command = move || {
                let mut command = base();
                command
                    .args(["--listen", &listen])
                    .args(["--peer-url", &format!("http://{listen}")])
                    .arg("--peer-secret-file")
                    .arg(&secret)
                    .args(["--kick-timeout", "2s"]);
                command
            };
            let (started, guard) = start(&mut command());
            assert_eq!(started, addr);
            Server {
                addr,
                command: Box::new(command),
                guard: Some(guard),
            }
        })
        .collect()
}

/// Three servers on one PostgreSQL database: its own tables (`prefix`), made by the first.
fn postgres_cluster(dir: &Path, prefix: &str) -> Vec<Server> {
    // Held by every server's command, so the database outlives them.
    let db = postgres::shared();
    let prefix = prefix.to_owned();
    let made = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    cluster(dir, 3, move || {
        let mut command = Command::new(BIN);
        command
            .args(["--store", "postgres", "--database-table", &prefix])
            .args(["--database-lease-prefix", &format!("{prefix}_lease")])
            .env("UNIQUE_DATABASE_URL", db.url())
            .env("RUST_LOG", "warn");
        // The first server makes the tables; the others (and restarts) find them.
        if !made.swap(true, std::sync::atomic::Ordering::SeqCst) {
            command.arg("--create-table");
        }
        command
    })
}

/// Three servers on one DynamoDB table (dynalite) and one lease table, made by the first.
fn dynamodb_cluster(dir: &Path, table: &str) -> Vec<Server> {
    let endpoint = Dynalite::shared().endpoint_url();
    let table = table.to_owned();
    let made = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    cluster(dir, 3, move || {
        let mut command = Command::new(BIN);
        command
            .args(["--store", "dynamodb", "--table", &table])
            .args(["--lease-table", &format!("{table}-leases")])
            .args(["--endpoint-url", &endpoint, "--region", REGION])
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "warn");
        if !made.swap(true, std::sync::atomic::Ordering::SeqCst) {
            command.arg("--create-table");
        }
        command
    })
}

/// Nodes on servers 0, 1 and 2 take keys over from each other in every direction; then
/// server 1 is SIGKILLed: a takeover of its node's session is presumed offline at once
/// (`connect-error`); back on its port, its node reconnects and is kicked across again.
async fn kicks_cross_servers_and_survive_a_sigkill(servers: &mut [Server]) {
    let nodes: Vec<_> = servers
        .iter()
        .enumerate()
        .map(|(i, server)| push_node(&server.addr, &format!("cluster-node-{i}"), None))
        .collect();
    for (node, _) in &nodes {
        until(node, |s| s.connected).await;
    }
    let mut uid = 0;
    for first in 0..3 {
        for second in (0..3).filter(|&s| s != first) {
            uid += 1;
            let key = Key::new("game", "prod", uid);
            takeover_kicks(&nodes[first].0, &nodes[second].0, &key).await;
        }
    }

    // Server 1 dies with node 1's stream on it; node 1's session there stays in the store.
    let key = Key::new("game", "prod", 100);
    let old = nodes[1].0.login(key.clone()).await.unwrap();
    servers[1].kill();
    let started = std::time::Instant::now();
    let new = nodes[0].0.login(key.clone()).await.unwrap();
    let outcome = &new.login().outcome;
    assert!(!outcome.kicked, "{outcome:?}");
    assert_eq!(outcome.kick_detail, Some(KickDetail::ConnectError));
    // Refused at once, not waited out: the kick timeout is 2 s.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    drop(old);

    servers[1].restart();
    until(&nodes[1].0, |s| s.connected && s.connections >= 2).await;
    takeover_kicks(&nodes[1].0, &nodes[2].0, &Key::new("game", "prod", 101)).await;
    takeover_kicks(&nodes[2].0, &nodes[1].0, &Key::new("game", "prod", 102)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_kicks_cross_servers_on_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = postgres_cluster(dir.path(), "push_cluster");
    kicks_cross_servers_and_survive_a_sigkill(&mut servers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_kicks_cross_servers_on_dynamodb() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = dynamodb_cluster(dir.path(), "push-cluster");
    kicks_cross_servers_and_survive_a_sigkill(&mut servers).await;
}

/// The pooled workload (`unique-history`) over the three servers, its sessions' nodes push
/// nodes spread over all three and its claims too, so most kicks cross servers; a third of
/// the way in, server 2 is SIGKILLed and started again on its port a second later. The
/// history must be clean, and every eviction of a session whose node held its stream on a
/// server that stayed up (0 or 1) must have had its kick confirmed by the node's ack.
fn pooled_push_history_with_a_sigkill(servers: &mut [Server], name: &str, project: &str) {
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let duration = run_duration(Duration::from_secs(6));
    let workload = PoolWorkload::new(urls.clone())
        .project(project)
        .push_nodes(urls)
        .duration(duration);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let victim = &mut servers[2];
    let history = std::thread::scope(|scope| {
        scope.spawn(move || {
            std::thread::sleep(duration / 3);
            victim.kill();
            std::thread::sleep(Duration::from_secs(1));
            victim.restart();
        });
        runtime.block_on(workload.run()).unwrap()
    });
    let report = PoolReport::new(name, &history);
    println!("{report}");
    report.assert_clean();
    report.assert_kicks_confirmed(|server| server != 2);
}

#[test]
fn pooled_push_history_across_three_servers_with_a_sigkill_on_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = postgres_cluster(dir.path(), "push_cluster_history");
    pooled_push_history_with_a_sigkill(
        &mut servers,
        "postgres, 3 servers, push nodes, one SIGKILLed",
        "push-history-pg",
    );
}

#[test]
fn pooled_push_history_across_three_servers_with_a_sigkill_on_dynamodb() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = dynamodb_cluster(dir.path(), "push-cluster-history");
    pooled_push_history_with_a_sigkill(
        &mut servers,
        "dynamodb, 3 servers, push nodes, one SIGKILLed",
        "push-history-ddb",
    );
}

/// A raw kick stream of `node` on `addr`, read line by line.
fn raw_stream(addr: &str, node: &str) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        stream,
        "GET /v1/nodes/{node}/kicks HTTP/1.1\r\nhost: {addr}\r\n\r\n"
    )
    .unwrap();
    BufReader::new(stream)
}

/// The next JSON line of a chunked NDJSON body (chunk sizes and blank lines skipped).
fn next_json(reader: &mut BufReader<TcpStream>) -> serde_json::Value {
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended");
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(line.trim())
            && value.is_object()
        {
            return value;
        }
    }
}

/// The ack of a kick held on server 1 sent to server 2 is forwarded to server 1: the
/// claim on server 0 answers `kicked: true`. Another id is not accepted anywhere.
#[test]
fn an_ack_sent_to_another_server_is_forwarded_to_the_stream_holder() {
    let dir = tempfile::tempdir().unwrap();
    let servers = postgres_cluster(dir.path(), "push_cluster_ack");
    let mut stream = raw_stream(&servers[1].addr, "raw-node");
    let hello = next_json(&mut stream);
    assert_eq!(hello["type"], "hello", "{hello}");
    let claim = |addr: &str, node: &str, claim_id: &str| {
        let body = serde_json::json!({"project": "game", "env": "prod", "uid": 7,
            "claim_id": claim_id, "owner": {"node": node}});
        status_json(&http(addr, "/v1/claim", &body.to_string()))
    };
    let (status, first) = claim(&servers[0].addr, "raw-node", "claim-1");
    assert_eq!(status, 200, "{first}");
    let claim_addr = servers[0].addr.clone();
    let takeover = std::thread::spawn(move || claim(&claim_addr, "other", "claim-2"));
    let kick = loop {
        let line = next_json(&mut stream);
        if line["type"] == "kick" {
            break line;
        }
    };
    let id = kick["id"].as_str().unwrap();
    let unknown = ack(
        &servers[2].addr,
        "raw-node",
        "0123456789abcdef0123456789abcdef",
    );
    assert_eq!(unknown, r#"{"accepted":false}"#);
    let forwarded = ack(&servers[2].addr, "raw-node", id);
    assert_eq!(forwarded, r#"{"accepted":true}"#);
    let (status, answer) = takeover.join().unwrap();
    assert_eq!(
        (status, &answer["kicked"]),
        (200, &serde_json::json!(true)),
        "{answer}"
    );
}

/// The ack route's answer, as its JSON text.
fn ack(addr: &str, node: &str, id: &str) -> String {
    let body = format!(r#"{{"id":"{id}","status":200}}"#);
    let path = format!("/v1/nodes/{node}/kicks/ack");
    let (status, json) = status_json(&http(addr, &path, &body));
    assert_eq!(status, 200, "{json}");
    json.to_string()
}

/// The peer routes: 401 without the secret or with another, 405 for another method; a kick
/// forwarded with the secret to a server holding no stream of the node is `connect-error`,
/// as is one naming another epoch.
#[test]
fn the_peer_routes_need_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let servers = postgres_cluster(dir.path(), "push_cluster_auth");
    let addr = &servers[0].addr;
    let kick = r#"{"node":"n1","server_epoch":"x","body":"{\"project\":\"game\",\"env\":\"prod\",\"uid\":1,\"gen\":2,\"reason\":\"login-elsewhere\"}","signature":null,"timeout_ms":100}"#;
    let peer = |method: &str, path: &str, secret: Option<&str>, body: &str| {
        let bearer = secret.map(|s| format!("Bearer {s}"));
        let headers: Vec<(&str, &str)> = bearer
            .iter()
            .map(|b| ("authorization", b.as_str()))
            .collect();
        status_json(&request_with(addr, method, path, &headers, body))
    };
    for secret in [None, Some("push-cluster-peer-secret-0123456789abcdeX")] {
        let (status, json) = peer("POST", "/v1/peer/kick", secret, kick);
        assert_eq!(status, 401, "{json}");
        let (status, json) = peer("POST", "/v1/peer/ack", secret, "{}");
        assert_eq!(status, 401, "{json}");
    }
    let (status, _) = peer("GET", "/v1/peer/kick", Some(PEER_SECRET), "");
    assert_eq!(status, 405);
    let (status, json) = peer("POST", "/v1/peer/kick", Some(PEER_SECRET), kick);
    assert_eq!(
        (status, json["outcome"].as_str()),
        (200, Some("connect-error"))
    );
    let (status, json) = peer("POST", "/v1/peer/kick", Some(PEER_SECRET), "{}");
    assert_eq!(status, 400, "{json}");
}

/// `--peer-url` is refused at startup, with the reason, where it cannot work: without its
/// secret file, with an https or path URL, with a short secret, on a store no other process
/// reads, with TLS on the listener (the peer client speaks plain HTTP).
#[test]
fn peer_flags_are_checked_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("peer.secret");
    write_secret(&secret, PEER_SECRET);
    let short = dir.path().join("short.secret");
    write_secret(&short, "too-short");
    let (secret, short) = (secret.to_str().unwrap(), short.to_str().unwrap());
    let tls = "--tls-cert /nonexistent/cert.pem --tls-key /nonexistent/key.pem";
    // (store, peer URL, secret file, more flags, what the error says)
    let cases = [
        (
            "postgres",
            "http://127.0.0.1:1",
            "",
            "",
            "--peer-secret-file",
        ),
        ("postgres", "https://127.0.0.1:1", secret, "", "plain HTTP"),
        ("postgres", "http://127.0.0.1:1/x", secret, "", "no path"),
        (
            "postgres",
            "http://127.0.0.1:1",
            short,
            "",
            "at least 32 bytes",
        ),
        (
            "memory",
            "http://127.0.0.1:1",
            secret,
            "",
            "--store memory is read by this process only",
        ),
        (
            "fjall",
            "http://127.0.0.1:1",
            secret,
            "",
            "--store fjall is read by this process only",
        ),
        (
            "sqlite",
            "http://127.0.0.1:1",
            secret,
            "",
            "--store sqlite is read by this process only",
        ),
        (
            "postgres",
            "http://127.0.0.1:1",
            secret,
            tls,
            "this one speaks only TLS",
        ),
    ];
    for (store, url, secret, more, expected) in cases {
        let mut command = Command::new(BIN);
        command
            .args([
                "--listen",
                "127.0.0.1:0",
                "--store",
                store,
                "--peer-url",
                url,
            ])
            .args(more.split_whitespace())
            // A server that starts by mistake makes its files here, not in the crate.
            .current_dir(dir.path())
            .env("UNIQUE_DATABASE_URL", "postgres://127.0.0.1:1/none")
            .env("RUST_LOG", "error");
        if !secret.is_empty() {
            command.args(["--peer-secret-file", secret]);
        }
        let (exited, stderr) = refused_at_startup(&mut command);
        assert!(exited, "{store} {url} {more} started");
        assert!(stderr.contains(expected), "{store} {url} {more}: {stderr}");
    }
}

/// Runs `command` and waits for it to exit, at most [`PATIENCE`]: whether it exited non-zero
/// by then, and its stderr. A server that started instead is killed, so a regression fails the
/// test rather than hanging it.
fn refused_at_startup(command: &mut Command) -> (bool, String) {
    use std::io::Read;
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > PATIENCE {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.is_some_and(|s| !s.success()), stderr)
}
