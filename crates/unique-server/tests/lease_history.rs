//! Lease histories over real server processes (see `unique-history`'s lease workload): 12
//! nodes with clocks up to a second apart, some stalling past their ttl, race for 4 rooms
//! with 40–200 ms ttls through `unique-client-http`'s `HttpDirectory`, spread across the
//! servers, and the checker must find no violation:
//!
//! - one server on the default store, fjall (its lease directory in `--fjall-dir` itself);
//! - one server on the embedded SQLite store (its lease directory a file beside `--db`);
//! - one server on the memory store;
//! - three servers on one PostgreSQL database (one set of lease tables);
//! - three servers on one DynamoDB lease table (dynalite), each with its own observations;
//! - fjall, SQLite and memory again, each on one server whose wall clock is stepped 120 s
//!   forward and back under the workload (libfaketime, D11).
//!
//! Every server checks bearer tokens; the nodes' token covers their project. Each run lasts
//! a few seconds; `UNIQUE_HISTORY_SECS` lengthens them (`cargo xtask chaos`).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use unique_client_http::{HttpDirectory, HttpTransport};
use unique_history::{LeaseReport, LeaseWorkload, run_duration};
use unique_lease::{Directory, LeaseBackend};
use unique_testsupport::ChildGuard;
use unique_testsupport::dynalite::Dynalite;
use unique_testsupport::faketime::FakeClock;
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

/// A lease directory on the server at `url`, as the nodes use it.
fn directory(url: &str) -> HttpDirectory {
    HttpTransport::builder(url)
        .bearer_token(TOKEN)
        .timeout(CALL_TIMEOUT)
        .build()
        .unwrap()
        .directory(PROJECT)
}

/// Runs the lease workload with the nodes spread over `urls` (node `i` on server
/// `i mod n`), and reports it. With a `clock` (every server on it), the servers' wall clock
/// goes through [`STEPS`] meanwhile.
fn run_workload(name: &str, urls: &[String], clock: Option<&FakeClock>) -> LeaseReport {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let directories: Vec<Arc<dyn Directory>> = urls
        .iter()
        .map(|url| Arc::new(directory(url)) as Arc<dyn Directory>)
        .collect();
    let duration = run_duration(SHORT_RUN);
    let workload = LeaseWorkload::new(directories)
        .prefix(fresh("room"))
        .duration(duration);
    let history = runtime
        .block_on(async {
            match clock {
                None => workload.run().await,
                Some(clock) => {
                    let mut probes = Vec::with_capacity(urls.len());
                    for url in urls {
                        probes.push(ClockProbe::new(directory(url)).await);
                    }
                    let (history, ()) =
                        tokio::join!(workload.run(), step(clock, &probes, duration));
                    history
                }
            }
        })
        .unwrap();
    let report = LeaseReport::new(name, &history);
    println!("{report}");
    report
}

/// The wall-clock offsets (seconds from the real time) a stepped run puts its servers at,
/// one after the other, evenly over the run: a step forward, two back, one forward. Each
/// holding lives at most 200 ms, so every step meets holdings written on the clock before it.
const STEPS: [i64; 4] = [120, 0, -120, 0];

/// Steps `clock` through [`STEPS`] over `run`, and checks after each step that every
/// server's wall clock followed (else the run would prove nothing).
async fn step(clock: &FakeClock, probes: &[ClockProbe], run: Duration) {
    let gap = run / u32::try_from(STEPS.len() + 1).unwrap();
    for offset in STEPS {
        tokio::time::sleep(gap).await;
        clock.set_offset(offset);
        for probe in probes {
            assert_eq!(
                probe.offset_secs().await,
                offset,
                "the server's wall clock did not follow the step to {offset:+} s"
            );
        }
    }
}

/// A node registration written before any step, for an hour: registrations are not held
/// across steps (D11), so the `ttl_left` a lookup reports moves with the server's wall
/// clock, which tells how far that clock is from the real time.
struct ClockProbe {
    directory: HttpDirectory,
    /// Taken before the registration was sent.
    written: Instant,
}

