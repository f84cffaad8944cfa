//! The `unique-server` binary: the Arbiter over HTTP on a configurable store.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use metrics_exporter_prometheus::PrometheusHandle;
use unique_arbiter_http::{ArbiterService, LeaseService, ServeOptions, SharedTokens};
use unique_core::{Arbiter, Observer, Store, TracingObserver};
use unique_kick_http::{EndpointRule, SigningKeys};
use unique_metrics::{MeteredStore, MetricsObserver};

use crate::audit::AuditFile;
use crate::exposure::{Auth, Kicks};
use crate::kicker::{KickerConfig, SigningKicker};
use crate::reload::Reloader;

mod audit;
mod exposition;
mod exposure;
mod kicker;
mod reload;
mod secrets;

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
#[allow(clippy::struct_excessive_bools)] // one bool per on/off flag, as clap parses them
struct Args {
    /// Address to listen on (use port 0 for any free port; the bound address is printed).
    #[arg(long, env = "UNIQUE_LISTEN", default_value = "127.0.0.1:7420")]
    listen: SocketAddr,

    /// Which store holds the session records.
    #[arg(long, env = "UNIQUE_STORE", value_enum, default_value_t = StoreKind::Sqlite)]
    store: StoreKind,

    /// SQLite database file of the embedded store (created when missing). The server
    /// holds it for itself, whatever its other flags: a second server on the same file
    /// refuses to start, naming the first one's pid.
    #[arg(long, env = "UNIQUE_DB", default_value = "./unique.db")]
    db: PathBuf,

    /// Commit durability of the embedded store: `full` fsyncs every commit before
    /// answering; `normal` survives a process crash but an OS crash or power loss
    /// can lose the last acknowledged claims (see unique-store-sqlite).
    #[arg(long, env = "UNIQUE_DB_SYNC", value_enum, default_value_t = DbSync::Full)]
    db_sync: DbSync,

    /// Records of the embedded store kept in memory, so reads of recently written keys
    /// skip SQLite (0 = off). With it on, edits of --db by other tools (the sqlite3 CLI)
    /// while the server runs are not seen: stop the server first.
    #[arg(long, env = "UNIQUE_DB_CACHE_RECORDS", default_value_t = 100_000)]
    db_cache_records: usize,

    /// DynamoDB table name (with --store dynamodb).
    #[arg(long, env = "UNIQUE_TABLE", default_value = "unique-sessions")]
    table: String,

    /// Serve no lease routes (/v1/lease/*, /v1/nodes/*: they answer 501), and open no lease
    /// directory on the store.
    #[arg(long, env = "UNIQUE_NO_LEASES")]
    no_leases: bool,

    /// SQLite file of the lease directory (with --store sqlite; created when missing): a file
    /// of its own, by default beside --db (unique.db → unique-leases.db).
    #[arg(long, env = "UNIQUE_LEASE_DB", value_name = "PATH")]
    lease_db: Option<PathBuf>,

    /// DynamoDB table of the lease directory (with --store dynamodb): a table of its own,
    /// partition key `pk` alone (--create-table creates it).
    #[arg(long, env = "UNIQUE_LEASE_TABLE", default_value = "unique-leases")]
    lease_table: String,

    /// PostgreSQL: prefix of the lease directory's tables (PREFIX_leases, PREFIX_nodes and
    /// the sequence PREFIX_epoch; NAME or SCHEMA.NAME; --create-table creates them).
    #[arg(long, env = "UNIQUE_DATABASE_LEASE_PREFIX", default_value = unique_store_postgres::DEFAULT_LEASE_PREFIX)]
    database_lease_prefix: String,

    /// DynamoDB endpoint URL, for a local DynamoDB-compatible server (omit for AWS itself).
    #[arg(long, env = "UNIQUE_ENDPOINT_URL")]
    endpoint_url: Option<String>,

    /// DynamoDB region (default: the standard AWS region chain, e.g. AWS_REGION).
    #[arg(long, env = "UNIQUE_REGION")]
    region: Option<String>,

    /// Create the table when it is missing: DynamoDB (partition key `pk`, sort key `sk`,
    /// on-demand billing; a table from before device slots is refused at startup with the
    /// steps to move it) or PostgreSQL (--database-table; needs the CREATE privilege), where
    /// it also migrates a table of an older schema and adds the session-listing index to a
    /// table that lacks it (both need the table's owner).
    #[arg(long, env = "UNIQUE_CREATE_TABLE")]
    create_table: bool,

