//! The command line: every flag, its environment variable and its default, and the serving
//! options they make.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use unique_arbiter_http::ServeOptions;
use unique_kick_http::EndpointRule;

use crate::error::StartupError;

/// Single-session arbitration over HTTP: one online session per (project, env, uid).
///
/// Every flag can also be set with the UNIQUE_* environment variable named in its help.
#[derive(Debug, Parser)]
#[command(name = "unique-server", version, about, long_about = None)]
#[allow(clippy::struct_excessive_bools)] // one bool per on/off flag, as clap parses them
pub(crate) struct Args {
    /// Address to listen on (use port 0 for any free port; the bound address is printed).
    #[arg(long, env = "UNIQUE_LISTEN", default_value = "127.0.0.1:7420")]
    pub(crate) listen: SocketAddr,

    /// Which store holds the session records [default: fjall]. With no --store, a server whose
    /// --fjall-dir does not exist yet but whose --db does (a SQLite store, the default of
    /// earlier builds) refuses to start instead of beginning again from an empty store.
    #[arg(long = "store", env = "UNIQUE_STORE", value_enum)]
    chosen_store: Option<StoreKind>,

    /// The SQLite store's database file (with --store sqlite; created when missing). The
    /// server holds it for itself, whatever its other flags: a second server on the same
    /// file refuses to start, naming the first one's pid.
    #[arg(long, env = "UNIQUE_DB", default_value = "./unique.db")]
    pub(crate) db: PathBuf,

    /// Directory of the fjall store (the default store; created when missing). fjall locks
    /// it: a second server on the same directory refuses to start.
    #[arg(long, env = "UNIQUE_FJALL_DIR", default_value = "./unique.fjall")]
    pub(crate) fjall_dir: PathBuf,

    /// Commit durability of the SQLite store and of its lease file (beside --db): `full` fsyncs every commit before answering; `normal` survives a process
    /// crash but an OS crash or power loss can lose the last acknowledged claims (see
    /// unique-store-sqlite). The fjall store always fsyncs before answering.
    #[arg(long, env = "UNIQUE_DB_SYNC", value_enum, default_value_t = DbSync::Full)]
    pub(crate) db_sync: DbSync,

    /// Records of the SQLite store kept in memory, so reads of recently written keys
    /// skip SQLite (0 = off). With it on, edits of --db by other tools (the sqlite3 CLI)
    /// while the server runs are not seen: stop the server first.
    #[arg(long, env = "UNIQUE_DB_CACHE_RECORDS", default_value_t = 100_000)]
    pub(crate) db_cache_records: usize,

    /// DynamoDB table name (with --store dynamodb).
    #[arg(long, env = "UNIQUE_TABLE", default_value = "unique-sessions")]
    pub(crate) table: String,

    /// Serve no lease routes (/v1/lease/*, /v1/nodes/*: they answer 501), and open no lease
    /// directory on the store.
    #[arg(long, env = "UNIQUE_NO_LEASES")]
    pub(crate) no_leases: bool,

    /// A lease-only server: the session routes (/v1/claim, /v1/current, /v1/release,
    /// /v1/logout, /v1/sessions) answer 501 not_implemented and no kick is ever sent, so no
    /// kick signing keys are wanted off loopback (--kick-signing-keys and
    /// --insecure-unsigned-kicks are refused with it). The store is opened for its lease
    /// directory; GET /v1/info says sessions: false.
    #[arg(long, env = "UNIQUE_NO_SESSIONS", conflicts_with_all = ["no_leases", "kick_signing_keys", "insecure_unsigned_kicks"])]
    pub(crate) no_sessions: bool,

    /// SQLite file of the lease directory with --store sqlite (created when missing): a file
    /// of its own, by default beside --db (unique.db → unique-leases.db). With --store fjall
    /// the leases live in --fjall-dir, and this names an older build's lease file to import
    /// at startup (by default unique-leases.db beside --fjall-dir, imported when present).
    #[arg(long, env = "UNIQUE_LEASE_DB", value_name = "PATH")]
    pub(crate) lease_db: Option<PathBuf>,