const PROBE_NODE: &str = "clock-probe";
const PROBE_TTL_MS: u64 = 3_600_000;

impl ClockProbe {
    async fn new(directory: HttpDirectory) -> Self {
        let written = Instant::now();
        directory
            .write_node(PROBE_NODE, "127.0.0.1:1", PROBE_TTL_MS)
            .await
            .expect("register the clock probe");
        Self { directory, written }
    }

    /// The server's wall clock less the real time, in whole seconds (the calls' own
    /// durations, milliseconds, round away).
    async fn offset_secs(&self) -> i64 {
        let node = self
            .directory
            .read_node(PROBE_NODE)
            .await
            .expect("look the clock probe up")
            .expect("the clock probe is registered");
        let ms = |n: u128| i64::try_from(n).unwrap();
        // What is left in real time, less what the server's clock says is left.
        let ahead_ms = ms(u128::from(PROBE_TTL_MS))
            - ms(self.written.elapsed().as_millis())
            - ms(u128::from(node.ttl_left_ms));
        (ahead_ms + 500).div_euclid(1_000)
    }
}

/// The lease workload on one server whose wall clock (`CLOCK_REALTIME`, through
/// libfaketime) goes through [`STEPS`] while its monotonic clock runs on: every holding
/// alive at a step was written on the clock before it. The checker's rules are D11's
/// promises as the nodes see them: after a step forward no room goes to another node while
/// its holder acts on it (no overlap, no stale verify), and after a step back no answer says
/// more is left than the ttl granted ([`LeaseRule::TtlLeft`](unique_history::LeaseRule)).
fn run_across_steps(name: &str, mut command: Command, dir: &Path) {
    let clock = FakeClock::new(dir);
    clock.apply(&mut command);
    let (urls, _servers) = start_all(vec![command], dir);
    let steps: Vec<String> = STEPS.iter().map(|s| format!("{s:+}")).collect();
    let name = format!("{name}, wall clock stepped to {} s", steps.join(", "));
    run_workload(&name, &urls, Some(&clock)).assert_clean();
}

#[test]
fn lease_history_on_the_default_fjall_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--fjall-dir"])
        .arg(dir.path().join("unique.fjall"));
    let (urls, _servers) = start_all(vec![command], dir.path());
    run_workload("fjall, 1 server", &urls, None).assert_clean();
}

#[test]
fn lease_history_on_the_embedded_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--store", "sqlite", "--db"])
        .arg(dir.path().join("unique.db"));
    let (urls, _servers) = start_all(vec![command], dir.path());
    run_workload("sqlite, 1 server", &urls, None).assert_clean();
}

#[test]
fn lease_history_on_the_memory_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command.args(["--listen", "127.0.0.1:0", "--store", "memory"]);
    let (urls, _servers) = start_all(vec![command], dir.path());
    run_workload("memory, 1 server", &urls, None).assert_clean();
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
    run_workload("postgres, 3 servers on one database", &urls, None).assert_clean();
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
    run_workload("dynamodb, 3 servers on one table", &urls, None).assert_clean();
}

/// Clock steps (D11) on the stores judged on the server's own wall clock. PostgreSQL judges
/// on the database's clock (its `now()`), which libfaketime on the server does not move, so
/// a stepped server there would test nothing; the contract's D11 cases step its clock
/// instead. DynamoDB has no store clock (D10).
#[test]
fn lease_history_across_clock_steps_on_the_default_fjall_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--fjall-dir"])
        .arg(dir.path().join("unique.fjall"));
    run_across_steps("fjall, 1 server", command, dir.path());
}

#[test]
fn lease_history_across_clock_steps_on_the_embedded_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--store", "sqlite", "--db"])
        .arg(dir.path().join("unique.db"));
    run_across_steps("sqlite, 1 server", command, dir.path());
}

#[test]
fn lease_history_across_clock_steps_on_the_memory_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command.args(["--listen", "127.0.0.1:0", "--store", "memory"]);
    run_across_steps("memory, 1 server", command, dir.path());
}
