//! Histories over real server processes (see `unique-history`): many clients race over a few
//! keys while the harness injects faults, and the checker must find no violation.
//!
//! - SQLite and fjall, the server SIGKILLed and restarted on the same file (directory) and
//!   port again and again;
//! - two and three servers on one DynamoDB table (dynalite), clients spread across them;
//! - DynamoDB behind a proxy that drops a share of the store's answers (ambiguous writes);
//! - two and three servers on one PostgreSQL table, clients spread across them.
//!
//! Each run lasts a few seconds; `UNIQUE_HISTORY_SECS` lengthens them (`cargo xtask chaos`).

mod common;

use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use unique_history::{PoolReport, PoolWorkload, Report, Workload, run_duration};
use unique_testsupport::dynalite::Dynalite;
use unique_testsupport::free_port;
use unique_testsupport::postgres;
use unique_testsupport::proxy::DropProxy;

use common::{BIN, dynamodb_command, start};

/// How long each run lasts unless `UNIQUE_HISTORY_SECS` says otherwise.
const SHORT_RUN: Duration = Duration::from_secs(3);

/// Runs the default workload against `urls` (project `project`, so runs sharing a store use
/// their own keys), and reports it with the faults `faults` counts once the run is over.
fn run_workload(
    name: &str,
    project: &str,
    urls: Vec<String>,
    faults: impl FnOnce() -> u64,
) -> Report {
    let duration = run_duration(SHORT_RUN);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let history = runtime
        .block_on(
            Workload::new(urls)
                .project(project)
                .duration(duration)
                .run(),
        )
        .unwrap();
    let report = Report::new(name, &history, faults());
    println!("{report}");
    report
}

#[test]
fn sqlite_history_survives_repeated_sigkill_and_restart() {
    embedded_history_survives_repeated_sigkill_and_restart("sqlite", "--db");
}

#[test]
fn fjall_history_survives_repeated_sigkill_and_restart() {
    embedded_history_survives_repeated_sigkill_and_restart("fjall", "--fjall-dir");
}

/// An embedded store (`--store store`, its path given by `path_flag`), the server SIGKILLed
/// and restarted on the same path and port again and again.
fn embedded_history_survives_repeated_sigkill_and_restart(
    store: &'static str,
    path_flag: &'static str,
) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unique.db");
    // The same port every time, so clients find the restarted server where they left it.
    let listen = format!("127.0.0.1:{}", free_port());
    let command = move || {
        let mut cmd = Command::new(BIN);
        cmd.args(["--listen", &listen, "--store", store, path_flag])
            .arg(&db)
            .env("RUST_LOG", "error");
        cmd
    };
    let (addr, first) = start(&mut command());

    // The fault schedule: every 200-600 ms, SIGKILL and start again on the same path.
    let (stop, stopped) = mpsc::channel::<()>();
    let killer = std::thread::spawn(move || {
        let mut server = first;
        let mut kills = 0u64;
        while let Err(mpsc::RecvTimeoutError::Timeout) =
            stopped.recv_timeout(Duration::from_millis(fastrand::u64(200..600)))
        {
            server.kill();
            kills += 1;
            server = start(&mut command()).1;
        }
        kills
    });
    let mut kills = None;
    let report = run_workload(
        &format!("{store}, SIGKILL and restart"),
        store,
        vec![format!("http://{addr}")],
        || {
            drop(stop);
            *kills.insert(killer.join().unwrap())
        },
    );
    report.assert_clean();
    assert!(kills.unwrap() > 0, "{report}");
    assert!(
        report.counts.indeterminate() > 0,
        "kills cut requests short\n{report}"
    );
}

/// Starts `count` servers on `table` at `endpoint_url`, the table made first by a server
/// talking to dynalite directly (a creation whose answer a proxy dropped would be retried
/// into "table exists").
fn dynamodb_servers(
    table: &str,
    endpoint_url: &str,
    count: usize,
    extra: &[&str],
) -> (Vec<String>, Vec<unique_testsupport::ChildGuard>) {
    drop(start(
        dynamodb_command(&Dynalite::shared().endpoint_url(), table).arg("--create-table"),
    ));
    (0..count)
        .map(|_| {
            let (addr, guard) = start(
                dynamodb_command(endpoint_url, table)
                    .args(["--workers", "1", "--kick-timeout", "500ms"])
                    .args(extra)
                    .env("RUST_LOG", "error"),
            );
            (format!("http://{addr}"), guard)
        })
        .unzip()
}

fn dynamodb_history(count: usize) {
    let table = format!("history-{count}-servers");
    let (urls, _servers) = dynamodb_servers(&table, &Dynalite::shared().endpoint_url(), count, &[]);
    let report = run_workload(
        &format!("dynamodb, {count} servers on one table"),
        &table,
        urls,
        || 0,
    );
    report.assert_clean();
}

#[test]
fn dynamodb_history_with_two_servers_on_one_table() {
    dynamodb_history(2);
}

#[test]
fn dynamodb_history_with_three_servers_on_one_table() {
    dynamodb_history(3);
}

/// The store's answers go missing (10 % of them, after dynalite acted on the request): the
/// SDK retries a conditional write that already succeeded and sees its condition fail, and
/// the claim steps must turn that into a replay of the claim's own write.
#[test]
fn dynamodb_history_with_dropped_store_answers() {
    let proxy = DropProxy::start(Dynalite::shared().addr(), 0.1);
    let (urls, _servers) = dynamodb_servers(
        "history-dropped-answers",
        &proxy.url(),
        2,
        &[
            "--store-attempt-timeout",
            "500ms",
            "--store-operation-timeout",
            "2s",
            "--store-max-attempts",
            "3",
        ],
    );
    let dropped_at_start = proxy.dropped();
    let report = run_workload(
        "dynamodb behind a proxy dropping 10 % of answers, 2 servers",
        "dropped",
        urls,
        || proxy.dropped() - dropped_at_start,
    );
    report.assert_clean();
    assert!(report.faults > 0, "no answer was dropped\n{report}");
}