    /// How long an expired lease row or node registration stays before the sweep deletes
    /// it, on the store's clock (a lookup reports a room's last holding until then; 0s:
    /// at the first pass after it expired; at most 30 days). Rows a clock step keeps in
    /// force are never swept (D11, D12). Memory, fjall, SQLite and PostgreSQL; Redis expires
    /// its keys itself, and DynamoDB keeps its lease items (they carry D4's fencing).
    #[arg(long, env = "UNIQUE_LEASE_SWEEP_GRACE", default_value_t = unique_lease::DEFAULT_SWEEP_GRACE.into(), value_parser = sweep_grace)]
    pub(crate) lease_sweep_grace: humantime::Duration,

    /// How often the sweep passes over the lease directory, in batches of 500 rows, each
    /// one short transaction (0s: never sweep; otherwise 10ms to 1 day).
    #[arg(long, env = "UNIQUE_LEASE_SWEEP_INTERVAL", default_value_t = unique_lease::DEFAULT_SWEEP_INTERVAL.into(), value_parser = sweep_interval)]
    pub(crate) lease_sweep_interval: humantime::Duration,

    /// DynamoDB table of the lease directory (with --store dynamodb): a table of its own,
    /// partition key `pk` alone (--create-table creates it).
    #[arg(long, env = "UNIQUE_LEASE_TABLE", default_value = "unique-leases")]
    pub(crate) lease_table: String,

    /// PostgreSQL: prefix of the lease directory's tables (PREFIX_leases, PREFIX_nodes and
    /// the sequence PREFIX_epoch; NAME or SCHEMA.NAME; --create-table creates them).
    #[arg(long, env = "UNIQUE_DATABASE_LEASE_PREFIX", default_value = unique_store_postgres::DEFAULT_LEASE_PREFIX)]
    pub(crate) database_lease_prefix: String,

    /// DynamoDB endpoint URL, for a local DynamoDB-compatible server (omit for AWS itself).
    #[arg(long, env = "UNIQUE_ENDPOINT_URL")]
    pub(crate) endpoint_url: Option<String>,

    /// DynamoDB region (default: the standard AWS region chain, e.g. AWS_REGION).
    #[arg(long, env = "UNIQUE_REGION")]
    pub(crate) region: Option<String>,

    /// Create the table when it is missing: DynamoDB (partition key `pk`, sort key `sk`,
    /// on-demand billing; a table from before device slots is refused at startup with the
    /// steps to move it) or PostgreSQL (--database-table; needs the CREATE privilege), where
    /// it also migrates a table of an older schema and adds the session-listing index to a
    /// table that lacks it (both need the table's owner).
    #[arg(long, env = "UNIQUE_CREATE_TABLE")]
    pub(crate) create_table: bool,

    /// PostgreSQL connection URL (with --store postgres), e.g.
    /// postgres://unique:PASSWORD@db.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/unique/db-ca.pem
    /// (libpq's sslmode and sslrootcert; without sslmode a host off loopback is verified
    /// against the system roots). Prefer the environment variable: a command line is
    /// visible to other users of the machine. Never logged.
    #[arg(long, env = "UNIQUE_DATABASE_URL", hide_env_values = true, value_parser = DatabaseUrl::parse)]
    pub(crate) database_url: Option<DatabaseUrl>,

    /// PostgreSQL table (NAME or SCHEMA.NAME) holding the records.
    #[arg(long, env = "UNIQUE_DATABASE_TABLE", default_value = unique_store_postgres::DEFAULT_TABLE)]
    pub(crate) database_table: String,

    /// PostgreSQL: connections this server process keeps open at most.
    #[arg(long, env = "UNIQUE_DATABASE_MAX_CONNECTIONS", default_value_t = unique_store_postgres::DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) database_max_connections: u16,

