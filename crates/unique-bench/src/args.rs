//! The bench's command line.

use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::keys::Keys;
use crate::target::Target;

/// Measures unique-server (memory, durable sqlite and postgres stores) and a redis-server claim
/// script side by side: the same closed-loop client, connections and key sequence.
#[derive(Debug, Parser)]
#[command(name = "unique-bench", version, about, long_about = None)]
// Independent command-line switches, not a state machine.
#[allow(clippy::struct_excessive_bools)]
pub(crate) struct Args {
    /// Keep-alive connections per target; each has one request in flight (closed loop).
    #[arg(long, default_value_t = 64)]
    pub(crate) connections: usize,

    /// Measured time per target in each round (after the warm-up).
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    pub(crate) duration: Duration,

    /// Unmeasured load before each measurement (opens the connections, fills the
    /// keys, warms caches).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub(crate) warmup: Duration,

    /// Rounds: each measures every target once, in order, so a change in the
    /// machine's load hits all targets alike. The table sums the rounds; the ratio
    /// to Redis is the median of the per-round ratios, with their range. 0 skips the
    /// throughput passes (with --resident-sessions, only the memory measure runs).
    #[arg(long, default_value_t = 5)]
    pub(crate) rounds: usize,

    /// After the throughput passes, load this many sessions into fresh servers (Redis with
    /// persistence off, unique-server on the memory, SQLite `full` and fjall stores) and print
    /// each server's resident bytes per session (VmRSS growth), Redis's used_memory per
    /// session, and the durable stores' bytes on disk per session. 0 skips it.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    pub(crate) resident_sessions: u64,

    /// Connections of the --resident-sessions load (more than --connections, so the durable
    /// stores' group commits are large and a million sessions load in about a minute).
    #[arg(long, default_value_t = 256)]
    pub(crate) resident_connections: usize,

    /// Which uids the claims go to: `random` (uniform over 1..=10^8, a fresh sequence each
    /// round: nearly every claim is a first login), or a count N (uids 1..=N, the same
    /// sequence each round; `--keys 10000` is the bench's default before random users).
    #[arg(long, default_value = "random", value_parser = clap::value_parser!(Keys))]
    pub(crate) keys: Keys,

    /// With `--keys random`: after the random-users passes, measure the like-for-like targets
    /// (Redis both ways, memory, SQLite full, fjall, the HTTP floor) again on a fixed set of
    /// this many uids, pinned and (unless --pinned-only) unpinned: every claim after the
    /// warm-up logs a known key in again. 0 skips these passes.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) fixed_keys: u64,

    /// How each request picks its key among --keys.
    #[arg(long, value_enum, default_value_t = Dist::Uniform)]
    pub(crate) dist: Dist,

    /// With --dist hot: how many keys are hot (the lowest uids).
    #[arg(long, default_value_t = 16)]
    pub(crate) hot_keys: u64,

    /// With --dist hot: the share of requests that go to a hot key (0..=1).
    #[arg(long, default_value_t = 0.9)]
    pub(crate) hot_share: f64,

    /// Share of requests (0..=1) that retry the connection's previous claim with the
    /// same claim_id: answered by the replay short-circuit (no write).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) replay_share: f64,

    /// Which targets to measure, in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Target::ALL)]
    pub(crate) targets: Vec<Target>,

    /// Run unpinned, client and servers sharing every CPU (how the bench ran before pinning). By
    /// default the servers run on one CPU and the load generator on another, when the
    /// process may use at least two.
    #[arg(long, conflicts_with = "pinned_only")]
    pub(crate) no_pin: bool,

    /// Measure pinned only: no unpinned pass after the pinned one.
    #[arg(long)]
    pub(crate) pinned_only: bool,

    /// Which of --targets a pinned run measures again unpinned, after the pinned pass, on
    /// freshly started servers.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Target::UNPINNED)]
    pub(crate) unpinned_targets: Vec<Target>,

    /// Worker threads of the client's runtime (pinned, they share the load generator's CPU).
    #[arg(long, default_value_t = 1)]
    pub(crate) client_threads: usize,

    /// Worker threads of unique-server's runtime (`--workers`). The default, 1,
    /// gives the server one core as redis-server (single-threaded) has, and leaves
    /// the other to the client; 0 means the server's own default (all CPUs but one).
    #[arg(long, default_value_t = 1)]
    pub(crate) server_workers: usize,

    /// Run the HTTP floor server instead of a bench (the bench starts it for the
    /// `http-floor` target).
    #[arg(long, hide = true)]
    pub(crate) serve_floor: bool,

    /// Start every unique-server with `--audit-log` (a file in its scratch directory): each
    /// claim's record is written and fsynced (one fsync shared by the claims that wait
    /// together) before its answer. Compare a run with and without it for the audit log's
    /// cost per claim.
    #[arg(long)]
    pub(crate) server_audit_log: bool,

    /// A prebuilt unique-server binary; without it the bench runs
    /// `cargo build --release -p unique-server` and uses target/release/unique-server.
    #[arg(long)]
    pub(crate) server_bin: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Dist {
    /// Every key equally likely.
    Uniform,
    /// --hot-share of the requests go to --hot-keys keys (the lowest uids), the rest
    /// uniformly to all.
    Hot,
}