    /// PostgreSQL connection URL (with --store postgres), e.g.
    /// postgres://unique:PASSWORD@db.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/unique/db-ca.pem
    /// (libpq's sslmode and sslrootcert; without sslmode a host off loopback is verified
    /// against the system roots). Prefer the environment variable: a command line is
    /// visible to other users of the machine. Never logged.
    #[arg(long, env = "UNIQUE_DATABASE_URL", hide_env_values = true, value_parser = DatabaseUrl::parse)]
    database_url: Option<DatabaseUrl>,

    /// PostgreSQL table (NAME or SCHEMA.NAME) holding the records.
    #[arg(long, env = "UNIQUE_DATABASE_TABLE", default_value = unique_store_postgres::DEFAULT_TABLE)]
    database_table: String,

    /// PostgreSQL: connections this server process keeps open at most.
    #[arg(long, env = "UNIQUE_DATABASE_MAX_CONNECTIONS", default_value_t = unique_store_postgres::DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u16).range(1..))]
    database_max_connections: u16,

    // DynamoDB client timeouts: together they bound every store call, so every claim.
    /// DynamoDB and PostgreSQL: time allowed to open a connection.
    #[arg(long, env = "UNIQUE_STORE_CONNECT_TIMEOUT", default_value_t = unique_store_dynamodb::DEFAULT_CONNECT_TIMEOUT.into(), value_parser = positive_duration)]
    store_connect_timeout: humantime::Duration,

    /// DynamoDB: time allowed for one HTTP attempt of a store call, connect included; a
    /// connection that stopped answering is dropped and the call retried on a new one.
    #[arg(long, env = "UNIQUE_STORE_ATTEMPT_TIMEOUT", default_value_t = unique_store_dynamodb::DEFAULT_ATTEMPT_TIMEOUT.into(), value_parser = positive_duration)]
    store_attempt_timeout: humantime::Duration,

    /// DynamoDB and PostgreSQL: time allowed for one store call, every attempt and backoff
    /// included (the most a claim waits on each of its reads and writes).
    #[arg(long, env = "UNIQUE_STORE_OPERATION_TIMEOUT", default_value_t = unique_store_dynamodb::DEFAULT_OPERATION_TIMEOUT.into(), value_parser = positive_duration)]
    store_operation_timeout: humantime::Duration,

    /// DynamoDB: HTTP attempts per store call (1: no retry).
    #[arg(long, env = "UNIQUE_STORE_MAX_ATTEMPTS", default_value_t = unique_store_dynamodb::DEFAULT_MAX_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..))]
    store_max_attempts: u32,

    /// How long /readyz waits for the store to answer before it answers 503.
    #[arg(long, env = "UNIQUE_READY_TIMEOUT", default_value_t = unique_arbiter_http::DEFAULT_READY_TIMEOUT.into(), value_parser = positive_duration)]
    ready_timeout: humantime::Duration,

    /// How long an old session's kick receiver gets to confirm (e.g. 500ms, 3s).
    #[arg(long, env = "UNIQUE_KICK_TIMEOUT", default_value = "3s", value_parser = humantime::parse_duration)]
    kick_timeout: Duration,

    /// Most idle kick connections kept across all nodes (the least recently used closes
    /// first; 0: no reuse). Each node keeps at most 32 of them.
    #[arg(long, env = "UNIQUE_KICK_POOL_MAX_IDLE", default_value_t = unique_kick_http::DEFAULT_MAX_IDLE)]
    kick_pool_max_idle: usize,

    /// Most kicks in flight at once; a kick over it is not attempted and the claim sees
    /// connect-error (counted by unique_kicks_shed_total).
    #[arg(long, env = "UNIQUE_MAX_KICKS_IN_FLIGHT", default_value_t = unique_kick_http::DEFAULT_MAX_KICKS_IN_FLIGHT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_kicks_in_flight: usize,