    // DynamoDB client timeouts: together they bound every store call, so every claim.
    /// DynamoDB and PostgreSQL: time allowed to open a connection.
    #[arg(long, env = "UNIQUE_STORE_CONNECT_TIMEOUT", default_value_t = unique_store_dynamodb::DEFAULT_CONNECT_TIMEOUT.into(), value_parser = positive_duration)]
    pub(crate) store_connect_timeout: humantime::Duration,

    /// DynamoDB: time allowed for one HTTP attempt of a store call, connect included; a
    /// connection that stopped answering is dropped and the call retried on a new one.
    #[arg(long, env = "UNIQUE_STORE_ATTEMPT_TIMEOUT", default_value_t = unique_store_dynamodb::DEFAULT_ATTEMPT_TIMEOUT.into(), value_parser = positive_duration)]
    pub(crate) store_attempt_timeout: humantime::Duration,

    /// DynamoDB and PostgreSQL: time allowed for one store call, every attempt and backoff
    /// included (the most a claim waits on each of its reads and writes).
    #[arg(long, env = "UNIQUE_STORE_OPERATION_TIMEOUT", default_value_t = unique_store_dynamodb::DEFAULT_OPERATION_TIMEOUT.into(), value_parser = positive_duration)]
    pub(crate) store_operation_timeout: humantime::Duration,

    /// DynamoDB: HTTP attempts per store call (1: no retry).
    #[arg(long, env = "UNIQUE_STORE_MAX_ATTEMPTS", default_value_t = unique_store_dynamodb::DEFAULT_MAX_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) store_max_attempts: u32,

    /// How long /readyz waits for the store to answer before it answers 503.
    #[arg(long, env = "UNIQUE_READY_TIMEOUT", default_value_t = unique_arbiter_http::DEFAULT_READY_TIMEOUT.into(), value_parser = positive_duration)]
    pub(crate) ready_timeout: humantime::Duration,

    /// How long an old session's kick receiver gets to confirm (e.g. 500ms, 3s).
    #[arg(long, env = "UNIQUE_KICK_TIMEOUT", default_value = "3s", value_parser = humantime::parse_duration)]
    pub(crate) kick_timeout: Duration,

    /// Most idle kick connections kept across all nodes (the least recently used closes
    /// first; 0: no reuse). Each node keeps at most 32 of them.
    #[arg(long, env = "UNIQUE_KICK_POOL_MAX_IDLE", default_value_t = unique_kick_http::DEFAULT_MAX_IDLE)]
    pub(crate) kick_pool_max_idle: usize,

    /// Most kicks in flight at once; a kick over it is not attempted and the claim sees
    /// connect-error (counted by unique_kicks_shed_total).
    #[arg(long, env = "UNIQUE_MAX_KICKS_IN_FLIGHT", default_value_t = unique_kick_http::DEFAULT_MAX_KICKS_IN_FLIGHT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) max_kicks_in_flight: usize,

    /// Most kick streams open at once on this server (GET /v1/nodes/{node}/kicks: nodes
    /// that take their kicks over a stream they opened); past it a new stream is refused
    /// with 503 and Retry-After: 1.
    #[arg(long, env = "UNIQUE_MAX_KICK_STREAMS", default_value_t = unique_arbiter_http::push::DEFAULT_MAX_KICK_STREAMS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) max_kick_streams: usize,

    /// Most kick streams open at once under one token (one for every caller without
    /// --auth-tokens); past it a new stream is refused with 429.
    #[arg(long, env = "UNIQUE_MAX_KICK_STREAMS_PER_TOKEN", default_value_t = unique_arbiter_http::push::DEFAULT_MAX_KICK_STREAMS_PER_TOKEN, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) max_kick_streams_per_token: usize,

    /// Interval of the ping lines of a kick stream (a node that hears nothing for three
    /// intervals reconnects).
    #[arg(long, env = "UNIQUE_KICK_STREAM_PING", default_value = "15s", value_parser = positive_duration)]
    pub(crate) kick_stream_ping: humantime::Duration,

