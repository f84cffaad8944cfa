#![doc = include_str!("../README.md")]
// Request counts and nanosecond latencies stay far below 2^52, where u64 → f64 is exact.
#![allow(clippy::cast_precision_loss)]

mod cpu;
mod http_client;
mod keys;
mod load;
mod redis_client;
mod report;
mod server;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::cpu::CpuTimes;
use crate::keys::KeyChoice;
use crate::load::{LoadPlan, Measurement};
use crate::server::{DbSync, ServerStore};

/// Measures unique-server (memory and durable sqlite stores) and a redis-server claim
/// script side by side: the same closed-loop client, connections and key sequence.
#[derive(Debug, Parser)]
#[command(name = "unique-bench", version, about, long_about = None)]
struct Args {
    /// Keep-alive connections per target; each has one request in flight (closed loop).
    #[arg(long, default_value_t = 64)]
    connections: usize,

    /// Measured time per target (after the warm-up).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,

    /// Unmeasured load before each measurement (fills the keys, warms caches).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    warmup: Duration,

    /// Number of distinct keys (uids 1..=keys).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,

    /// How each request picks its key.
    #[arg(long, value_enum, default_value_t = Dist::Uniform)]
    dist: Dist,

    /// With --dist hot: how many keys are hot (the lowest uids).
    #[arg(long, default_value_t = 16)]
    hot_keys: u64,

    /// With --dist hot: the share of requests that go to a hot key (0..=1).
    #[arg(long, default_value_t = 0.9)]
    hot_share: f64,

    /// Share of requests (0..=1) that retry the connection's previous claim with the
    /// same claim_id: answered by the replay short-circuit (no write).
    #[arg(long, default_value_t = 0.0)]
    replay_share: f64,

    /// Which targets to measure, in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Target::ALL)]
    targets: Vec<Target>,

    /// Worker threads of the client's runtime (the client shares the machine with the server).
    #[arg(long, default_value_t = 2)]
    client_threads: usize,

    /// Worker threads of unique-server's runtime (default: the server's own, one per core).
    #[arg(long)]
    server_workers: Option<usize>,

    /// A prebuilt unique-server binary; without it the bench runs
    /// `cargo build --release -p unique-server` and uses target/release/unique-server.
    #[arg(long)]
    server_bin: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Dist {
    /// Every key equally likely.
    Uniform,
    /// --hot-share of the requests go to --hot-keys keys, the rest uniformly to all.
    Hot,
}

/// One system under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    /// redis-server running the equivalent claim script (the baseline).
    Redis,
    /// unique-server --store memory.
    Memory,
    /// unique-server --store sqlite --db-sync full (fsync per group commit; the default).
    SqliteFull,
    /// unique-server --store sqlite --db-sync normal (no fsync per commit).
    SqliteNormal,
}

impl Target {
    const ALL: [Target; 4] = [
        Target::Redis,
        Target::Memory,
        Target::SqliteFull,
        Target::SqliteNormal,
    ];

    fn label(self) -> &'static str {
        match self {
            Target::Redis => "redis lua script",
            Target::Memory => "unique memory",
            Target::SqliteFull => "unique sqlite full",
            Target::SqliteNormal => "unique sqlite normal",
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("unique-bench: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let keys = match args.dist {
        Dist::Uniform => KeyChoice::uniform(args.keys)?,
        Dist::Hot => KeyChoice::hot(args.keys, args.hot_keys, args.hot_share)?,
    };
    if !(0.0..=1.0).contains(&args.replay_share) {
        return Err("--replay-share must be between 0 and 1".into());
    }
    if args.connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    let plan = LoadPlan {
        connections: args.connections,
        warmup: args.warmup,
        duration: args.duration,
        keys,
        replay_share: args.replay_share,
    };
    let needs_server = args.targets.iter().any(|t| *t != Target::Redis);
    let server_bin = match (&args.server_bin, needs_server) {
        (Some(path), _) => Some(path.clone()),
        (None, true) => Some(server::build_release()?),
        (None, false) => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the client runtime: {e}"))?;

    eprintln!("{}", report::plan_line(&plan, args.client_threads));
    let mut rows = Vec::new();
    for &target in &args.targets {
        let measurement = measure(&runtime, target, &plan, server_bin.as_deref(), args)?;
        rows.push((target.label(), target == Target::Redis, measurement));
    }
    println!();
    println!("{}", report::plan_line(&plan, args.client_threads));
    print!("{}", report::table(&rows));
    Ok(())
}

fn measure(
    runtime: &tokio::runtime::Runtime,
    target: Target,
    plan: &LoadPlan,
    server_bin: Option<&std::path::Path>,
    args: &Args,
) -> Result<Measurement, String> {
    let label = target.label();
    let before = CpuTimes::now();
    let mut measurement = match target {
        Target::Redis => {
            let server = unique_testsupport::redis::RedisServer::start();
            let connector = redis_client::RedisConnector::new(&server.url())?;
            runtime.block_on(load::run(label, &connector, plan))
        }
        Target::Memory | Target::SqliteFull | Target::SqliteNormal => {
            let store = match target {
                Target::Memory => ServerStore::Memory,
                Target::SqliteFull => ServerStore::Sqlite(DbSync::Full),
                _ => ServerStore::Sqlite(DbSync::Normal),
            };
            let bin = server_bin.ok_or("no unique-server binary")?;
            let server = server::UniqueServer::start(bin, store, args.server_workers)?;
            let connector = http_client::HttpConnector::new(server.addr());
            runtime.block_on(load::run(label, &connector, plan))
        }
    };
    // Both arms have dropped (killed and reaped) their server by now, so its CPU
    // time is in the children's counters.
    measurement.cpu = before.zip(CpuTimes::now()).map(|(b, a)| a.since(b));
    Ok(measurement)
}
