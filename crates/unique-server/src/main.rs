//! The `unique-server` binary: the Arbiter over HTTP on a configurable store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use tokio::net::TcpListener;
use unique_arbiter_http::{ArbiterService, serve};
use unique_core::{Arbiter, Store, TracingObserver};
use unique_kick_http::{HttpKicker, SigningKeys};

// mimalloc: about 40 % of the instructions of glibc's malloc and free on the claim
// path, which allocates a few times per request (see BENCHMARKS.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Single-session arbitration over HTTP: one online session per (project, env, uid).
///
/// Every flag can also be set with the UNIQUE_* environment variable named in its help.
#[derive(Debug, Parser)]
#[command(name = "unique-server", version, about, long_about = None)]
struct Args {
    /// Address to listen on (use port 0 for any free port; the bound address is printed).
    #[arg(long, env = "UNIQUE_LISTEN", default_value = "127.0.0.1:7420")]
    listen: SocketAddr,

    /// Which store holds the session records.
    #[arg(long, env = "UNIQUE_STORE", value_enum, default_value_t = StoreKind::Sqlite)]
    store: StoreKind,

    /// SQLite database file of the embedded store (created when missing).
    #[arg(long, env = "UNIQUE_DB", default_value = "./unique.db")]
    db: PathBuf,

    /// Commit durability of the embedded store: `full` fsyncs every commit before
    /// answering; `normal` survives a process crash but an OS crash or power loss
    /// can lose the last acknowledged claims (see unique-store-sqlite).
    #[arg(long, env = "UNIQUE_DB_SYNC", value_enum, default_value_t = DbSync::Full)]
    db_sync: DbSync,

    /// DynamoDB table name (with --store dynamodb).
    #[arg(long, env = "UNIQUE_TABLE", default_value = "unique-sessions")]
    table: String,

    /// DynamoDB endpoint URL, for a local DynamoDB-compatible server (omit for AWS itself).
    #[arg(long, env = "UNIQUE_ENDPOINT_URL")]
    endpoint_url: Option<String>,

    /// DynamoDB region (default: the standard AWS region chain, e.g. AWS_REGION).
    #[arg(long, env = "UNIQUE_REGION")]
    region: Option<String>,

    /// Create the DynamoDB table (partition key `pk`, on-demand billing) when it is missing.
    #[arg(long, env = "UNIQUE_CREATE_TABLE")]
    create_table: bool,

    /// How long an old session's kick receiver gets to confirm (e.g. 500ms, 3s).
    #[arg(long, env = "UNIQUE_KICK_TIMEOUT", default_value = "3s", value_parser = humantime::parse_duration)]
    kick_timeout: Duration,

    /// Signs every kick with the first key of this file (HMAC-SHA256, `Unique-Signature`
    /// header), for kick receivers that verify: one key per line, at least 32 bytes each
    /// (`openssl rand -hex 32`), blank lines and `#` comments skipped. Unsigned without it.
    #[arg(long, env = "UNIQUE_KICK_SIGNING_KEYS", value_name = "PATH")]
    kick_signing_keys: Option<PathBuf>,

    /// Compare-and-set attempts per claim before failing closed (values below 1 mean 1).
    #[arg(long, env = "UNIQUE_MAX_CLAIM_ATTEMPTS", default_value_t = 3)]
    max_claim_attempts: u32,