    /// How long the oldest line queued on a kick stream may wait for its reader before the
    /// stream is closed as a slow reader (its waiting kicks fail as connect-error); checked
    /// whenever a line is queued, so within one ping interval after it passes.
    #[arg(long, env = "UNIQUE_KICK_STREAM_WRITE_TIMEOUT", default_value = "10s", value_parser = positive_duration)]
    pub(crate) kick_stream_write_timeout: humantime::Duration,

    /// The base URL the other servers of the deployment reach this one at
    /// (http://10.0.0.5:7070: this process's own address, never a load balancer's). With
    /// --peer-secret-file, a kick for a node whose stream another server holds is forwarded
    /// to that server, which pushes it; each server registers the streams it holds in the
    /// shared store (PostgreSQL or DynamoDB; not memory, fjall or SQLite, which one server
    /// holds alone). Plain HTTP: keep it on a private network.
    #[arg(long, env = "UNIQUE_PEER_URL", requires = "peer_secret_file", value_parser = peer_url)]
    pub(crate) peer_url: Option<String>,

    /// Owner-only file holding the secret every server of the deployment shares for the
    /// peer routes (one line, at least 32 visible ASCII characters). Needs --peer-url.
    #[arg(long, env = "UNIQUE_PEER_SECRET_FILE", requires = "peer_url")]
    pub(crate) peer_secret_file: Option<PathBuf>,

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
    pub(crate) kick_allow: Vec<EndpointRule>,

