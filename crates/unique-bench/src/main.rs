#![doc = include_str!("../README.md")]
// Request counts and nanosecond latencies stay far below 2^52, where u64 → f64 is exact.
#![allow(clippy::cast_precision_loss)]

mod conn;
mod cpu;
mod floor;
mod http_client;
mod io;
mod keys;
mod load;
mod pin;
mod redis_client;
mod report;
mod resident;
mod server;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::cpu::Process;
use crate::http_client::HttpConnector;
use crate::keys::{KeyChoice, Keys};
use crate::load::{LoadPlan, Measurement};
use crate::pin::{Placement, Unpinned};
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
    /// to Redis is the median of the per-round ratios, with their range. 0 skips the
    /// throughput passes (with --resident-sessions, only the memory measure runs).
    #[arg(long, default_value_t = 5)]
    rounds: usize,

    /// After the throughput passes, load this many sessions into fresh servers (Redis with
    /// persistence off, unique-server on the memory, SQLite `full` and fjall stores) and print
    /// each server's resident bytes per session (VmRSS growth), Redis's used_memory per
    /// session, and the durable stores' bytes on disk per session. 0 skips it.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    resident_sessions: u64,

    /// Connections of the --resident-sessions load (more than --connections, so the durable
    /// stores' group commits are large and a million sessions load in about a minute).
    #[arg(long, default_value_t = 256)]
    resident_connections: usize,

    /// Which uids the claims go to: `random` (uniform over 1..=10^8, a fresh sequence each
    /// round: nearly every claim is a first login), or a count N (uids 1..=N, the same
    /// sequence each round; `--keys 10000` is the bench's default before random users).
    #[arg(long, default_value = "random", value_parser = clap::value_parser!(Keys))]
    keys: Keys,

    /// With `--keys random`: after the random-users passes, measure the like-for-like targets
    /// (Redis both ways, memory, SQLite full, fjall, the HTTP floor) again on a fixed set of
    /// this many uids, pinned and (unless --pinned-only) unpinned: every claim after the
    /// warm-up logs a known key in again. 0 skips these passes.
    #[arg(long, default_value_t = 10_000)]
    fixed_keys: u64,

    /// How each request picks its key among --keys.
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

    /// Run unpinned, client and servers sharing every CPU (how the bench ran before pinning). By
    /// default the servers run on one CPU and the load generator on another, when the
    /// process may use at least two.
    #[arg(long, conflicts_with = "pinned_only")]
    no_pin: bool,

    /// Measure pinned only: no unpinned pass after the pinned one.
    #[arg(long)]
    pinned_only: bool,

    /// Which of --targets a pinned run measures again unpinned, after the pinned pass, on
    /// freshly started servers.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Target::UNPINNED)]
    unpinned_targets: Vec<Target>,

    /// Worker threads of the client's runtime (pinned, they share the load generator's CPU).
    #[arg(long, default_value_t = 1)]
    client_threads: usize,

    /// Worker threads of unique-server's runtime (`--workers`). The default, 1,
    /// gives the server one core as redis-server (single-threaded) has, and leaves
    /// the other to the client; 0 means the server's own default (all CPUs but one).
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
    /// --hot-share of the requests go to --hot-keys keys (the lowest uids), the rest
    /// uniformly to all.
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
    /// unique-server --store fjall (an LSM tree; fsync per group commit).
    Fjall,
    /// unique-server --store postgres on a private PostgreSQL (fsync and
    /// synchronous_commit on), started by the bench.
    Postgres,
    /// A server that answers every request with a canned claim answer and does
    /// nothing else (`src/floor.rs`): what any HTTP server costs on this machine.
    HttpFloor,
}

impl Target {
    const ALL: [Target; 10] = [
        Target::Redis,
        Target::RedisAof,
        Target::Memory,
        Target::MemoryNoMetrics,
        Target::MemoryGuarded,
        Target::SqliteFull,
        Target::SqliteNormal,
        Target::Fjall,
        Target::Postgres,
        Target::HttpFloor,
    ];

