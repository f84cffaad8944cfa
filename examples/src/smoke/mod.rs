//! The smoke runner (`docs/design.md#smoke-scenarios`): S1–S6 against one `unique-server` process and
//! `smoke-client` processes over loopback HTTP.
//!
//! The server runs on the embedded fjall store by default (a directory in a scratch
//! directory): it is the store `unique-server` runs on unless told otherwise, so the smoke
//! covers what a user deploys, durable commits included. `--store sqlite` runs it on the
//! SQLite store, `--store memory` is there for a quicker loop. Kicks are signed: the server gets `--kick-signing-keys` and every client
//! verifies with the same key file.

mod harness;
mod process;
mod scenarios;

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use harness::{Harness, WAIT};
pub use process::Proc;

/// Which store the server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// `--store fjall` with its directory in the scratch directory.
    Fjall,
    /// `--store sqlite` with a database file in the scratch directory.
    Sqlite,
    /// `--store memory`.
    Memory,
}

/// How the runner runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where `unique-server` and `smoke-client` are.
    pub bin_dir: PathBuf,
    /// The server's store.
    pub store: StoreKind,
    /// The server's `--kick-timeout`.
    pub kick_timeout: Duration,
    /// Every client's heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Echo every child's stdout line to stderr.
    pub verbose: bool,
}

/// The bound on a whole scenario, on top of the bound on each wait inside it.
const SCENARIO_LIMIT: Duration = Duration::from_mins(1);

/// Runs S1–S6 in order, printing one line per scenario and a total. Stops at the first
/// failure (the later scenarios build on the earlier ones' state), prints the clients'
/// last lines and keeps the logs. Returns whether every scenario passed.
pub async fn run(options: Options) -> bool {
    let started = Instant::now();
    let store = options.store;
    let mut h = match Harness::start(options).await {
        Ok(h) => h,
        Err(e) => {
            println!("smoke: FAIL: {e}");
            return false;
        }
    };
    println!(
        "smoke: unique-server on {} ({store:?} store, kick timeout {:?}, signed kicks), heartbeat {:?}",
        h.server_url,
        h.kick_timeout(),
        h.interval()
    );
    let mut report = Report::default();
    let ok = report
        .run("S1", "first login", scenarios::s1_first_login(&mut h))
        .await
        && report
            .run(
                "S2",
                "second node kicks the first",
                scenarios::s2_second_node_kicks_the_first(&mut h),
            )
            .await
        && report
            .run(
                "S3",
                "retry is replayed",
                scenarios::s3_retry_is_replayed(&mut h),
            )
            .await
        && report
            .run(
                "S4",
                "unreachable old node",
                scenarios::s4_unreachable_old_node(&mut h),
            )
            .await
        && report
            .run("S5", "racing logins", scenarios::s5_racing_logins(&mut h))
            .await
        && report
            .run("S6", "logout", scenarios::s6_logout(&mut h))
            .await;
    if !ok {
        for id in ["S1", "S2", "S3", "S4", "S5", "S6"].iter().skip(report.ran) {
            println!("{id} NOT RUN");
        }
        println!("last lines of each client:\n{}", h.tails(6));
        println!("logs kept in {}", h.keep_logs().display());
    }
    println!(
        "smoke: {} of 6 passed; S1-S6 took {:.2?}, {:.2?} in all",
        report.passed,
        report.scenarios,
        started.elapsed()
    );
    ok
}

#[derive(Default)]
struct Report {
    ran: usize,
    passed: usize,
    scenarios: Duration,
}

impl Report {
    async fn run(
        &mut self,
        id: &str,
        title: &str,
        scenario: impl Future<Output = Result<String, String>>,
    ) -> bool {
        let started = Instant::now();
        let result = tokio::time::timeout(SCENARIO_LIMIT, scenario)
            .await
            .unwrap_or_else(|_| Err(format!("did not finish within {SCENARIO_LIMIT:?}")));
        let took = started.elapsed();
        self.ran += 1;
        self.scenarios += took;
        match result {
            Ok(summary) => {
                self.passed += 1;
                println!("{id} PASS {took:>8.1?}  {title}: {summary}");
                true
            }
            Err(why) => {
                println!("{id} FAIL {took:>8.1?}  {title}: {why}");
                false
            }
        }
    }
}