    /// Kick-endpoint deny list, in the same form as --kick-allow; repeatable. It wins over
    /// the allow list. A claim whose endpoint is refused gets 400 invalid_params.
    #[arg(
        long,
        env = "UNIQUE_KICK_DENY",
        value_delimiter = ',',
        value_name = "RULES"
    )]
    pub(crate) kick_deny: Vec<EndpointRule>,

    /// Signs every kick with the first key of this file (HMAC-SHA256, `Unique-Signature`
    /// header), for kick receivers that verify: one key per line, at least 32 bytes each
    /// (`openssl rand -hex 32`), blank lines and `#` comments skipped. Unsigned without it.
    /// Owner-only (chmod 600) or refused; reread on SIGHUP.
    #[arg(long, env = "UNIQUE_KICK_SIGNING_KEYS", value_name = "PATH")]
    pub(crate) kick_signing_keys: Option<PathBuf>,

    /// Send unsigned kicks from a non-loopback address with --auth-tokens (refused
    /// otherwise). Only where no untrusted host can reach the nodes' kick receivers.
    #[arg(
        long,
        env = "UNIQUE_INSECURE_UNSIGNED_KICKS",
        conflicts_with = "kick_signing_keys"
    )]
    pub(crate) insecure_unsigned_kicks: bool,

    /// Compare-and-set attempts per claim before failing closed (values below 1 mean 1).
    #[arg(long, env = "UNIQUE_MAX_CLAIM_ATTEMPTS", default_value_t = 3)]
    pub(crate) max_claim_attempts: u32,

    /// Most claims that may wait on one key behind the one in progress; one more is
    /// answered 429 throttled at once (one user's devices never queue that many).
    #[arg(long, env = "UNIQUE_MAX_QUEUED_CLAIMS", default_value_t = unique_core::DEFAULT_MAX_QUEUED_CLAIMS)]
    pub(crate) max_queued_claims: usize,

    /// Most online sessions (device slots) one user may hold: a login in a slot the user has
    /// no online session in, when the user already holds this many, is answered 409
    /// too_many_slots and writes nothing (a login in an online slot is never refused). 1 to
    /// 1000: one page of POST /v1/sessions (at most 1000) always holds all of a user's slots.
    #[arg(long, env = "UNIQUE_MAX_SLOTS_PER_USER", default_value_t = DEFAULT_MAX_SLOTS_PER_USER, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SLOTS_PER_USER)))]
    pub(crate) max_slots_per_user: u32,

    /// The most pooled sessions one user may hold (a claim with "pool", see docs/design.md
    /// "Pooled sessions"): N for every project, or PROJECT=N for one project (repeatable, or
    /// comma-separated; the last one for a project wins). Default 5. Each 1 to
    /// --max-slots-per-user: a pool's places are slots of the user and count toward that cap.
    #[arg(long, env = "UNIQUE_SESSION_LIMIT", value_name = "[PROJECT=]N", value_delimiter = ',', value_parser = SessionLimit::parse)]
    pub(crate) session_limit: Vec<SessionLimit>,

    /// Deadline of one claim from its arrival, its wait in line included (e.g. 5s): past
    /// it a claim stops before its next kick or write and answers 503 unavailable. A write
    /// already sent is waited for, so a claim never writes after it answered.
    #[arg(long, env = "UNIQUE_CLAIM_TIMEOUT", default_value_t = unique_core::DEFAULT_CLAIM_TIMEOUT.into(), value_parser = positive_duration)]
    pub(crate) claim_timeout: humantime::Duration,

    /// Record no metrics and serve no /metrics (which is otherwise open like /healthz: counts
    /// only, no keys or tokens; see SECURITY.md).
    #[arg(long, env = "UNIQUE_NO_METRICS")]
    pub(crate) no_metrics: bool,

    /// How often the server counts the sessions online in its store for the
    /// unique_sessions_online gauge: one count of the whole store (a scan of its table), the
    /// first at startup (0s: never; otherwise 1s to 1 day). Memory, fjall, SQLite and
    /// PostgreSQL; DynamoDB has no cheap count and the gauge stays absent.
    #[arg(long, env = "UNIQUE_SESSIONS_COUNT_INTERVAL", default_value = "30s", value_parser = count_interval)]
    pub(crate) sessions_count_interval: humantime::Duration,

    /// Log format on stderr.
    #[arg(long, env = "UNIQUE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,

    /// Worker threads of the async runtime (default: one per CPU the process may use but one,
    /// at least one; the other core's time goes to the kernel's TCP work, the store's own
    /// threads and the kicks).
    #[arg(long, env = "UNIQUE_WORKERS")]
    pub(crate) workers: Option<usize>,

    // Caller authentication.
    /// Bearer tokens callers must present on /v1/*, each scoped to projects (and
    /// optionally envs): a JSON file `{"tokens": [{"name", "token", "projects", "envs"}]}`.
    /// Owner-only (chmod 600) or refused; reread on SIGHUP.
    #[arg(long, env = "UNIQUE_AUTH_TOKENS")]
    pub(crate) auth_tokens: Option<PathBuf>,

    /// Append one JSON line per session event (first login, takeover, replay, superseded,
    /// release, admin logout) to this file, fsynced before the answer (concurrent answers
    /// share one fsync), and one line per source address, reason and path of refused
    /// callers every 10 s with their count. Created owner-only when missing; a symbolic link
    /// or anything but a regular file is refused. Rotated by size (--audit-log-max-bytes),
    /// reopened on SIGHUP. When a line cannot be written, claims, releases and logouts are
    /// answered 503.
    #[arg(long, env = "UNIQUE_AUDIT_LOG", value_name = "PATH")]
    pub(crate) audit_log: Option<PathBuf>,

    /// Rotate the audit log before it grows past this many bytes: PATH becomes PATH.1,
    /// PATH.1 PATH.2 and so on (see --audit-log-keep). 0: never rotate here (an external
    /// rotator renames the file and sends SIGHUP).
    #[arg(long, env = "UNIQUE_AUDIT_LOG_MAX_BYTES", value_name = "BYTES", default_value_t = unique_arbiter_http::DEFAULT_AUDIT_MAX_BYTES, requires = "audit_log")]
    pub(crate) audit_log_max_bytes: u64,

    /// Rotated audit logs kept (PATH.1 newest to PATH.N); the oldest beyond is deleted.
    #[arg(long, env = "UNIQUE_AUDIT_LOG_KEEP", value_name = "N", default_value_t = unique_arbiter_http::DEFAULT_AUDIT_KEEP, value_parser = clap::value_parser!(u32).range(1..=1000), requires = "audit_log")]
    pub(crate) audit_log_keep: u32,

    /// Serve /v1/* without authentication on a non-loopback address. Only for networks
    /// where every host that can reach the server is trusted (see SECURITY.md).
    #[arg(long, env = "UNIQUE_INSECURE_NO_AUTH", conflicts_with = "auth_tokens")]
    pub(crate) insecure_no_auth: bool,

    // Connection guards and TLS (unique-listener describes each guard).
    /// Serve HTTPS with this PEM certificate chain (leaf first); needs --tls-key.
    #[arg(long, env = "UNIQUE_TLS_CERT", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "UNIQUE_TLS_KEY", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,

    /// Mutual TLS: PEM CA certificate(s); clients without a certificate signed by one are
    /// refused during the handshake. Needs --tls-cert and --tls-key.
    #[arg(long, env = "UNIQUE_TLS_CLIENT_CA", requires_all = ["tls_cert", "tls_key"])]
    pub(crate) tls_client_ca: Option<PathBuf>,

    /// Most open connections; more are closed as soon as they are accepted (keep below `ulimit -n`).
    #[arg(long, env = "UNIQUE_MAX_CONNECTIONS", default_value_t = unique_listener::DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) max_connections: usize,

    /// Most open connections from one client IP address (raise it behind a proxy).
    #[arg(long, env = "UNIQUE_MAX_CONNECTIONS_PER_IP", default_value_t = unique_listener::DEFAULT_MAX_CONNECTIONS_PER_IP, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) max_connections_per_ip: usize,

    /// How long a request head may take (a connection's first: from the accept, TLS included).
    #[arg(long, env = "UNIQUE_HEADER_TIMEOUT", default_value_t = unique_listener::DEFAULT_HEADER_TIMEOUT.into(), value_parser = positive_duration)]
    pub(crate) header_timeout: humantime::Duration,

    /// How long a keep-alive connection may wait between requests before it is closed.
    #[arg(long, env = "UNIQUE_IDLE_TIMEOUT", default_value_t = unique_listener::DEFAULT_IDLE_TIMEOUT.into(), value_parser = positive_duration)]
    pub(crate) idle_timeout: humantime::Duration,

    /// How long a request body may take after its head; a slower one is answered 408.
    #[arg(long, env = "UNIQUE_BODY_TIMEOUT", default_value_t = unique_listener::DEFAULT_BODY_TIMEOUT.into(), value_parser = positive_duration)]
    pub(crate) body_timeout: humantime::Duration,

    /// Listen backlog: connections waiting to be accepted (Linux caps it at net.core.somaxconn).
    #[arg(long, env = "UNIQUE_BACKLOG", default_value_t = unique_listener::DEFAULT_BACKLOG, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) backlog: u32,
}