    /// What a pinned run measures again unpinned by default: the memory and durable
    /// stores, their Redis baselines and the HTTP floor.
    const UNPINNED: [Target; 6] = [
        Target::Redis,
        Target::RedisAof,
        Target::Memory,
        Target::SqliteFull,
        Target::Fjall,
        Target::HttpFloor,
    ];

    /// What the `--fixed-keys` passes measure (of `--targets`): the same as the unpinned pass.
    const LIKE_FOR_LIKE: [Target; 6] = Self::UNPINNED;

    /// What the memory measure counts as the store's bytes on disk, for a store with files.
    fn store_files_described(self) -> Option<String> {
        match self {
            Target::SqliteFull | Target::SqliteNormal => Some(format!(
                "{0} + {0}-wal (not -shm, the WAL's index)",
                server::SQLITE_FILE
            )),
            Target::Fjall => Some(format!("every file under {}/", server::FJALL_DIR)),
            _ => None,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Target::Redis => "redis lua script",
            Target::RedisAof => "redis lua, aof always",
            Target::Memory => "unique memory",
            Target::MemoryNoMetrics => "unique memory, no metrics",
            Target::MemoryGuarded => "unique memory, auth + signing",
            Target::SqliteFull => "unique sqlite full",
            Target::SqliteNormal => "unique sqlite normal",
            Target::Fjall => "unique fjall",
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
    let keys = KeyChoice::from_keys(args.keys)?;
    let keys = match args.dist {
        Dist::Uniform => keys,
        Dist::Hot => keys.hot(args.hot_keys, args.hot_share)?,
    };
    if !(0.0..=1.0).contains(&args.replay_share) {
        return Err("--replay-share must be between 0 and 1".into());
    }
    if args.connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    if args.resident_connections == 0 {
        return Err("--resident-connections must be at least 1".into());
    }
    if args.rounds == 0 && args.resident_sessions == 0 {
        return Err("--rounds 0 and --resident-sessions 0: nothing to measure".into());
    }
    let plan = LoadPlan {
        connections: args.connections,
        warmup: args.warmup,
        duration: args.duration,
        keys,
        replay_share: args.replay_share,
        round: 1,
    };
    let needs_server = args.resident_sessions > 0
        || (args.rounds > 0
            && args
                .targets
                .iter()
                .any(|t| !matches!(t, Target::Redis | Target::RedisAof | Target::HttpFloor)));
    // Built before anything is pinned: cargo gets every CPU.
    let server_bin = match (&args.server_bin, needs_server) {
        (Some(path), _) => Some(path.clone()),
        (None, true) => Some(server::build_release()?),
        (None, false) => None,
    };
    let allowed = pin::allowed(None);
    let placement = pin::plan(args.no_pin, allowed.as_deref());
    if let Placement::Unpinned(why @ (Unpinned::OneCpu(_) | Unpinned::Unknown)) = &placement {
        eprintln!(
            "unique-bench: running unpinned: {}",
            match why {
                Unpinned::OneCpu(_) => "pinning needs two CPUs, this process may use one",
                _ => "the CPUs this process may use could not be read",
            }
        );
    }
    let context = PassContext {
        args,
        plan: &plan,
        server_bin: server_bin.as_deref(),
        allowed: allowed.as_deref(),
    };
    let mut report = String::new();
    let mut compared = Vec::new();
    for pass in passes(args, &placement, keys)? {
        report.push('\n');
        let (table, ratios) = run_pass(&context, &pass)?;
        report.push_str(&table);
        compared.push((pass.column(), ratios));
    }
    if compared.len() > 1 {
        report.push('\n');
        let labels = COMPARED.map(|(_, _, label)| label);
        report.push_str(&report::ratios_side_by_side(&labels, &compared));
    }
    if args.resident_sessions > 0 {
        report.push('\n');
        report.push_str(&run_resident(&context, &placement)?);
    }
    print!("{report}");
    Ok(())
}

/// The throughput ratios printed side by side for every pass at the end of a run, each
/// with the bar it is held to.
const COMPARED: [(Target, Target, &str); 4] = [
    (
        Target::Memory,
        Target::Redis,
        "memory / redis script (bar 1.30x pinned)",
    ),
    (
        Target::Memory,
        Target::HttpFloor,
        "memory / http floor (bar 0.85x pinned)",
    ),
    (
        Target::Fjall,
        Target::RedisAof,
        "fjall / redis aof always (bar 1.00x)",
    ),
    (
        Target::SqliteFull,
        Target::RedisAof,
        "sqlite full / redis aof always",
    ),
];

/// One set of targets measured under one placement and key choice, on servers of its own.
#[derive(Debug, Clone, PartialEq)]
struct Pass {
    /// `pinned (the headline table)`, `unpinned`, ...: the first words of the pass's report.
    title: &'static str,
    placement: Placement,
    targets: Vec<Target>,
    keys: KeyChoice,
}

/// The passes of a run: pinned, then the `--unpinned-targets` of `--targets` unpinned
/// (unless `--pinned-only`); or one unpinned pass when the run cannot or may not pin. With
/// random users and `--fixed-keys N`, the same again for the like-for-like targets on N keys.
fn passes(args: &Args, placement: &Placement, keys: KeyChoice) -> Result<Vec<Pass>, String> {
    if args.rounds == 0 {
        return Ok(Vec::new());
    }
    let mut passes = placed_passes(args, placement, &args.targets, keys, false);
    if args.keys == Keys::Random && args.fixed_keys > 0 {
        let like_for_like: Vec<Target> = args
            .targets
            .iter()
            .copied()
            .filter(|t| Target::LIKE_FOR_LIKE.contains(t))
            .collect();
        let fixed = KeyChoice::uniform(args.fixed_keys)?;
        passes.extend(placed_passes(args, placement, &like_for_like, fixed, true));
    }
    Ok(passes)
}

impl Pass {
    /// The pass's column in the side-by-side ratios: `pinned, random users`.
    fn column(&self) -> String {
        let placement = if self.placement.is_pinned() {
            "pinned"
        } else {
            "unpinned"
        };
        format!("{placement}, {}", self.keys.short())
    }
}

/// `targets` on `keys`: pinned then unpinned, or unpinned alone. `fixed_keys` names the
/// `--fixed-keys` passes.
fn placed_passes(
    args: &Args,
    placement: &Placement,
    targets: &[Target],
    keys: KeyChoice,
    fixed_keys: bool,
) -> Vec<Pass> {
    if targets.is_empty() {
        return Vec::new();
    }
    let title = |pinned: bool| match (pinned, fixed_keys) {
        (true, false) => "pinned (the headline table)",
        (true, true) => "pinned, fixed keys",
        (false, false) if placement.is_pinned() => "unpinned (as with --no-pin)",
        (false, false) => "unpinned",
        (false, true) => "unpinned, fixed keys",
    };
    if !placement.is_pinned() {
        return vec![Pass {
            title: title(false),
            placement: placement.clone(),
            targets: targets.to_vec(),
            keys,
        }];
    }
    let mut passes = vec![Pass {
        title: title(true),
        placement: placement.clone(),
        targets: targets.to_vec(),
        keys,
    }];
    let again: Vec<Target> = targets
        .iter()
        .copied()
        .filter(|t| args.unpinned_targets.contains(t))
        .collect();
    if !args.pinned_only && !again.is_empty() {
        passes.push(Pass {
            title: title(false),
            placement: Placement::Unpinned(Unpinned::Asked),
            targets: again,
            keys,
        });
    }
    passes
}

/// What every pass shares.
struct PassContext<'a> {
    args: &'a Args,
    plan: &'a LoadPlan,
    server_bin: Option<&'a std::path::Path>,
    /// The CPUs the process started with (restored after a pinned pass).
    allowed: Option<&'a [usize]>,
}

/// Starts the pass's servers (on the server CPU when pinned), measures them in rounds
/// (from the client CPU when pinned), stops them, and returns the pass's report with its
/// [`COMPARED`] ratios.
fn run_pass(context: &PassContext<'_>, pass: &Pass) -> Result<(String, Vec<String>), String> {
    let args = context.args;
    let mut placement = pass.placement.describe(context.allowed);
    eprintln!("unique-bench: {}: {placement}", pass.title);
    if let Placement::Pinned { server, .. } = pass.placement {
        // Every server started from here on, and all it forks, inherits this CPU.
        pin::move_self(&[server])?;
    }
    // Every server runs for the whole pass; the ones not being measured sit idle.
    let running = pass
        .targets
        .iter()
        .map(|&target| Running::start(target, context.server_bin, args.server_workers))
        .collect::<Result<Vec<_>, _>>()?;
    pinned_client(&pass.placement, &running, &mut placement)?;
    let runtime = client_runtime(args.client_threads)?;
    let pass_plan = LoadPlan {
        keys: pass.keys,
        ..context.plan.clone()
    };
    let describe = format!(
        "{}: {}",
        pass.title,
        report::plan_line(
            &pass_plan,
            args.rounds,
            args.client_threads,
            args.server_workers,
            &placement
        )
    );
    eprintln!("{describe}");
    let mut rounds: Vec<Vec<Measurement>> = running.iter().map(|_| Vec::new()).collect();
    for round in 1..=args.rounds {
        let plan = LoadPlan {
            round,
            ..pass_plan.clone()
        };
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
                | Target::Fjall
                | Target::Postgres
                | Target::HttpFloor => Role::Other,
            },
            rounds,
        })
        .collect();
    drop(runtime);
    drop(running);
    if pass.placement.is_pinned() {
        let original = context.allowed.ok_or("pinned without a known CPU set")?;
        pin::move_self(original)?;
    }
    let row_of = |target: Target| {
        pass.targets
            .iter()
            .position(|&t| t == target)
            .map(|i| &rows[i])
    };
    let ratios = COMPARED
        .iter()
        .map(|&(row, base, _)| match (row_of(row), row_of(base)) {
            (Some(row), Some(base)) => report::ratio_text(row, base),
            _ => "-".to_owned(),
        })
        .collect();
    Ok((format!("{describe}\n{}", report::table(&rows)), ratios))
}

