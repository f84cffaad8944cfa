//! Lease histories over real server processes (see `unique-history`'s lease workload): 12
//! nodes with clocks up to a second apart, some stalling past their ttl, race for 4 rooms
//! with 40–200 ms ttls through `unique-client-http`'s `HttpDirectory`, spread across the
//! servers, and the checker must find no violation:
//!
//! - one server on the default store, fjall (its lease directory in `--fjall-dir` itself);
//! - one server on the embedded SQLite store (its lease directory a file beside `--db`);
//! - one server on the memory store;
//! - three servers on one PostgreSQL database (one set of lease tables);
//! - three servers on one DynamoDB lease table (dynalite), each with its own observations.
//!
//! Every server checks bearer tokens; the nodes' token covers their project. Each run lasts
//! a few seconds; `UNIQUE_HISTORY_SECS` lengthens them (`cargo xtask chaos`).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use unique_client_http::HttpTransport;
use unique_history::{LeaseReport, LeaseWorkload, run_duration};
use unique_lease::Directory;
use unique_testsupport::ChildGuard;
use unique_testsupport::dynalite::Dynalite;
use unique_testsupport::postgres;

use common::{BIN, dynamodb_command, postgres_command, start, write_secret};

/// How long each run lasts unless `UNIQUE_HISTORY_SECS` says otherwise.
const SHORT_RUN: Duration = Duration::from_secs(3);

/// The project the nodes' rooms belong to, and the token that covers it.
const PROJECT: &str = "lease-history";
const TOKEN: &str = "lease-history-test-token-0123456789";

/// Each call's bound; a call without an answer by then is indeterminate.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// A name no earlier run used (PostgreSQL and dynalite outlive one test binary).
fn fresh(what: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}_{}_{nanos}", std::process::id())
}

/// Writes the tokens file into `dir` and has `command` check callers against it.
fn with_auth<'c>(command: &'c mut Command, dir: &Path) -> &'c mut Command {
    let tokens = dir.join("tokens.json");
    write_secret(
        &tokens,
        &format!(
            r#"{{"tokens": [{{"name": "lease-history", "token": "{TOKEN}", "projects": ["{PROJECT}"]}}]}}"#
        ),
    );
    command.arg("--auth-tokens").arg(tokens)
}

/// Starts every command (each with auth); returns their base URLs and guards.
fn start_all(commands: Vec<Command>, dir: &Path) -> (Vec<String>, Vec<ChildGuard>) {
    commands
        .into_iter()
        .map(|mut command| {
            let (addr, guard) = start(with_auth(&mut command, dir).env("RUST_LOG", "error"));
            (format!("http://{addr}"), guard)
        })
        .unzip()
}

/// Runs the lease workload with the nodes spread over `urls` (node `i` on server
/// `i mod n`), and reports it.
fn run_workload(name: &str, urls: &[String]) -> LeaseReport {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let directories: Vec<Arc<dyn Directory>> = urls
        .iter()
        .map(|url| {
            let transport = HttpTransport::builder(url.as_str())
                .bearer_token(TOKEN)
                .timeout(CALL_TIMEOUT)
                .build()
                .unwrap();
            Arc::new(transport.directory(PROJECT)) as Arc<dyn Directory>
        })
        .collect();
    let history = runtime
        .block_on(
            LeaseWorkload::new(directories)
                .prefix(fresh("room"))
                .duration(run_duration(SHORT_RUN))
                .run(),
        )
        .unwrap();
    let report = LeaseReport::new(name, &history);
    println!("{report}");
    report
}

#[test]
fn lease_history_on_the_default_fjall_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--fjall-dir"])
        .arg(dir.path().join("unique.fjall"));
    let (urls, _servers) = start_all(vec![command], dir.path());
    run_workload("fjall, 1 server", &urls).assert_clean();
}

#[test]
fn lease_history_on_the_embedded_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--store", "sqlite", "--db"])
        .arg(dir.path().join("unique.db"));
    let (urls, _servers) = start_all(vec![command], dir.path());
    run_workload("sqlite, 1 server", &urls).assert_clean();
}

#[test]
fn lease_history_on_the_memory_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command.args(["--listen", "127.0.0.1:0", "--store", "memory"]);
    let (urls, _servers) = start_all(vec![command], dir.path());
    run_workload("memory, 1 server", &urls).assert_clean();
}

/// Three servers on one PostgreSQL database: one set of lease tables (the first server
/// creates them), the database's clock judging.
#[test]
fn lease_history_with_three_servers_on_one_postgres_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = postgres::shared();
    let (table, prefix) = (fresh("lease_history_sessions"), fresh("lh"));
    let commands = (0..3)
        .map(|i| {
            let mut command = postgres_command(db.url(), &table);
            command.args(["--database-lease-prefix", &prefix]);
            if i == 0 {
                command.arg("--create-table");
            }
            command
        })
        .collect();
    let (urls, _servers) = start_all(commands, dir.path());
    run_workload("postgres, 3 servers on one database", &urls).assert_clean();
}

/// Three servers on one DynamoDB lease table (the first creates it): no clock in the store,
/// each server's directory watching record versions on its own monotonic clock.
#[test]
fn lease_history_with_three_servers_on_one_dynamodb_table() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = Dynalite::shared().endpoint_url();
    let (table, lease_table) = (fresh("lease-history-sessions"), fresh("lease-history"));
    let commands = (0..3)
        .map(|i| {
            let mut command = dynamodb_command(&endpoint, &table);
            command.args(["--lease-table", &lease_table]);
            if i == 0 {
                command.arg("--create-table");
            }
            command
        })
        .collect();
    let (urls, _servers) = start_all(commands, dir.path());
    run_workload("dynamodb, 3 servers on one table", &urls).assert_clean();
}