/// `--max-slots-per-user` by default: more devices than one person uses at once.
const DEFAULT_MAX_SLOTS_PER_USER: u32 = 16;
/// The most `--max-slots-per-user` takes: a session listing's largest page.
const MAX_SLOTS_PER_USER: u32 = 1000;

/// One `--session-limit`: every project's, or one project's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionLimit {
    /// `None`: every project without a limit of its own.
    pub(crate) project: Option<String>,
    pub(crate) limit: usize,
}

impl SessionLimit {
    /// `N` or `PROJECT=N`, N from 1 to 1000 (a place index has at most three digits), the
    /// project a valid project name.
    fn parse(text: &str) -> Result<Self, String> {
        let (project, number) = match text.rsplit_once('=') {
            Some((project, number)) => {
                unique_core::ValidationLimits::default()
                    .check_user(&unique_core::UserKey::new(project, "env", 1))
                    .map_err(|e| match e {
                        unique_core::Error::InvalidParams(reason) => reason,
                        other => other.to_string(),
                    })?;
                (Some(project.to_owned()), number)
            }
            None => (None, text),
        };
        let limit = number
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=unique_core::MAX_POOL_PLACES).contains(n))
            .ok_or_else(|| {
                format!(
                    "the limit must be a number from 1 to {}, got {number:?}",
                    unique_core::MAX_POOL_PLACES
                )
            })?;
        Ok(Self { project, limit })
    }
}