    /// Kick-endpoint allow list: comma-separated CIDR blocks (10.0.0.0/8, fd00::/8,
    /// 127.0.0.2) and host names (node.internal, or *.nodes.internal for the names below
    /// it); repeatable. When given, kicks reach only what it matches. An allow CIDR inside
    /// a range refused by default (link-local, unspecified, multicast, broadcast) opens
    /// that block; nothing else does.
    #[arg(
        long,
        env = "UNIQUE_KICK_ALLOW",
        value_delimiter = ',',
        value_name = "RULES"
    )]
    kick_allow: Vec<EndpointRule>,

    /// Kick-endpoint deny list, in the same form as --kick-allow; repeatable. It wins over
    /// the allow list. A claim whose endpoint is refused gets 400 invalid_params.
    #[arg(
        long,
        env = "UNIQUE_KICK_DENY",
        value_delimiter = ',',
        value_name = "RULES"
    )]
    kick_deny: Vec<EndpointRule>,

    /// Signs every kick with the first key of this file (HMAC-SHA256, `Unique-Signature`
    /// header), for kick receivers that verify: one key per line, at least 32 bytes each
    /// (`openssl rand -hex 32`), blank lines and `#` comments skipped. Unsigned without it.
    /// Owner-only (chmod 600) or refused; reread on SIGHUP.
    #[arg(long, env = "UNIQUE_KICK_SIGNING_KEYS", value_name = "PATH")]
    kick_signing_keys: Option<PathBuf>,

    /// Send unsigned kicks from a non-loopback address with --auth-tokens (refused
    /// otherwise). Only where no untrusted host can reach the nodes' kick receivers.
    #[arg(
        long,
        env = "UNIQUE_INSECURE_UNSIGNED_KICKS",
        conflicts_with = "kick_signing_keys"
    )]
    insecure_unsigned_kicks: bool,

    /// Compare-and-set attempts per claim before failing closed (values below 1 mean 1).
    #[arg(long, env = "UNIQUE_MAX_CLAIM_ATTEMPTS", default_value_t = 3)]
    max_claim_attempts: u32,

    /// Most claims that may wait on one key behind the one in progress; one more is
    /// answered 429 throttled at once (one user's devices never queue that many).
    #[arg(long, env = "UNIQUE_MAX_QUEUED_CLAIMS", default_value_t = unique_core::DEFAULT_MAX_QUEUED_CLAIMS)]
    max_queued_claims: usize,

    /// Deadline of one claim from its arrival, its wait in line included (e.g. 5s): past
    /// it a claim stops before its next kick or write and answers 503 unavailable. A write
    /// already sent is waited for, so a claim never writes after it answered.
    #[arg(long, env = "UNIQUE_CLAIM_TIMEOUT", default_value_t = unique_core::DEFAULT_CLAIM_TIMEOUT.into(), value_parser = positive_duration)]
    claim_timeout: humantime::Duration,

    /// Record no metrics and serve no /metrics (which is otherwise open like /healthz: counts
    /// only, no keys or tokens; see SECURITY.md).
    #[arg(long, env = "UNIQUE_NO_METRICS")]
    no_metrics: bool,

    /// Log format on stderr.
    #[arg(long, env = "UNIQUE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// Worker threads of the async runtime (default: one per core).
    #[arg(long, env = "UNIQUE_WORKERS")]
    workers: Option<usize>,

    // Caller authentication.
    /// Bearer tokens callers must present on /v1/*, each scoped to projects (and
    /// optionally envs): a JSON file `{"tokens": [{"name", "token", "projects", "envs"}]}`.
    /// Owner-only (chmod 600) or refused; reread on SIGHUP.
    #[arg(long, env = "UNIQUE_AUTH_TOKENS")]
    auth_tokens: Option<PathBuf>,

    /// Append one JSON line per session event (first login, takeover, replay, superseded,
    /// release, admin logout, refused caller) to this file, created owner-only when missing,
    /// before the answer is sent; reopened on SIGHUP (for logrotate). When a line cannot be
    /// written, claims, releases and logouts are answered 503. Not fsynced.
    #[arg(long, env = "UNIQUE_AUDIT_LOG", value_name = "PATH")]
    audit_log: Option<PathBuf>,

    /// Serve /v1/* without authentication on a non-loopback address. Only for networks
    /// where every host that can reach the server is trusted (see SECURITY.md).
    #[arg(long, env = "UNIQUE_INSECURE_NO_AUTH", conflicts_with = "auth_tokens")]
    insecure_no_auth: bool,

    // Connection guards and TLS (unique-listener describes each guard).
    /// Serve HTTPS with this PEM certificate chain (leaf first); needs --tls-key.
    #[arg(long, env = "UNIQUE_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "UNIQUE_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// Mutual TLS: PEM CA certificate(s); clients without a certificate signed by one are
    /// refused during the handshake. Needs --tls-cert and --tls-key.
    #[arg(long, env = "UNIQUE_TLS_CLIENT_CA", requires_all = ["tls_cert", "tls_key"])]
    tls_client_ca: Option<PathBuf>,

    /// Most open connections; more are closed as soon as they are accepted (keep below `ulimit -n`).
    #[arg(long, env = "UNIQUE_MAX_CONNECTIONS", default_value_t = unique_listener::DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections: usize,

    /// Most open connections from one client IP address (raise it behind a proxy).
    #[arg(long, env = "UNIQUE_MAX_CONNECTIONS_PER_IP", default_value_t = unique_listener::DEFAULT_MAX_CONNECTIONS_PER_IP, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections_per_ip: usize,

    /// How long a request head may take (a connection's first: from the accept, TLS included).
    #[arg(long, env = "UNIQUE_HEADER_TIMEOUT", default_value_t = unique_listener::DEFAULT_HEADER_TIMEOUT.into(), value_parser = positive_duration)]
    header_timeout: humantime::Duration,

    /// How long a keep-alive connection may wait between requests before it is closed.
    #[arg(long, env = "UNIQUE_IDLE_TIMEOUT", default_value_t = unique_listener::DEFAULT_IDLE_TIMEOUT.into(), value_parser = positive_duration)]
    idle_timeout: humantime::Duration,

    /// How long a request body may take after its head; a slower one is answered 408.
    #[arg(long, env = "UNIQUE_BODY_TIMEOUT", default_value_t = unique_listener::DEFAULT_BODY_TIMEOUT.into(), value_parser = positive_duration)]
    body_timeout: humantime::Duration,

    /// Listen backlog: connections waiting to be accepted (Linux caps it at net.core.somaxconn).
    #[arg(long, env = "UNIQUE_BACKLOG", default_value_t = unique_listener::DEFAULT_BACKLOG, value_parser = clap::value_parser!(u32).range(1..))]
    backlog: u32,
}

