#![doc = include_str!("../README.md")]
// Request counts and nanosecond latencies stay far below 2^52, where u64 → f64 is exact.
#![allow(clippy::cast_precision_loss)]

mod conn;
mod cpu;
mod floor;
mod http_client;
mod keys;
mod load;
mod redis_client;
mod report;
mod server;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::cpu::Process;
use crate::http_client::HttpConnector;
use crate::keys::KeyChoice;
use crate::load::{LoadPlan, Measurement};
use crate::redis_client::RedisConnector;
use crate::report::{Role, Row};
use crate::server::{DbSync, ServerStore, UniqueServer, Variant};
use unique_testsupport::postgres::PostgresServer;
use unique_testsupport::redis::{Persistence, RedisServer};

/// Measures unique-server (memory, durable sqlite and postgres stores) and a redis-server claim
/// script side by side: the same closed-loop client, connections and key sequence.
#[derive(Debug, Parser)]
#[command(name = "unique-bench", version, about, long_about = None)]
struct Args {
    /// Keep-alive connections per target; each has one request in flight (closed loop).
    #[arg(long, default_value_t = 64)]
    connections: usize,

    /// Measured time per target in each round (after the warm-up).
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    duration: Duration,

    /// Unmeasured load before each measurement (opens the connections, fills the
    /// keys, warms caches).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    warmup: Duration,

    /// Rounds: each measures every target once, in order, so a change in the
    /// machine's load hits all targets alike. The table sums the rounds; the ratio
    /// to Redis is the median of the per-round ratios, with their range.
    #[arg(long, default_value_t = 5)]
    rounds: usize,

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
    #[arg(long, default_value_t = 1)]
    client_threads: usize,

    /// Worker threads of unique-server's runtime (`--workers`). The default, 1,
    /// gives the server one core as redis-server (single-threaded) has, and leaves
    /// the other to the client; 0 means the server's own default, one per core.
    #[arg(long, default_value_t = 1)]
    server_workers: usize,

    /// Run the HTTP floor server instead of a bench (the bench starts it for the
    /// `http-floor` target).
    #[arg(long, hide = true)]
    serve_floor: bool,

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
    /// The same script on a redis-server that fsyncs its append-only file before
    /// answering (`--appendonly yes --appendfsync always`): the baseline of the
    /// durable sqlite targets.
    RedisAof,
    /// unique-server --store memory.
    Memory,
    /// unique-server --store memory --no-metrics: what recording metrics costs.
    MemoryNoMetrics,
    /// unique-server --store memory with the security guards on: --auth-tokens (every
    /// request carries a bearer token checked in constant time and scoped by project)
    /// and --kick-signing-keys (a kick, when one is sent, is signed).
    MemoryGuarded,
    /// unique-server --store sqlite --db-sync full (fsync per group commit; the default).
    SqliteFull,
    /// unique-server --store sqlite --db-sync normal (no fsync per commit).
    SqliteNormal,
    /// unique-server --store postgres on a private PostgreSQL (fsync and
    /// synchronous_commit on), started by the bench.
    Postgres,
    /// A server that answers every request with a canned claim answer and does
    /// nothing else (`src/floor.rs`): what any HTTP server costs on this machine.
    HttpFloor,
}

impl Target {
    const ALL: [Target; 9] = [
        Target::Redis,
        Target::RedisAof,
        Target::Memory,
        Target::MemoryNoMetrics,
        Target::MemoryGuarded,
        Target::SqliteFull,
        Target::SqliteNormal,
        Target::Postgres,
        Target::HttpFloor,
    ];