    /// Log format on stderr.
    #[arg(long, env = "UNIQUE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// Worker threads of the async runtime (default: one per core).
    #[arg(long, env = "UNIQUE_WORKERS")]
    workers: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StoreKind {
    /// Durable embedded SQLite file at --db (one machine).
    Sqlite,
    /// In process memory: fast, forgets every gen on restart (tests and demos only).
    Memory,
    /// DynamoDB table --table (many server processes share it); see --endpoint-url, --region.
    Dynamodb,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DbSync {
    /// fsync every commit before answering (durable against power loss).
    Full,
    /// fsync at checkpoints only (durable against process crashes).
    Normal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.log_format);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(workers) = args.workers {
        runtime.worker_threads(workers.max(1));
    }
    let runtime = match runtime.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("unique-server: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("unique-server: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    // Each store gets its own monomorphised server: the Arbiter calls the store
    // directly instead of through a `dyn Store` (one boxed future fewer per call).
    match open_store(&args).await? {
        OpenedStore::Memory(store) => run_on(store, &args).await,
        OpenedStore::Sqlite(store) => run_on(store, &args).await,
        OpenedStore::Dynamodb(store) => run_on(store, &args).await,
    }
}

async fn run_on<S: Store>(store: S, args: &Args) -> Result<(), String> {
    let arbiter = Arbiter::builder(store)
        .kicker(kicker(args)?)
        .observer(TracingObserver)
        .kick_timeout(args.kick_timeout)
        .max_claim_attempts(args.max_claim_attempts)
        .build();
    let shutdown = shutdown_signal()?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    // The smoke runner and scripts read this line to find the port.
    println!("unique-server listening on http://{bound}");
    tracing::info!(%bound, store = ?args.store, "listening");
    serve(listener, ArbiterService::new(arbiter), shutdown).await;
    tracing::info!("stopped");
    Ok(())
}

/// The HTTP kicker, signing with `--kick-signing-keys` when given.
fn kicker(args: &Args) -> Result<HttpKicker, String> {
    let mut builder = HttpKicker::builder();
    if let Some(path) = &args.kick_signing_keys {
        let keys = SigningKeys::from_file(path).map_err(|e| format!("--kick-signing-keys: {e}"))?;
        tracing::info!(path = %path.display(), ?keys, "kicks are signed");
        builder = builder.signing_keys(keys);
    }
    builder
        .build()
        .map_err(|e| format!("cannot build the kicker: {e}"))
}

/// The store chosen by `--store`, opened and checked.
enum OpenedStore {
    Memory(unique_store_memory::MemoryStore),
    Sqlite(unique_store_sqlite::SqliteStore),
    Dynamodb(unique_store_dynamodb::DynamoStore),
}

/// How long startup waits for the store to answer before giving up.
const STARTUP_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

async fn open_store(args: &Args) -> Result<OpenedStore, String> {
    match args.store {
        StoreKind::Memory => Ok(OpenedStore::Memory(unique_store_memory::MemoryStore::new())),
        StoreKind::Sqlite => {
            let sync = match args.db_sync {
                DbSync::Full => unique_store_sqlite::Synchronous::Full,
                DbSync::Normal => unique_store_sqlite::Synchronous::Normal,
            };
            let store = unique_store_sqlite::SqliteStore::builder(&args.db)
                .synchronous(sync)
                .open()
                .map_err(|e| {
                    format!("cannot open the sqlite store at {}: {e}", args.db.display())
                })?;
            bounded_check("sqlite store", store.check()).await?;
            tracing::info!(db = %args.db.display(), sync = ?args.db_sync, "sqlite store open");
            Ok(OpenedStore::Sqlite(store))
        }
        StoreKind::Dynamodb => open_dynamodb(args).await.map(OpenedStore::Dynamodb),
    }
}

async fn open_dynamodb(args: &Args) -> Result<unique_store_dynamodb::DynamoStore, String> {
    let mut builder = unique_store_dynamodb::DynamoStore::builder().table(&args.table);
    if let Some(url) = &args.endpoint_url {
        builder = builder.endpoint_url(url);
    }
    if let Some(region) = &args.region {
        builder = builder.region(region);
    }
    let store = builder
        .build()
        .await
        .map_err(|e| format!("cannot configure the dynamodb store: {e}"))?;
    if args.create_table {
        let created = store
            .create_table_if_missing(STARTUP_CHECK_TIMEOUT)
            .await
            .map_err(|e| format!("cannot create dynamodb table {}: {e}", args.table))?;
        if created {
            tracing::info!(table = %args.table, "created dynamodb table");
        }
    }
    store
        .check_reachable(STARTUP_CHECK_TIMEOUT)
        .await
        .map_err(|e| format!("dynamodb table {} is not usable: {e}", args.table))?;
    tracing::info!(table = %args.table, "dynamodb store ready");
    Ok(store)
}

/// Runs a store's startup check with a deadline, so a dead store is a clear error, not a hang.
async fn bounded_check(
    what: &str,
    check: impl std::future::Future<Output = Result<(), unique_core::Error>>,
) -> Result<(), String> {
    match tokio::time::timeout(STARTUP_CHECK_TIMEOUT, check).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{what} is not usable: {e}")),
        Err(_) => Err(format!(
            "{what} did not answer within {STARTUP_CHECK_TIMEOUT:?}"
        )),
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Registers SIGINT and SIGTERM handlers now (before the address is announced, so
/// an early signal is never missed) and returns a future that resolves on either.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let register =
            |kind| signal(kind).map_err(|e| format!("cannot install a signal handler: {e}"));
        let mut interrupt = register(SignalKind::interrupt())?;
        let mut terminate = register(SignalKind::terminate())?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => {},
                _ = terminate.recv() => {},
            }
            tracing::info!("shutdown requested");
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutdown requested");
        })
    }
}