/// Loads `--resident-sessions` sessions into fresh servers of the memory measure's targets
/// (started on the server CPU when `placement` pins, as a pass's are; the load from the client
/// CPU) and returns its table.
fn run_resident(context: &PassContext<'_>, placement: &Placement) -> Result<String, String> {
    let args = context.args;
    let mut described = placement.describe(context.allowed);
    eprintln!("unique-bench: resident memory: {described}");
    if let Placement::Pinned { server, .. } = placement {
        pin::move_self(&[*server])?;
    }
    // Redis twice: as the throughput passes run it, and with hashes of values up to 128 bytes
    // kept as listpacks, which the bench's 67-byte owner otherwise is not (default 64).
    let shapes = [
        (Target::Redis, resident::Role::Baseline),
        (Target::Redis, resident::Role::Listpack),
        (Target::Memory, resident::Role::Other),
        (Target::SqliteFull, resident::Role::Other),
        (Target::Fjall, resident::Role::Other),
    ];
    let running = shapes
        .iter()
        .map(|&(target, _)| Running::start(target, context.server_bin, args.server_workers))
        .collect::<Result<Vec<_>, _>>()?;
    pinned_client(placement, &running, &mut described)?;
    let runtime = client_runtime(args.client_threads)?;
    let heading = format!(
        "resident memory and disk per session: {} sessions on fresh servers (distinct uids \
         spread over 1..=10^8, one owner endpoint, a fresh claim_id each), {} connections; \
         client {} threads, unique-server {} workers; {described}",
        args.resident_sessions,
        args.resident_connections,
        args.client_threads,
        if args.server_workers == 0 {
            "the server's default of".to_owned()
        } else {
            args.server_workers.to_string()
        },
    );
    eprintln!("{heading}");
    let mut rows = Vec::new();
    for (target, &(_, role)) in running.iter().zip(&shapes) {
        let label = match role {
            resident::Role::Listpack => {
                let addr = target
                    .redis_addr
                    .ok_or("a Redis target without an address")?;
                runtime
                    .block_on(redis_client::config_set(
                        addr,
                        "hash-max-listpack-value",
                        &resident::LISTPACK_VALUE.to_string(),
                    ))
                    .map_err(|f| f.kind)?;
                "redis, listpack values to 128 B"
            }
            _ => target.target.label(),
        };
        let loaded = resident::measure(
            &runtime,
            target,
            args.resident_sessions,
            args.resident_connections,
        )?;
        rows.push(resident::Row {
            label,
            files: target.target.store_files_described(),
            loaded,
            role,
        });
    }
    drop(runtime);
    drop(running);
    if placement.is_pinned() {
        let original = context.allowed.ok_or("pinned without a known CPU set")?;
        pin::move_self(original)?;
    }
    Ok(resident::table(&rows, &heading))
}