    fn label(self) -> &'static str {
        match self {
            Target::Redis => "redis lua script",
            Target::RedisAof => "redis lua, aof always",
            Target::Memory => "unique memory",
            Target::MemoryNoMetrics => "unique memory, no metrics",
            Target::MemoryGuarded => "unique memory, auth + signing",
            Target::SqliteFull => "unique sqlite full",
            Target::SqliteNormal => "unique sqlite normal",
            Target::Postgres => "unique postgres",
            Target::HttpFloor => "http floor (canned answer)",
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.serve_floor {
        return floor::serve();
    }
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
    if args.rounds == 0 {
        return Err("--rounds must be at least 1".into());
    }
    let plan = LoadPlan {
        connections: args.connections,
        warmup: args.warmup,
        duration: args.duration,
        keys,
        replay_share: args.replay_share,
    };
    let needs_server = args
        .targets
        .iter()
        .any(|t| !matches!(t, Target::Redis | Target::RedisAof | Target::HttpFloor));
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

    let describe = report::plan_line(&plan, args.rounds, args.client_threads, args.server_workers);
    eprintln!("{describe}");
    // Every server runs for the whole bench; the ones not being measured sit idle.
    let running = args
        .targets
        .iter()
        .map(|&target| Running::start(target, server_bin.as_deref(), args.server_workers))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rounds: Vec<Vec<Measurement>> = running.iter().map(|_| Vec::new()).collect();
    for round in 1..=args.rounds {
        for (target, measured) in running.iter().zip(&mut rounds) {
            let label = format!("{} {round}/{}", target.target.label(), args.rounds);
            measured.push(target.measure(&runtime, &label, &plan));
        }
    }
    let rows: Vec<Row> = running
        .iter()
        .zip(rounds)
        .map(|(target, rounds)| Row {
            label: target.target.label(),
            role: match target.target {
                Target::Redis => Role::Baseline,
                Target::RedisAof => Role::DurableBaseline,
                Target::Memory => Role::Memory,
                Target::MemoryNoMetrics
                | Target::MemoryGuarded
                | Target::SqliteFull
                | Target::SqliteNormal
                | Target::Postgres
                | Target::HttpFloor => Role::Other,
            },
            rounds,
        })
        .collect();
    println!();
    println!("{describe}");
    print!("{}", report::table(&rows));
    Ok(())
}

/// A target whose server runs until this is dropped.
struct Running {
    target: Target,
    connector: Connector,
    pid: u32,
    /// Held only so the server lives; dropping it kills the process.
    _server: Box<dyn std::any::Any>,
}

enum Connector {
    Redis(RedisConnector),
    Http(HttpConnector),
}

impl Running {
    fn start(
        target: Target,
        server_bin: Option<&std::path::Path>,
        server_workers: usize,
    ) -> Result<Self, String> {
        let variant = match target {
            Target::MemoryNoMetrics => Variant::NoMetrics,
            Target::MemoryGuarded => Variant::Guarded,
            _ => Variant::Default,
        };
        let mut database = None;
        let store = match target {
            Target::Redis | Target::RedisAof => {
                let server = RedisServer::start_with(if target == Target::Redis {
                    Persistence::Off
                } else {
                    Persistence::AppendFsyncAlways
                });
                return Ok(Self {
                    target,
                    connector: Connector::Redis(RedisConnector::new(server.addr())),
                    pid: server.pid(),
                    _server: Box::new(server),
                });
            }
            Target::HttpFloor => {
                let server = UniqueServer::start_floor()?;
                return Ok(Self {
                    target,
                    connector: Connector::Http(HttpConnector::new(server.addr(), None)),
                    pid: server.pid(),
                    _server: Box::new(server),
                });
            }
            Target::Memory | Target::MemoryNoMetrics | Target::MemoryGuarded => ServerStore::Memory,
            Target::SqliteFull => ServerStore::Sqlite(DbSync::Full),
            Target::SqliteNormal => ServerStore::Sqlite(DbSync::Normal),
            Target::Postgres => {
                let started = PostgresServer::start();
                let url = started.url().to_owned();
                database = Some(started);
                ServerStore::Postgres(url)
            }
        };
        let bin = server_bin.ok_or("no unique-server binary")?;
        let workers = (server_workers > 0).then_some(server_workers);
        let server = UniqueServer::start(bin, store, workers, variant)?;
        let connector = HttpConnector::new(server.addr(), server.bearer_token());
        Ok(Self {
            target,
            connector: Connector::Http(connector),
            pid: server.pid(),
            // A tuple drops in order: the server before its database.
            _server: Box::new((server, database)),
        })
    }

    /// One round: warm-up and measured window, with both processes' CPU time.
    fn measure(
        &self,
        runtime: &tokio::runtime::Runtime,
        label: &str,
        plan: &LoadPlan,
    ) -> Measurement {
        let server = Process::Pid(self.pid);
        let before = cpu::used(Process::This).zip(cpu::used(server));
        let mut measurement = match &self.connector {
            Connector::Redis(connector) => runtime.block_on(load::run(label, connector, plan)),
            Connector::Http(connector) => runtime.block_on(load::run(label, connector, plan)),
        };
        let after = cpu::used(Process::This).zip(cpu::used(server));
        measurement.cpu = before
            .zip(after)
            .map(|((client0, server0), (client1, server1))| {
                (
                    client1.saturating_sub(client0),
                    server1.saturating_sub(server0),
                )
            });
        measurement
    }
}
