//! Lease histories against in-process directories: the memory directory and Redis, which
//! must keep every rule with skewed and stalling nodes, and a directory that judges expiry
//! by the caller's clock, which the checker must catch.
//!
//! Each run lasts 3 s; `UNIQUE_HISTORY_SECS` lengthens them.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use unique_history::{LeaseReport, LeaseRule, LeaseWorkload, run_duration};
use unique_lease::{Directory, MemoryDirectory, RedisDirectory};

/// Runs the lease workload through `directories` and reports it.
async fn run(name: &str, prefix: &str, directories: Vec<Arc<dyn Directory>>) -> LeaseReport {
    let history = LeaseWorkload::new(directories)
        .prefix(prefix)
        .duration(run_duration(Duration::from_secs(3)))
        .run()
        .await
        .unwrap();
    let report = LeaseReport::new(name, &history);
    println!("{report}");
    report
}

/// One memory directory, shared by every node: its clock (the process's) judges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_directory_keeps_every_rule() {
    let memory: Arc<dyn Directory> = Arc::new(MemoryDirectory::new());
    let report = run("memory", "memory", vec![memory]).await;
    report.assert_clean();
}

/// Three Redis directories (three connections) on one redis-server and one key prefix:
/// Redis's `TIME` judges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_directories_keep_every_rule() {
    let server = unique_testsupport::redis::shared();
    let prefix = format!("{{lease-history-{}}}", fastrand::u64(..));
    let mut directories: Vec<Arc<dyn Directory>> = Vec::new();
    for _ in 0..3 {
        let conn = RedisDirectory::connection_manager(&server.url())
            .await
            .expect("connect to the test redis-server");
        let directory = RedisDirectory::builder(conn)
            .key_prefix(prefix.as_str())
            .build()
            .expect("valid settings");
        directories.push(Arc::new(directory));
    }
    let report = run("redis, 3 connections", "redis", directories).await;
    report.assert_clean();
}

/// With node clocks a second apart, a directory that trusts the callers' `now` lets a
/// node whose clock runs ahead take rooms still held: two holdings in force at once, in
/// every run (a node whose clock runs behind verifying its superseded token true, a
/// [`LeaseRule::StaleVerify`], shows up in most runs too, and is reported when it does).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_directory_trusting_the_callers_clocks_is_caught() {
    let broken: Arc<dyn Directory> = Arc::new(unique_lease_contract::TrustsTheCaller::new(
        SystemTime::now(),
    ));
    let report = run(
        "memory trusting the callers' clocks",
        "trusting",
        vec![broken],
    )
    .await;
    assert!(
        report.violations_of(LeaseRule::Overlap) > 0,
        "two holdings in force at once must be found\n{report}"
    );
}