/// `--lease-sweep-grace`: at most 30 days.
fn sweep_grace(text: &str) -> Result<humantime::Duration, String> {
    let duration: humantime::Duration = text.parse().map_err(|e| format!("{e}"))?;
    if *duration > Duration::from_hours(30 * 24) {
        return Err("must be at most 30 days".to_owned());
    }
    Ok(duration)
}

/// `--lease-sweep-interval`: 0 (off), or 10 ms to 1 day.
fn sweep_interval(text: &str) -> Result<humantime::Duration, String> {
    let duration: humantime::Duration = text.parse().map_err(|e| format!("{e}"))?;
    if !duration.is_zero()
        && (*duration < Duration::from_millis(10) || *duration > Duration::from_hours(24))
    {
        return Err("must be 0s (no sweep) or between 10ms and 1 day".to_owned());
    }
    Ok(duration)
}

/// `--sessions-count-interval`: 0 (off), or 1 s to 1 day.
fn count_interval(text: &str) -> Result<humantime::Duration, String> {
    let duration: humantime::Duration = text.parse().map_err(|e| format!("{e}"))?;
    if !duration.is_zero()
        && (*duration < Duration::from_secs(1) || *duration > Duration::from_hours(24))
    {
        return Err("must be 0s (no count) or between 1s and 1 day".to_owned());
    }
    Ok(duration)
}

/// A humantime duration above zero (a zero timeout would close every connection).
/// `--peer-url`: `http://host:port`, nothing after the authority but an optional `/`.
fn peer_url(text: &str) -> Result<String, String> {
    let uri: http::Uri = text.parse().map_err(|e| format!("not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(
                "the peer routes speak plain HTTP: give an http:// URL on a private \
                        network"
                    .to_owned(),
            );
        }
        _ => return Err("expected http://host:port".to_owned()),
    }
    let Some(authority) = uri.authority() else {
        return Err("expected http://host:port".to_owned());
    };
    if authority.port_u16().is_none() || authority.as_str().contains('@') {
        return Err("expected http://host:port, with the port".to_owned());
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err("expected http://host:port, with no path".to_owned());
    }
    Ok(format!("http://{authority}"))
}

fn positive_duration(text: &str) -> Result<humantime::Duration, String> {
    let duration: humantime::Duration = text.parse().map_err(|e| format!("{e}"))?;
    if duration.is_zero() {
        return Err("must be above zero".to_owned());
    }
    Ok(duration)
}

impl Args {
    /// The store `--store` names, or the default: fjall, the fastest durable store on one
    /// machine (BENCHMARKS.md, "Durable stores against Redis AOF").
    pub(crate) fn store(&self) -> StoreKind {
        self.chosen_store.unwrap_or(StoreKind::Fjall)
    }