/// A humantime duration above zero (a zero timeout would close every connection).
fn positive_duration(text: &str) -> Result<humantime::Duration, String> {
    let duration: humantime::Duration = text.parse().map_err(|e| format!("{e}"))?;
    if duration.is_zero() {
        return Err("must be above zero".to_owned());
    }
    Ok(duration)
}

impl Args {
    /// The connection guards and TLS of the flags; a TLS file that cannot be used is an error
    /// naming it.
    fn serve_options(&self) -> Result<ServeOptions, String> {
        let mut options = ServeOptions::default()
            .max_connections(self.max_connections)
            .max_connections_per_ip(self.max_connections_per_ip)
            .header_timeout(self.header_timeout.into())
            .idle_timeout(self.idle_timeout.into())
            .body_timeout(self.body_timeout.into());
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            let config =
                unique_tls::server_config_from_files(cert, key, self.tls_client_ca.as_deref())
                    .map_err(|e| format!("cannot set up TLS: {e}"))?;
            options = options.tls(Arc::new(config));
        }
        Ok(options)
    }
}

/// A database URL, which may hold a password: its `Debug` never shows it.
#[derive(Clone)]
struct DatabaseUrl(String);

impl DatabaseUrl {
    #[allow(clippy::unnecessary_wraps)] // the signature clap's value parsers have
    fn parse(text: &str) -> Result<Self, String> {
        Ok(Self(text.to_owned()))
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseUrl(_)")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StoreKind {
    /// Durable embedded SQLite file at --db (one machine).
    Sqlite,
    /// In process memory: fast, forgets every gen on restart (tests and demos only).
    Memory,
    /// DynamoDB table --table (many server processes share it); see --endpoint-url, --region.
    Dynamodb,
    /// PostgreSQL table --database-table at --database-url (many server processes share it).
    Postgres,
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
    // Before anything registers a metric: handles bind to the recorder in force when made.
    let metrics = if args.no_metrics {
        None
    } else {
        match exposition::install() {
            Ok(handle) => Some(handle),
            Err(message) => {
                eprintln!("unique-server: {message}");
                return ExitCode::FAILURE;
            }
        }
    };
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
    match runtime.block_on(run(args, metrics)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("unique-server: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args, metrics: Option<PrometheusHandle>) -> Result<(), String> {
    // Configuration mistakes stop startup before the store is opened.
    let warnings = exposure::check(
        args.listen,
        Auth::of(args.auth_tokens.is_some(), args.insecure_no_auth),
        Kicks::of(
            args.kick_signing_keys.is_some(),
            args.insecure_unsigned_kicks,
        ),
    )?;
    let tokens = args
        .auth_tokens
        .as_deref()
        .map(secrets::load_tokens)
        .transpose()?;
    if let Some(tokens) = &tokens {
        tracing::info!(tokens = tokens.len(), "caller authentication on");
    }
    let keys = args
        .kick_signing_keys
        .as_deref()
        .map(secrets::load_signing_keys)
        .transpose()?;
    let audit = args
        .audit_log
        .as_deref()
        .map(AuditFile::open)
        .transpose()?
        .map(Arc::new);
    if let Some(audit) = &audit {
        tracing::info!(path = %audit.path().display(), "audit log open");
    }
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    let options = args.serve_options()?;
    let opened = open_store(&args).await?;
    let leases = if args.no_leases {
        tracing::info!("lease routes off (--no-leases)");
        None
    } else {
        Some(open_leases(&args, &opened).await?)
    };
    let served = Served {
        tokens: tokens.map(SharedTokens::new),
        keys,
        audit,
        leases,
        options,
        metrics,
    };
    // Each store gets its own monomorphised server: the Arbiter calls the store
    // directly instead of through a `dyn Store` (one boxed future fewer per call).
    match opened {
        OpenedStore::Memory(store) => served.run(store, &args).await,
        OpenedStore::Sqlite(store) => served.run(store, &args).await,
        OpenedStore::Dynamodb(store) => served.run(store, &args).await,
        OpenedStore::Postgres(store) => served.run(store, &args).await,
    }
}

/// What every store is served with.
struct Served {
    tokens: Option<SharedTokens>,
    keys: Option<SigningKeys>,
    audit: Option<Arc<AuditFile>>,
    /// The lease directory on the store; `None` with `--no-leases` (the routes answer 501).
    leases: Option<Arc<dyn LeaseService>>,
    options: ServeOptions,
    /// `None` with `--no-metrics`.
    metrics: Option<PrometheusHandle>,
}

impl Served {
    /// With metrics, the store is timed (`MeteredStore`) and claims, kicks and releases are
    /// counted next to the log; without, the arbiter calls the store directly.
    async fn run<S: Store>(self, store: S, args: &Args) -> Result<(), String> {
        if self.metrics.is_some() {
            let observer = (TracingObserver, MetricsObserver::new());
            run_on(MeteredStore::new(store), observer, self, args).await
        } else {
            run_on(store, TracingObserver, self, args).await
        }
    }
}

async fn run_on<S: Store>(
    store: S,
    observer: impl Observer,
    served: Served,
    args: &Args,
) -> Result<(), String> {
    let Served {
        tokens,
        keys,
        audit,
        leases,
        options,
        metrics,
    } = served;
    let config = KickerConfig {
        allow: args.kick_allow.clone(),
        deny: args.kick_deny.clone(),
        pool_max_idle: args.kick_pool_max_idle,
        max_kicks_in_flight: args.max_kicks_in_flight,
    };
    config.log();
    let mut reloader = Reloader::default();
    let builder = Arbiter::builder(store);
    let builder = match (keys, &args.kick_signing_keys) {
        (Some(keys), Some(path)) => {
            tracing::info!(
                path = %path.display(),
                signing = %keys.signing_id(),
                keys = %reload::ids(&keys),
                "kicks are signed"
            );
            let kicker = SigningKicker::new(&config, keys)?;
            let arbiter = builder.kicker(kicker.kicker().clone());
            reloader = reloader.keys(path.clone(), kicker);
            arbiter
        }
        _ => builder.kicker(config.build(None)?),
    };
    let arbiter = builder
        .observer(observer)
        .kick_timeout(args.kick_timeout)
        .max_claim_attempts(args.max_claim_attempts)
        .max_queued_claims(args.max_queued_claims)
        .claim_timeout(args.claim_timeout.into())
        .build();
    let mut service = ArbiterService::new(arbiter).ready_timeout(args.ready_timeout.into());
    if let (Some(tokens), Some(path)) = (tokens, &args.auth_tokens) {
        reloader = reloader.tokens(path.clone(), tokens.clone());
        service = service.with_tokens(tokens);
    }
    if let Some(audit) = audit {
        reloader = reloader.audit(Arc::clone(&audit));
        service = service.with_audit(audit);
    }
    if let Some(leases) = leases {
        service = service.with_leases(leases);
    }
    let shutdown = shutdown_signal()?;
    let reloads = reload::on_sighup(reloader)?;
    let listener = unique_listener::bind(args.listen, args.backlog)
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    let scheme = if options.is_tls() { "https" } else { "http" };
    // The smoke runner and scripts read this line to find the port.
    println!("unique-server listening on {scheme}://{bound}");
    tracing::info!(%bound, store = ?args.store, tls = options.is_tls(), "listening");
    if let Some(handle) = &metrics {
        exposition::spawn_upkeep(handle.clone());
    }
    tokio::spawn(reloads);
    let service = exposition::MetricsRoute::new(service, metrics);
    unique_listener::serve(listener, service, options, shutdown).await;
    tracing::info!("stopped");
    Ok(())
}

/// The store chosen by `--store`, opened and checked.
enum OpenedStore {
    Memory(unique_store_memory::MemoryStore),
    Sqlite(unique_store_sqlite::SqliteStore),
    Dynamodb(unique_store_dynamodb::DynamoStore),
    Postgres(unique_store_postgres::PostgresStore),
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
                .record_cache(args.db_cache_records)
                .open()
                .map_err(|e| {
                    format!("cannot open the sqlite store at {}: {e}", args.db.display())
                })?;
            bounded_check("sqlite store", store.check()).await?;
            tracing::info!(
                db = %args.db.display(),
                sync = ?args.db_sync,
                cache_records = args.db_cache_records,
                "sqlite store open"
            );
            Ok(OpenedStore::Sqlite(store))
        }
        StoreKind::Dynamodb => open_dynamodb(args).await.map(OpenedStore::Dynamodb),
        StoreKind::Postgres => open_postgres(args).await.map(OpenedStore::Postgres),
    }
}

/// The lease directory of `--store`'s store, served on the lease routes: the process's memory
/// for the memory store, a file of its own beside the SQLite store's (opened here: a file
/// that cannot be used stops startup), the PostgreSQL store's database (its own tables) and
/// a DynamoDB table of its own. With `--create-table` the SQL tables and the DynamoDB table
/// are created when missing. When they cannot be checked the server starts all the same, its
/// sessions unaffected, and says so: the lease routes answer 503 until the tables exist.
async fn open_leases(args: &Args, opened: &OpenedStore) -> Result<Arc<dyn LeaseService>, String> {
    match opened {
        OpenedStore::Memory(_) => {
            tracing::info!("lease directory in memory");
            Ok(Arc::new(unique_lease::MemoryDirectory::new()))
        }
        OpenedStore::Sqlite(_) => {
            let path = args
                .lease_db
                .clone()
                .unwrap_or_else(|| default_lease_db(&args.db));
            let sync = match args.db_sync {
                DbSync::Full => unique_store_sqlite::Synchronous::Full,
                DbSync::Normal => unique_store_sqlite::Synchronous::Normal,
            };
            let directory = unique_store_sqlite::SqliteDirectory::builder(&path)
                .synchronous(sync)
                .open()
                .map_err(|e| {
                    format!(
                        "cannot open the sqlite lease directory at {} (--lease-db; --no-leases \
                         serves without one): {e}",
                        path.display()
                    )
                })?;
            tracing::info!(lease_db = %path.display(), "sqlite lease directory open");
            Ok(Arc::new(directory))
        }
        OpenedStore::Postgres(store) => {
            let directory = unique_store_postgres::PostgresDirectory::builder(store)
                .table_prefix(&args.database_lease_prefix)
                .build()
                .map_err(|e| format!("cannot configure the postgres lease directory: {e}"))?;
            let what = format!("postgres lease tables {}", directory.leases_table());
            let ready = async {
                if args.create_table {
                    directory.create_tables().await?;
                }
                directory.check().await
            };
            match tokio::time::timeout(STARTUP_CHECK_TIMEOUT, ready).await {
                Ok(Ok(())) => tracing::info!(
                    leases = directory.leases_table(),
                    nodes = directory.nodes_table(),
                    "postgres lease directory ready"
                ),
                Ok(Err(e)) => lease_routes_failing(&what, &e.to_string()),
                Err(_) => lease_routes_failing(
                    &what,
                    &format!("no answer within {STARTUP_CHECK_TIMEOUT:?}"),
                ),
            }
            Ok(Arc::new(directory))
        }
        OpenedStore::Dynamodb(store) => {
            let directory = unique_store_dynamodb::DynamoDirectory::builder(&args.lease_table)
                .store(store)
                .build()
                .await
                .map_err(|e| format!("cannot configure the dynamodb lease directory: {e}"))?;
            let what = format!("dynamodb lease table {}", args.lease_table);
            let ready = async {
                if args.create_table {
                    directory
                        .create_table_if_missing(STARTUP_CHECK_TIMEOUT)
                        .await?;
                }
                directory.check_reachable(STARTUP_CHECK_TIMEOUT).await
            };
            match ready.await {
                Ok(()) => {
                    tracing::info!(table = %args.lease_table, "dynamodb lease directory ready");
                }
                Err(e) => lease_routes_failing(&what, &e.to_string()),
            }
            Ok(Arc::new(directory))
        }
    }
}

/// The lease directory's file beside the session store's: `unique.db` → `unique-leases.db`.
fn default_lease_db(db: &std::path::Path) -> PathBuf {
    let stem = db
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    let name = match db.extension() {
        Some(ext) => format!("{stem}-leases.{}", ext.to_string_lossy()),
        None => format!("{stem}-leases"),
    };
    db.with_file_name(name)
}

/// Says at startup that the lease directory is not usable yet; sessions are served all the same.
fn lease_routes_failing(what: &str, why: &str) {
    tracing::warn!(
        "{what} not usable ({why}): the lease routes answer 503 until it is (create it with \
         --create-table, or serve without leases with --no-leases)"
    );
}

async fn open_postgres(args: &Args) -> Result<unique_store_postgres::PostgresStore, String> {
    let url = args
        .database_url
        .as_ref()
        .map(|u| u.0.as_str())
        .ok_or("--store postgres needs --database-url (or UNIQUE_DATABASE_URL)")?;
    let store = unique_store_postgres::PostgresStore::builder(url)
        .table(&args.database_table)
        .max_connections(args.database_max_connections)
        .connect_timeout(args.store_connect_timeout.into())
        .operation_timeout(args.store_operation_timeout.into())
        .build()
        .map_err(|e| format!("cannot configure the postgres store: {e}"))?;
    // The target names user, hosts and database, never the password.
    let what = format!("postgres table {} at {}", store.table(), store.target());
    if args.create_table {
        let created = tokio::time::timeout(STARTUP_CHECK_TIMEOUT, store.create_table_if_missing())
            .await
            .map_err(|_| format!("{what} did not answer within {STARTUP_CHECK_TIMEOUT:?}"))?
            .map_err(|e| format!("cannot create {what}: {e}"))?;
        if created {
            tracing::info!(
                table = store.table(),
                target = store.target(),
                "created postgres table"
            );
        }
    }
    bounded_check(&what, store.check()).await?;
    tracing::info!(
        table = store.table(),
        target = store.target(),
        max_connections = args.database_max_connections,
        operation_timeout = %args.store_operation_timeout,
        tls = %store.tls(),
        "postgres store ready"
    );
    Ok(store)
}

async fn open_dynamodb(args: &Args) -> Result<unique_store_dynamodb::DynamoStore, String> {
    let mut builder = unique_store_dynamodb::DynamoStore::builder()
        .table(&args.table)
        .connect_timeout(args.store_connect_timeout.into())
        .attempt_timeout(args.store_attempt_timeout.into())
        .operation_timeout(args.store_operation_timeout.into())
        .max_attempts(args.store_max_attempts);
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
    tracing::info!(
        table = %args.table,
        attempt_timeout = %args.store_attempt_timeout,
        operation_timeout = %args.store_operation_timeout,
        max_attempts = args.store_max_attempts,
        "dynamodb store ready"
    );
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
    // Colour only for a person at a terminal: a log file or collector gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::default_lease_db;

    #[test]
    fn the_lease_file_is_beside_the_session_file() {
        for (db, leases) in [
            ("./unique.db", "./unique-leases.db"),
            (
                "/var/lib/unique/sessions.sqlite",
                "/var/lib/unique/sessions-leases.sqlite",
            ),
            ("data", "data-leases"),
            ("a.b.db", "a.b-leases.db"),
        ] {
            assert_eq!(default_lease_db(Path::new(db)), Path::new(leases), "{db}");
        }
    }
}
