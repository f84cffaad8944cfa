//! Lease histories against in-process directories: the memory directory and Redis, which
//! must keep every rule with skewed and stalling nodes, and a directory that judges expiry
//! by the caller's clock, which the checker must catch.
//!
//! Each run lasts 3 s; `UNIQUE_HISTORY_SECS` lengthens them.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use unique_history::{LeaseReport, LeaseRule, LeaseWorkload, run_duration};
use unique_lease::{
    Clock, Directory, Lease, LeaseError, ManualClock, MemoryDirectory, RedisDirectory, async_trait,
};

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

/// The directory every backend was before D10: expiry judged by the `now` each caller
/// passes (a memory directory whose clock is set to the caller's `now` for every call).
struct TrustsTheCaller {
    caller: Arc<ManualClock>,
    memory: MemoryDirectory,
    /// Holds the clock at the caller's `now` for the whole call.
    one_at_a_time: Mutex<()>,
}

impl TrustsTheCaller {
    fn new() -> Self {
        let caller = Arc::new(ManualClock::new(SystemTime::now()));
        Self {
            memory: MemoryDirectory::with_clock(caller.clone()),
            caller,
            one_at_a_time: Mutex::new(()),
        }
    }

    /// Runs `call` on the memory directory with its clock at `now`. The memory directory
    /// answers without awaiting anything, so polling once suffices.
    fn at<T>(
        &self,
        now: SystemTime,
        call: impl Future<Output = Result<T, LeaseError>>,
    ) -> Result<T, LeaseError> {
        let _one = self
            .one_at_a_time
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.caller.set(now);
        let mut call = std::pin::pin!(call);
        let waker = std::task::Waker::noop();
        match call
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
        {
            std::task::Poll::Ready(answer) => answer,
            std::task::Poll::Pending => unreachable!("the memory directory never waits"),
        }
    }
}

#[async_trait]
impl Directory for TrustsTheCaller {
    async fn lookup(&self, room_id: &str) -> Result<Option<Lease>, LeaseError> {
        let now = self.caller.now();
        self.at(now, self.memory.lookup(room_id))
    }

    async fn ensure_owner(
        &self,
        room_id: &str,
        node_id: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        self.at(now, self.memory.ensure_owner(room_id, node_id, now, ttl))
    }

    async fn verify_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
        now: SystemTime,
    ) -> Result<bool, LeaseError> {
        self.at(
            now,
            self.memory.verify_owner(room_id, node_id, lease_token, now),
        )
    }

    async fn release_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        self.memory
            .release_owner(room_id, node_id, lease_token)
            .await
    }
}

/// With node clocks a second apart, a directory that trusts the callers' `now` lets a
/// node whose clock runs ahead take rooms still held: two holdings in force at once, in
/// every run (a node whose clock runs behind verifying its superseded token true, a
/// [`LeaseRule::StaleVerify`], shows up in most runs too, and is reported when it does).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_directory_trusting_the_callers_clocks_is_caught() {
    let broken: Arc<dyn Directory> = Arc::new(TrustsTheCaller::new());
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