/// `count` servers on one PostgreSQL table (the first creates it), clients spread across them.
fn postgres_history(count: usize) {
    let db = postgres::shared();
    let table = format!("history_{count}_servers");
    let (urls, _servers): (Vec<String>, Vec<_>) = (0..count)
        .map(|i| {
            let mut command = Command::new(BIN);
            command
                .args(["--listen", "127.0.0.1:0", "--store", "postgres"])
                .args(["--database-table", &table])
                .args(["--workers", "1", "--kick-timeout", "500ms"])
                .env("UNIQUE_DATABASE_URL", db.url())
                .env("RUST_LOG", "error");
            if i == 0 {
                command.arg("--create-table");
            }
            let (addr, guard) = start(&mut command);
            (format!("http://{addr}"), guard)
        })
        .unzip();
    let report = run_workload(
        &format!("postgres, {count} servers on one table"),
        &table,
        urls,
        || 0,
    );
    report.assert_clean();
}

#[test]
fn postgres_history_with_two_servers_on_one_table() {
    postgres_history(2);
}

#[test]
fn postgres_history_with_three_servers_on_one_table() {
    postgres_history(3);
}

/// Runs the pooled workload (issue 45: users with limits 2 and 3, pooled logins with both
/// policies, replays and releases; every session's node a real kick receiver) against
/// `urls` and checks it: never more than k online, refusals naming k sessions online during
/// them, evictions kicking before the winner answers.
fn run_pool_workload(name: &str, project: &str, urls: Vec<String>) -> PoolReport {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let history = runtime
        .block_on(
            PoolWorkload::new(urls)
                .project(project)
                .duration(run_duration(SHORT_RUN))
                .run(),
        )
        .unwrap();
    let report = PoolReport::new(name, &history);
    println!("{report}");
    report
}

/// One server on `store` (its extra flags `args`).
fn pooled_history_on_one_server(store: &str, args: &[&std::ffi::OsStr]) {
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--store", store])
        .args(args)
        .env("RUST_LOG", "error");
    let (addr, _server) = start(&mut command);
    let report = run_pool_workload(
        &format!("{store}, one server"),
        &format!("pool-{store}"),
        vec![format!("http://{addr}")],
    );
    report.assert_clean();
}

#[test]
fn pooled_history_on_memory() {
    pooled_history_on_one_server("memory", &[]);
}

#[test]
fn pooled_history_on_fjall() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fjall");
    pooled_history_on_one_server("fjall", &["--fjall-dir".as_ref(), path.as_os_str()]);
}

#[test]
fn pooled_history_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unique.db");
    pooled_history_on_one_server("sqlite", &["--db".as_ref(), path.as_os_str()]);
}

#[test]
fn pooled_history_on_postgres_with_three_servers() {
    let db = postgres::shared();
    let table = "history_pool_3_servers";
    let (urls, _servers): (Vec<String>, Vec<_>) = (0..3)
        .map(|i| {
            let mut command = Command::new(BIN);
            command
                .args(["--listen", "127.0.0.1:0", "--store", "postgres"])
                .args(["--database-table", table])
                .args(["--workers", "1", "--kick-timeout", "500ms"])
                .env("UNIQUE_DATABASE_URL", db.url())
                .env("RUST_LOG", "error");
            if i == 0 {
                command.arg("--create-table");
            }
            let (addr, guard) = start(&mut command);
            (format!("http://{addr}"), guard)
        })
        .unzip();
    let report = run_pool_workload("postgres, 3 servers on one table", table, urls);
    report.assert_clean();
}

#[test]
fn pooled_history_on_dynamodb_with_three_servers() {
    let table = "history-pool-3-servers";
    let (urls, _servers) = dynamodb_servers(table, &Dynalite::shared().endpoint_url(), 3, &[]);
    let report = run_pool_workload("dynamodb, 3 servers on one table", table, urls);
    report.assert_clean();
}

/// Runs `workload` on a runtime of its own and reports it as `name`.
fn run_pool(name: &str, workload: &PoolWorkload) -> PoolReport {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let history = runtime.block_on(workload.run()).unwrap();
    let report = PoolReport::new(name, &history);
    println!("{report}");
    report
}

/// The pooled workload with push nodes (issue 46): every session's node listens on no port
/// and holds its kick stream (`GET /v1/nodes/{node}/kicks`) open on the server, which
/// pushes each eviction's kick down it and waits for the node's ack. One memory server
/// takes the claims and the streams. The history must be clean, and every eviction's kick
/// confirmed: pushed to the evicted session's node, recorded there, acknowledged 200.
#[test]
fn pooled_history_with_push_nodes_on_memory() {
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--store", "memory"])
        .env("RUST_LOG", "error");
    let (addr, _server) = start(&mut command);
    let url = format!("http://{addr}");
    let workload = PoolWorkload::new([url.clone()])
        .project("pool-push-memory")
        .push_nodes([url])
        .duration(run_duration(SHORT_RUN));
    let report = run_pool("memory, one server, push nodes", &workload);
    report.assert_clean();
    assert_eq!(report.kicks_unconfirmed, 0, "{report}");
    assert_eq!(report.kicks_confirmed, report.evicted, "{report}");
    report.assert_kicks_confirmed(|_| true);
}
