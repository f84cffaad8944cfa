//! Crash safety of the durable embedded stores (SQLite, fjall): SIGKILL the server
//! mid-stream of claims, restart it on the same file or directory, and check that no
//! acknowledged claim was lost and every gen issued afterwards is above every gen
//! acknowledged before.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use unique_testsupport::ChildGuard;

use common::{BIN, start};
const WRITERS: i64 = 8;
const KEYS_PER_WRITER: i64 = 4;
/// Acknowledged claims to collect before the kill.
const ACKS_BEFORE_KILL: usize = 400;

/// The embedded stores under test: `--store` and the flag that names its path.
const SQLITE: (&str, &str) = ("sqlite", "--db");
const FJALL: (&str, &str) = ("fjall", "--fjall-dir");

/// Starts the server on `store` at `path` and returns it with its address.
/// The guard kills it if the test fails half-way.
fn start_server((store, path_flag): (&str, &str), path: &Path) -> (ChildGuard, SocketAddr) {
    let (addr, server) = start(
        Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--store", store, path_flag])
            .arg(path)
            .env("RUST_LOG", "warn"),
    );
    (server, addr.parse().unwrap())
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Option<Sender> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// POSTs `body`; `None` when the server is gone or did not answer 200.
async fn post(sender: &mut Sender, path: &str, body: &Value) -> Option<Value> {
    let req = Request::post(path)
        .header("host", "crash")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap();
    sender.ready().await.ok()?;
    // An error here means the server was killed mid-request.
    let res = sender.send_request(req).await.ok()?;
    let status = res.status();
    let bytes = res.into_body().collect().await.ok()?.to_bytes();
    if !status.is_success() {
        eprintln!("{path}: {status} {}", String::from_utf8_lossy(&bytes));
        return None;
    }
    serde_json::from_slice(&bytes).ok()
}

fn claim(uid: i64, claim_id: &str) -> Value {
    json!({"project": "crash", "env": "test", "uid": uid,
           "owner": {"endpoint": format!("http://127.0.0.1:9/{claim_id}")},
           "claim_id": claim_id})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_loses_no_acknowledged_claim_and_never_reuses_a_gen() {
    sigkill_mid_stream(SQLITE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fjall_sigkill_mid_stream_loses_no_acknowledged_claim_and_never_reuses_a_gen() {
    sigkill_mid_stream(FJALL).await;
}

async fn sigkill_mid_stream(store: (&str, &str)) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unique.db");
    let (mut server, addr) = start_server(store, &db);

    // Highest gen acknowledged (200 received) per uid before the kill.
    let acked: Arc<Mutex<HashMap<i64, i64>>> = Arc::default();
    let ack_count = Arc::new(AtomicUsize::new(0));
    let enough = Arc::new(tokio::sync::Notify::new());
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (acked, ack_count, enough) = (acked.clone(), ack_count.clone(), enough.clone());
        writers.push(tokio::spawn(async move {
            let Some(mut sender) = connect(addr).await else {
                return;
            };
            for round in 0.. {
                let uid = 1 + w * KEYS_PER_WRITER + round % KEYS_PER_WRITER;
                let claim_id = format!("w{w}-r{round}");
                let Some(answer) = post(&mut sender, "/v1/claim", &claim(uid, &claim_id)).await
                else {
                    return; // the server was killed
                };
                let generation = answer["gen"].as_i64().unwrap();
                let mut acked = acked.lock().await;
                let best = acked.entry(uid).or_insert(0);
                assert!(generation > *best, "gen went backwards before the kill");
                *best = generation;
                if ack_count.fetch_add(1, Ordering::SeqCst) + 1 == ACKS_BEFORE_KILL {
                    enough.notify_one();
                }
            }
        }));
    }
    enough.notified().await;
    // SIGKILL while every writer still has claims in flight.
    server.kill();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().await.clone();
    assert!(ack_count.load(Ordering::SeqCst) >= ACKS_BEFORE_KILL);

    let (_server, addr) = start_server(store, &db);
    let mut sender = connect(addr).await.expect("restarted server accepts");
    for (&uid, &best) in &acked {
        let view = post(
            &mut sender,
            "/v1/current",
            &json!({"project": "crash", "env": "test", "uid": uid}),
        )
        .await
        .expect("current after restart");
        let stored = view["gen"].as_i64().unwrap();
        // An acknowledged claim is durable: the record is at least at that gen.
        assert!(
            stored >= best,
            "uid {uid}: stored gen {stored} < acknowledged {best}"
        );
        assert_eq!(view["exists"], true);

        let next = post(
            &mut sender,
            "/v1/claim",
            &claim(uid, &format!("after-{uid}")),
        )
        .await
        .expect("claim after restart");
        let issued = next["gen"].as_i64().unwrap();
        assert!(
            issued > best,
            "uid {uid}: gen {issued} issued after restart is not above {best}"
        );
        assert!(
            issued > stored,
            "uid {uid}: gen {issued} reused stored gen {stored}"
        );
    }
    assert_eq!(
        acked.len(),
        usize::try_from(WRITERS * KEYS_PER_WRITER).unwrap()
    );
}
