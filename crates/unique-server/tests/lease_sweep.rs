//! Sweeping (D12) on the real binary and the default store (fjall): a room service that
//! churns 10 000 room names over HTTP (each granted for 50 ms and left to expire) and a
//! thousand node registrations, beside ten rooms and nodes held throughout, leaves the lease
//! directory holding the live rows only. The server sweeps every 200 ms with no grace; the
//! test waits for the pass that reports the live rows alone, stops the server and counts
//! what its fjall directory holds. Without the sweep the directory holds all 10 010 rows.
//! (The contract case `sweeping_keeps_the_table_to_its_live_rows` churns 100 000 names on
//! every row backend, fjall included; over a debug build's HTTP that many take minutes.)

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime};

use common::{BIN, announced_addr};
use unique_client_http::HttpTransport;
use unique_lease::{Directory, NodeRegistry, sweep_pass};
use unique_store_fjall::FjallStore;
use unique_testsupport::ChildGuard;

const CHURN: usize = 10_000;
const NODE_CHURN: usize = 1_000;
const LIVE: usize = 10;
const CALLERS: usize = 32;
const PROJECT: &str = "rooms";

/// How long the test waits for the pass that leaves the live rows alone.
const WAIT: Duration = Duration::from_mins(2);

async fn churn(directory: Arc<dyn Directory>, registry: Arc<dyn NodeRegistry>) {
    let short = Duration::from_millis(50);
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        let directory = Arc::clone(&directory);
        callers.spawn(async move {
            for i in (caller..CHURN).step_by(CALLERS) {
                directory
                    .ensure_owner(&format!("churn-{i}"), "churner", SystemTime::now(), short)
                    .await
                    .unwrap_or_else(|e| panic!("ensure churn-{i}: {e}"));
            }
        });
    }
    while let Some(done) = callers.join_next().await {
        done.unwrap();
    }
    for i in 0..NODE_CHURN {
        registry
            .register_node(&format!("gone-{i}"), "10.0.0.1:7000", short)
            .await
            .unwrap();
    }
}

#[test]
fn a_churned_lease_directory_keeps_its_live_rows_only() {
    let dir = tempfile::tempdir().unwrap();
    let fjall = dir.path().join("unique.fjall");
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--fjall-dir"])
        .arg(&fjall)
        .args([
            "--lease-sweep-grace",
            "0s",
            "--lease-sweep-interval",
            "200ms",
        ])
        .env("RUST_LOG", "info,unique_server::sweep=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start unique-server");
    let addr = announced_addr(&mut child);
    let (lines, logged) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut server = ChildGuard::new(child, "unique-server");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let transport = HttpTransport::builder(format!("http://{addr}"))
            .build()
            .unwrap();
        let leases = Arc::new(transport.directory(PROJECT));
        for i in 0..LIVE {
            let hour = Duration::from_hours(1);
            leases
                .ensure_owner(&format!("live-{i}"), "keeper", SystemTime::now(), hour)
                .await
                .unwrap();
            leases
                .register_node(&format!("live-{i}"), "10.0.0.2:7000", hour)
                .await
                .unwrap();
        }
        churn(leases.clone(), leases).await;
    });

    // The server logs every pass (at debug when it deleted nothing) with what it kept. A
    // pass under way when the churn ended may have read the tables before its last writes,
    // so the lines logged by then and the next pass's are passed over; a later pass that
    // keeps the live rows alone ends the wait.
    while logged.try_recv().is_ok() {}
    let (rooms, nodes) = (
        format!(" kept_rooms={LIVE} "),
        format!(" kept_nodes={LIVE}"),
    );
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = logged.recv_timeout(left) else {
            break;
        };
        if line.contains("lease sweep") {
            let done = line.contains(&rooms) && line.trim_end().ends_with(&nodes);
            seen.push(line);
            if done && seen.len() > 1 {
                break;
            }
        }
    }
    server.stop_with("TERM", Duration::from_secs(10));

    // What the directory holds: a pass that deletes nothing counts every row.
    let store = FjallStore::open(&fjall).expect("reopen the store");
    let counted = runtime
        .block_on(sweep_pass(&store.directory(), Duration::MAX))
        .unwrap();
    assert_eq!(
        (counted.kept_rooms, counted.kept_nodes),
        (LIVE, LIVE),
        "after {CHURN} rooms and {NODE_CHURN} registrations expired beside {LIVE} live ones \
         of each, the directory holds {counted:?}; the server's sweep lines: {seen:#?}"
    );
}