    /// The store's name as `--store` takes it (`fjall`, `postgres`, …), for `/v1/info`.
    pub(crate) fn store_name(&self) -> &'static str {
        match self.store() {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Fjall => "fjall",
            StoreKind::Memory => "memory",
            StoreKind::Dynamodb => "dynamodb",
            StoreKind::Postgres => "postgres",
        }
    }

    /// Whether `--store` (or `UNIQUE_STORE`) named the store, rather than the default.
    pub(crate) fn store_is_chosen(&self) -> bool {
        self.chosen_store.is_some()
    }

    /// The async runtime's worker threads: `--workers` (0 read as 1), else
    /// [`default_workers`] of the CPUs this process may use.
    pub(crate) fn worker_threads(&self) -> usize {
        self.workers.map_or_else(
            || default_workers(std::thread::available_parallelism().map_or(1, usize::from)),
            |workers| workers.max(1),
        )
    }

    /// The default session limit and each project's, from `--session-limit`, each checked
    /// against `--max-slots-per-user` (places are slots and count toward that cap).
    pub(crate) fn session_limits(&self) -> Result<(usize, Vec<(String, usize)>), StartupError> {
        let cap = self.max_slots_per_user as usize;
        let mut default = unique_core::DEFAULT_SESSION_LIMIT.min(cap);
        let mut projects = Vec::new();
        for SessionLimit { project, limit } in &self.session_limit {
            if *limit > cap {
                return Err(format!(
                    "--session-limit {limit} is above --max-slots-per-user {cap}: a pool's places are slots of the user and count toward that cap"
                )
                .into());
            }
            match project {
                Some(project) => projects.push((project.clone(), *limit)),
                None => default = *limit,
            }
        }
        Ok((default, projects))
    }

    /// The connection guards and TLS of the flags; a TLS file that cannot be used is an error
    /// naming it.
    pub(crate) fn serve_options(&self) -> Result<ServeOptions, StartupError> {
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

/// The default worker count on `cpus` CPUs: all but one, at least one. Beside the workers run
/// the kernel's loopback and TCP work for every connection, the store's own threads (SQLite's
/// writer, fsyncs on the blocking pool, PostgreSQL's and DynamoDB's clients) and the kicks; a
/// worker the OS parks behind them holds its connections' requests for a time slice. Measured
/// on 2 CPUs (BENCHMARKS.md, "The worker count"): one worker serves more claims than two.
/// On more CPUs the one left out is a shrinking share, and the count still grows with them.
pub(crate) fn default_workers(cpus: usize) -> usize {
    cpus.saturating_sub(1).max(1)
}

/// A database URL, which may hold a password: its `Debug` never shows it.
#[derive(Clone)]
pub(crate) struct DatabaseUrl(String);

impl DatabaseUrl {
    #[allow(clippy::unnecessary_wraps)] // the signature clap's value parsers have
    fn parse(text: &str) -> Result<Self, String> {
        Ok(Self(text.to_owned()))
    }

    /// The URL itself, for the store to connect with; never log it.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseUrl(_)")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StoreKind {
    /// Durable embedded SQLite file at --db (one machine).
    Sqlite,
    /// Durable embedded fjall (an LSM tree) directory at --fjall-dir (one machine), which
    /// holds the lease directory too.
    Fjall,
    /// In process memory: fast, forgets every gen on restart (tests and demos only).
    Memory,
    /// DynamoDB table --table (many server processes share it); see --endpoint-url, --region.
    Dynamodb,
    /// PostgreSQL table --database-table at --database-url (many server processes share it).
    Postgres,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DbSync {
    /// fsync every commit before answering (durable against power loss).
    Full,
    /// fsync at checkpoints only (durable against process crashes).
    Normal,
}

impl DbSync {
    /// The SQLite setting of the flag, for the session store and the lease directory alike.
    pub(crate) fn synchronous(self) -> unique_store_sqlite::Synchronous {
        match self {
            Self::Full => unique_store_sqlite::Synchronous::Full,
            Self::Normal => unique_store_sqlite::Synchronous::Normal,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[cfg(test)]
mod tests {
    use super::default_workers;

    #[test]
    fn the_default_worker_count_leaves_one_cpu_to_the_rest() {
        assert_eq!(default_workers(1), 1);
        assert_eq!(default_workers(2), 1);
        assert_eq!(default_workers(4), 3);
        assert_eq!(default_workers(64), 63);
        assert_eq!(
            default_workers(0),
            1,
            "an unknown count still gets a worker"
        );
    }
}