/// When `placement` pins: reads every server's CPUs back (a warning in `described` names any
/// not on the server CPU), then moves the bench to the client CPU, so the client runtime built
/// next inherits it.
fn pinned_client(
    placement: &Placement,
    running: &[Running],
    described: &mut String,
) -> Result<(), String> {
    let Placement::Pinned { server, client } = *placement else {
        return Ok(());
    };
    let stray: Vec<String> = running
        .iter()
        .filter_map(|r| {
            let cpus = pin::allowed(Some(r.pid));
            (cpus.as_deref() != Some(&[server][..])).then(|| {
                format!(
                    "{} (pid {}) on CPUs {}",
                    r.target.label(),
                    r.pid,
                    cpus.as_deref()
                        .map_or_else(|| "?".to_owned(), pin::format_list)
                )
            })
        })
        .collect();
    if stray.is_empty() {
        described.push_str(" (read back from every server process)");
    } else {
        let warning = format!("NOT PINNED: {}", stray.join(", "));
        eprintln!("unique-bench: warning: {warning}");
        *described = format!("{described}; {warning}");
    }
    pin::move_self(&[client])
}

/// The load generator's runtime, on the CPUs the bench runs on when it is built.
fn client_runtime(threads: usize) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the client runtime: {e}"))
}

/// A target whose server runs until this is dropped.
struct Running {
    target: Target,
    connector: Connector,
    pid: u32,
    /// The redis-server's address (for `INFO`), on a Redis target.
    redis_addr: Option<std::net::SocketAddr>,
    /// The files the store keeps its records in (the SQLite file and its WAL, the fjall
    /// directory); empty for a store without files.
    store_files: Vec<std::path::PathBuf>,
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
                    redis_addr: Some(server.addr()),
                    store_files: Vec::new(),
                    _server: Box::new(server),
                });
            }
            Target::HttpFloor => {
                let server = UniqueServer::start_floor()?;
                return Ok(Self {
                    target,
                    connector: Connector::Http(HttpConnector::new(server.addr(), None)),
                    pid: server.pid(),
                    redis_addr: None,
                    store_files: Vec::new(),
                    _server: Box::new(server),
                });
            }
            Target::Memory | Target::MemoryNoMetrics | Target::MemoryGuarded => ServerStore::Memory,
            Target::SqliteFull => ServerStore::Sqlite(DbSync::Full),
            Target::SqliteNormal => ServerStore::Sqlite(DbSync::Normal),
            Target::Fjall => ServerStore::Fjall,
            Target::Postgres => {
                let started = PostgresServer::start();
                let url = started.url().to_owned();
                database = Some(started);
                ServerStore::Postgres(url)
            }
        };
        let bin = server_bin.ok_or("no unique-server binary")?;
        let workers = (server_workers > 0).then_some(server_workers);
        let server = UniqueServer::start(bin, store.clone(), workers, variant)?;
        let connector = HttpConnector::new(server.addr(), server.bearer_token());
        let store_files = match (&store, server.dir()) {
            (ServerStore::Sqlite(_), Some(dir)) => vec![
                dir.join(server::SQLITE_FILE),
                dir.join(format!("{}-wal", server::SQLITE_FILE)),
            ],
            (ServerStore::Fjall, Some(dir)) => vec![dir.join(server::FJALL_DIR)],
            _ => Vec::new(),
        };
        Ok(Self {
            target,
            connector: Connector::Http(connector),
            pid: server.pid(),
            redis_addr: None,
            store_files,
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
        let written_before = io::written(self.pid);
        let mut measurement = match &self.connector {
            Connector::Redis(connector) => runtime.block_on(load::run(label, connector, plan)),
            Connector::Http(connector) => runtime.block_on(load::run(label, connector, plan)),
        };
        let after = cpu::used(Process::This).zip(cpu::used(server));
        measurement.written = written_before
            .zip(io::written(self.pid))
            .map(|(before, after)| after.saturating_sub(before));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("unique-bench").chain(args.iter().copied())).unwrap()
    }

    const PINNED: Placement = Placement::Pinned {
        server: 0,
        client: 1,
    };

    fn passes_of(args: &Args, placement: &Placement) -> Vec<Pass> {
        let keys = KeyChoice::from_keys(args.keys).unwrap();
        passes(args, placement, keys).unwrap()
    }

    #[test]
    fn the_defaults_are_random_users_then_fixed_keys_each_pinned_then_unpinned() {
        let args = parse(&[]);
        assert_eq!(args.keys, Keys::Random);
        assert_eq!(args.dist, Dist::Uniform);
        assert!(!args.no_pin && !args.pinned_only);
        let passes = passes_of(&args, &pin::plan(args.no_pin, Some(&[0, 1])));
        let random = KeyChoice::random();
        let fixed = KeyChoice::uniform(10_000).unwrap();
        let unpinned = Placement::Unpinned(Unpinned::Asked);
        let shape: Vec<_> = passes
            .iter()
            .map(|p| (p.placement.clone(), p.targets.clone(), p.keys, p.column()))
            .collect();
        assert_eq!(
            shape,
            [
                (
                    PINNED,
                    Target::ALL.to_vec(),
                    random,
                    "pinned, random users".to_owned()
                ),
                (
                    unpinned.clone(),
                    Target::UNPINNED.to_vec(),
                    random,
                    "unpinned, random users".to_owned()
                ),
                (
                    PINNED,
                    Target::LIKE_FOR_LIKE.to_vec(),
                    fixed,
                    "pinned, 10000 keys".to_owned()
                ),
                (
                    unpinned,
                    Target::LIKE_FOR_LIKE.to_vec(),
                    fixed,
                    "unpinned, 10000 keys".to_owned()
                ),
            ]
        );
        assert_eq!(
            passes.iter().map(|p| p.title).collect::<Vec<_>>(),
            [
                "pinned (the headline table)",
                "unpinned (as with --no-pin)",
                "pinned, fixed keys",
                "unpinned, fixed keys"
            ]
        );
        // Every compared ratio's two targets are in each pass.
        for pass in &passes {
            for (row, base, _) in COMPARED {
                assert!(pass.targets.contains(&row) && pass.targets.contains(&base));
            }
        }
    }

    #[test]
    fn fixed_keys_0_or_a_key_count_run_no_fixed_key_passes() {
        let skipped = parse(&["--fixed-keys", "0"]);
        assert_eq!(passes_len(&skipped, &PINNED), 2);
        let count = parse(&["--keys", "500"]);
        assert_eq!(passes_len(&count, &PINNED), 2);
        let pinned_only = parse(&["--pinned-only", "--fixed-keys", "20"]);
        let passes = passes_of(&pinned_only, &PINNED);
        assert_eq!(passes.len(), 2);
        assert_eq!(passes[1].keys, KeyChoice::uniform(20).unwrap());
        assert_eq!(passes[1].column(), "pinned, 20 keys");
        // Only like-for-like targets of --targets go to the fixed-key passes.
        let few = parse(&["--targets", "postgres,memory"]);
        let passes = passes_of(&few, &PINNED);
        assert_eq!(passes.len(), 4);
        assert_eq!(passes[2].targets, [Target::Memory]);
        let none = parse(&["--targets", "postgres"]);
        assert_eq!(passes_len(&none, &PINNED), 1);
    }

    #[test]
    fn no_pin_and_a_key_count_are_the_unpinned_hot_key_bench() {
        let args = parse(&["--no-pin", "--keys", "10000"]);
        assert_eq!(args.keys, Keys::Count(10_000));
        let passes = passes_of(&args, &pin::plan(args.no_pin, Some(&[0, 1])));
        assert_eq!(
            passes,
            [Pass {
                title: "unpinned",
                placement: Placement::Unpinned(Unpinned::Asked),
                targets: Target::ALL.to_vec(),
                keys: KeyChoice::uniform(10_000).unwrap(),
            }]
        );
        // Connection i seeded i + 1 in every round, as before.
        let keys = KeyChoice::from_keys(args.keys).unwrap();
        assert_eq!((keys.seed(0, 1), keys.seed(0, 2)), (1, 1));
    }

    #[test]
    fn the_unpinned_pass_measures_the_chosen_targets_in_the_run_order() {
        let args = parse(&[
            "--targets",
            "sqlite-full,memory,postgres",
            "--unpinned-targets",
            "memory,sqlite-full,redis",
        ]);
        let passes = passes_of(&args, &PINNED);
        assert_eq!(
            passes[1].targets,
            [Target::SqliteFull, Target::Memory],
            "only targets of --targets, in their order"
        );
        let none = parse(&["--targets", "postgres"]);
        assert_eq!(passes_len(&none, &PINNED), 1, "nothing to measure again");
        let only = parse(&["--pinned-only", "--fixed-keys", "0"]);
        assert_eq!(passes_len(&only, &PINNED), 1);
    }

    fn passes_len(args: &Args, placement: &Placement) -> usize {
        passes_of(args, placement).len()
    }

    #[test]
    fn a_machine_that_cannot_pin_runs_one_unpinned_pass() {
        let args = parse(&[]);
        let one_cpu = pin::plan(false, Some(&[0]));
        let passes = passes_of(&args, &one_cpu);
        assert_eq!(passes.len(), 2, "random users, then the fixed keys");
        assert_eq!(passes[0].placement, one_cpu);
        assert_eq!(passes[0].targets, Target::ALL);
        assert_eq!(passes[0].title, "unpinned");
        assert_eq!(passes[1].targets, Target::LIKE_FOR_LIKE);
        assert_eq!(passes[1].title, "unpinned, fixed keys");
    }

    #[test]
    fn rounds_0_runs_no_pass_and_the_memory_measure_is_on_by_default() {
        let args = parse(&[]);
        assert_eq!(args.resident_sessions, 1_000_000);
        let only = parse(&["--rounds", "0"]);
        assert_eq!(passes_len(&only, &PINNED), 0);
        assert_eq!(passes_len(&only, &Placement::Unpinned(Unpinned::Asked)), 0);
        assert_eq!(parse(&["--resident-sessions", "0"]).resident_sessions, 0);
    }

    #[test]
    fn bad_flags_are_refused() {
        let parse_err = |args: &[&str]| {
            Args::try_parse_from(std::iter::once("unique-bench").chain(args.iter().copied()))
                .is_err()
        };
        assert!(parse_err(&["--no-pin", "--pinned-only"]));
        assert!(parse_err(&["--keys", "0"]));
        assert!(parse_err(&["--keys", "everyone"]));
        assert!(parse_err(&["--unpinned-targets", "nothing"]));
        assert!(parse_err(&["--resident-sessions", "100000001"]));
    }
}
