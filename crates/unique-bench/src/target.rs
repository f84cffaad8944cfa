//! The systems under load: each [`Target`], and its server running for a pass
//! ([`Running`]), measured round by round.

use clap::ValueEnum;

use crate::cpu::{self, Process};
use crate::http_client::HttpConnector;
use crate::io;
use crate::load::{self, LoadPlan, Measurement};
use crate::redis_client::RedisConnector;
use crate::server::{self, DbSync, ServerStore, UniqueServer, Variant};
use unique_testsupport::postgres::PostgresServer;
use unique_testsupport::redis::{Persistence, RedisServer};

/// One system under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Target {
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
    /// unique-server --store memory, each claim a pooled login of its user
    /// (`"pool":{"policy":"evict-oldest","limit":3}`, issue 45) instead of a claim of one key.
    MemoryPooled,
    /// unique-server --store fjall, pooled logins as [`Target::MemoryPooled`].
    FjallPooled,
    /// unique-server --store postgres on a private PostgreSQL (fsync and
    /// synchronous_commit on), started by the bench.
    Postgres,
    /// A server that answers every request with a canned claim answer and does
    /// nothing else (`src/floor.rs`): what any HTTP server costs on this machine.
    HttpFloor,
}

impl Target {
    pub(crate) const ALL: [Target; 12] = [
        Target::Redis,
        Target::RedisAof,
        Target::Memory,
        Target::MemoryNoMetrics,
        Target::MemoryGuarded,
        Target::SqliteFull,
        Target::SqliteNormal,
        Target::Fjall,
        Target::MemoryPooled,
        Target::FjallPooled,
        Target::Postgres,
        Target::HttpFloor,
    ];

    /// What a pinned run measures again unpinned by default: the memory and durable
    /// stores, their Redis baselines and the HTTP floor.
    pub(crate) const UNPINNED: [Target; 6] = [
        Target::Redis,
        Target::RedisAof,
        Target::Memory,
        Target::SqliteFull,
        Target::Fjall,
        Target::HttpFloor,
    ];

    /// What the `--fixed-keys` passes measure (of `--targets`): the same as the unpinned pass.
    pub(crate) const LIKE_FOR_LIKE: [Target; 6] = Self::UNPINNED;

    /// What the memory measure counts as the store's bytes on disk, for a store with files.
    pub(crate) fn store_files_described(self) -> Option<String> {
        match self {
            Target::SqliteFull | Target::SqliteNormal => Some(format!(
                "{0} + {0}-wal (not -shm, the WAL's index)",
                server::SQLITE_FILE
            )),
            Target::Fjall | Target::FjallPooled => {
                Some(format!("every file under {}/", server::FJALL_DIR))
            }
            _ => None,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Target::Redis => "redis lua script",
            Target::RedisAof => "redis lua, aof always",
            Target::Memory => "unique memory",
            Target::MemoryNoMetrics => "unique memory, no metrics",
            Target::MemoryGuarded => "unique memory, auth + signing",
            Target::SqliteFull => "unique sqlite full",
            Target::SqliteNormal => "unique sqlite normal",
            Target::Fjall => "unique fjall",
            Target::MemoryPooled => "unique memory, pooled (k=3)",
            Target::FjallPooled => "unique fjall, pooled (k=3)",
            Target::Postgres => "unique postgres",
            Target::HttpFloor => "http floor (canned answer)",
        }
    }
}

/// The session limit of the pooled targets' logins (the server's default limit is 5).
pub(crate) const POOL_LIMIT: usize = 3;

/// A target whose server runs until this is dropped.
pub(crate) struct Running {
    pub(crate) target: Target,
    pub(crate) connector: Connector,
    pub(crate) pid: u32,
    /// The redis-server's address (for `INFO`), on a Redis target.
    pub(crate) redis_addr: Option<std::net::SocketAddr>,
    /// The files the store keeps its records in (the SQLite file and its WAL, the fjall
    /// directory); empty for a store without files.
    pub(crate) store_files: Vec<std::path::PathBuf>,
    /// Held only so the server lives; dropping it kills the process.
    _server: Box<dyn std::any::Any>,
}

pub(crate) enum Connector {
    Redis(RedisConnector),
    Http(HttpConnector),
}

impl Running {
    pub(crate) fn start(
        target: Target,
        server_bin: Option<&std::path::Path>,
        server_workers: usize,
        audit_log: bool,
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
            Target::Memory
            | Target::MemoryNoMetrics
            | Target::MemoryGuarded
            | Target::MemoryPooled => ServerStore::Memory,
            Target::SqliteFull => ServerStore::Sqlite(DbSync::Full),
            Target::SqliteNormal => ServerStore::Sqlite(DbSync::Normal),
            Target::Fjall | Target::FjallPooled => ServerStore::Fjall,
            Target::Postgres => {
                let started = PostgresServer::start();
                let url = started.url().to_owned();
                database = Some(started);
                ServerStore::Postgres(url)
            }
        };
        let bin = server_bin.ok_or("no unique-server binary")?;
        let workers = (server_workers > 0).then_some(server_workers);
        let server = UniqueServer::start(bin, store.clone(), workers, variant, audit_log)?;
        let mut connector = HttpConnector::new(server.addr(), server.bearer_token());
        if matches!(target, Target::MemoryPooled | Target::FjallPooled) {
            connector = connector.pooled(POOL_LIMIT);
        }
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
    pub(crate) fn measure(
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
