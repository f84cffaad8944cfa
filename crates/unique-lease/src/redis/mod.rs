//! The Redis backend.

mod error;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::directory::{LeaseBackend, StoredLease, StoredNode, new_lease_token};
use crate::error::LeaseError;
use crate::step::{STEP_TOLERANCE_MS, StepGuard};
use crate::time::{Clock, MAX_TTL, SystemClock, to_millis};
use crate::validate;

/// Default key prefix. The braces are a Redis Cluster hash tag: every key of one
/// directory lands in one slot, which the scripts need (they touch a lease key and
/// the shared epoch counter together).
pub const DEFAULT_KEY_PREFIX: &str = "{unique-lease}";

/// Default time a lease key outlives its lease before Redis deletes it.
pub const DEFAULT_GC_GRACE: Duration = Duration::from_mins(1);

/// A [`Directory`](crate::Directory) and [`NodeRegistry`](crate::NodeRegistry) in Redis, over a [`ConnectionManager`]
/// (which reconnects by itself after a dropped connection; the call that saw the
/// drop fails with [`LeaseError::Unavailable`]). Cheap to clone.
///
/// # Storage
///
/// - `<prefix>:lease:<room_id>`: a hash `{node, token, epoch, exp, ttl}` (`ttl` the ttl
///   granted, D11; absent in a hash an older build wrote), (`exp` in Unix
///   milliseconds on **Redis's clock**: every script reads `TIME`, so the callers'
///   clocks never decide who holds a room, D10). The key also carries a Redis TTL of
///   `exp - now + gc_grace`, purely as garbage collection, so rooms nobody serves any
///   more do not accumulate; the grace keeps an expired lease readable (D7) for a
///   while.
/// - `<prefix>:epoch`: the epoch counter, **without TTL**. Every new holding of any
///   room takes `INCR` of it, so epochs keep increasing after a lease key expired or
///   was released and are never issued twice (D4). One counter per directory (rather
///   than one per room) is what lets dead rooms leave nothing behind at all.
/// - `<prefix>:node:<node_id>`: a hash `{addr, updated, exp}` on Redis's clock,
///   with a Redis TTL of exactly the registration's ttl.
///
/// Epoch fencing across a Redis restart needs Redis persistence (AOF): a server that
/// restarts empty starts the counter again at 1.
///
/// # Atomicity
///
/// Every operation but `unregister_node` (one `DEL`) runs as one Lua script, so
/// every operation is atomic (D8).
#[derive(Clone)]
pub struct RedisDirectory {
    conn: ConnectionManager,
    prefix: Arc<str>,
    gc_grace_ms: u64,
    /// `None`: Redis's `TIME` judges (production). `Some`: a test clock does.
    clock: Option<Arc<dyn Clock>>,
    /// Forward steps of Redis's clock (D11), seen against `monotonic` (the test clock's
    /// when one judges, else this process's).
    steps: Arc<StepGuard>,
    monotonic: Arc<dyn Clock>,
}

impl std::fmt::Debug for RedisDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDirectory")
            .field("prefix", &self.prefix)
            .field("gc_grace_ms", &self.gc_grace_ms)
            .finish_non_exhaustive()
    }
}

/// Configures a [`RedisDirectory`].
#[must_use]
pub struct RedisDirectoryBuilder {
    conn: ConnectionManager,
    prefix: String,
    gc_grace: Duration,
    clock: Option<Arc<dyn Clock>>,
}

impl RedisDirectory {
    /// Connects to `url` (`redis://[user:password@]host:port/[db]`) with
    /// [`connection_manager`](Self::connection_manager) and default settings.
    pub async fn connect(url: &str) -> Result<Self, LeaseError> {
        Self::builder(Self::connection_manager(url).await?).build()
    }

    /// A [`ConnectionManager`] for `url` with settings suited to leases: 2 s
    /// connection and 5 s response timeouts, and after a dropped connection a single
    /// reconnect attempt per call (no backoff sleeps) before the call reports
    /// `Unavailable`. A lease call must fail fast rather than wait out its own ttl;
    /// the caller decides when to retry, and each retry reconnects again. (The
    /// `redis` crate's default backoff can keep a call waiting for minutes.)
    ///
    /// Errors: `InvalidParams` for a malformed URL, `Unavailable` when the server
    /// cannot be reached. Messages never contain the URL.
    pub async fn connection_manager(url: &str) -> Result<ConnectionManager, LeaseError> {
        let client =
            redis::Client::open(url).map_err(|_| LeaseError::invalid("redis url is not valid"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(0);
        ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| error::map("connect", e))
    }

    /// A directory on `conn` with default settings.
    pub fn new(conn: ConnectionManager) -> Self {
        Self {
            conn,
            prefix: DEFAULT_KEY_PREFIX.into(),
            gc_grace_ms: duration_millis(DEFAULT_GC_GRACE),
            clock: None,
            steps: Arc::new(StepGuard::new()),
            monotonic: Arc::new(SystemClock),
        }
    }

    /// Starts configuring a directory on `conn`.
    pub fn builder(conn: ConnectionManager) -> RedisDirectoryBuilder {
        RedisDirectoryBuilder {
            conn,
            prefix: DEFAULT_KEY_PREFIX.to_owned(),
            gc_grace: DEFAULT_GC_GRACE,
            clock: None,
        }
    }

    fn lease_key(&self, room_id: &str) -> String {
        format!("{}:lease:{room_id}", self.prefix)
    }

    fn epoch_key(&self) -> String {
        format!("{}:epoch", self.prefix)
    }

    fn node_key(&self, node_id: &str) -> String {
        format!("{}:node:{node_id}", self.prefix)
    }

    /// The clock argument of a script: `-1` for Redis's `TIME`, else the test
    /// clock's reading in ms.
    fn clock_arg(&self) -> Result<String, LeaseError> {
        match &self.clock {
            None => Ok("-1".to_owned()),
            Some(clock) => Ok(to_millis(clock.now(), "clock")?.to_string()),
        }
    }

    /// The monotonic reading of a lease script's call and its four step arguments
    /// (see `scripts::STEPS`).
    fn step_args(&self) -> (std::time::Duration, [String; 4]) {
        let mono = self.monotonic.monotonic();
        let seen = self.steps.expect(mono);
        let signed = |v: Option<u64>| v.map_or_else(|| "-1".to_owned(), |v| v.to_string());
        let args = [
            signed(seen.expected_ms),
            STEP_TOLERANCE_MS.to_string(),
            signed(seen.step.map(|s| s.wall_ms)),
            signed(seen.step.map(|s| s.elapsed_ms)),
        ];
        (mono, args)
    }

    /// Records the clock reading a lease script returned, taken at `mono`.
    fn observed(&self, now: &str, mono: std::time::Duration) -> Result<(), LeaseError> {
        self.steps
            .observe(parse_number(now, "clock reading")?, mono);
        Ok(())
    }
}

impl RedisDirectoryBuilder {
    /// Prefix of every key (default [`DEFAULT_KEY_PREFIX`]). Directories with
    /// different prefixes share nothing, epochs included. Keep a `{hash tag}` in it
    /// when running on Redis Cluster.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long a lease key outlives its lease (default [`DEFAULT_GC_GRACE`]): how long
    /// `lookup` still reports an expired lease (D7) before Redis deletes the key.
    pub fn gc_grace(mut self, grace: Duration) -> Self {
        self.gc_grace = grace;
        self
    }

    /// Judges leases and registrations on `clock` instead of Redis's `TIME`: for
    /// tests and simulations that move time by hand. Every directory sharing the
    /// keys must then use the same clock; in production leave it unset, so that
    /// Redis's one clock decides and node clocks cannot make two holders (D10).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Builds the directory. Errors: `InvalidParams` for an empty, over-long or
    /// control-character prefix, or a grace above [`MAX_TTL`].
    pub fn build(self) -> Result<RedisDirectory, LeaseError> {
        validate::id(&self.prefix, "key prefix", crate::MAX_ID_LEN)?;
        if self.gc_grace > MAX_TTL {
            return Err(LeaseError::invalid("gc grace is longer than ten years"));
        }
        Ok(RedisDirectory {
            conn: self.conn,
            prefix: self.prefix.into(),
            gc_grace_ms: duration_millis(self.gc_grace),
            monotonic: self.clock.clone().unwrap_or_else(|| Arc::new(SystemClock)),
            clock: self.clock,
            steps: Arc::new(StepGuard::new()),
        })
    }
}

fn duration_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn parse_number(raw: &str, what: &str) -> Result<u64, LeaseError> {
    raw.parse::<u64>()
        .map_err(|_| LeaseError::Corrupt(format!("redis: {what} is not a whole number")))
}

fn corrupt(op: &str) -> LeaseError {
    LeaseError::Corrupt(format!(
        "redis {op}: the record is not one this crate wrote"
    ))
}

/// A lease script's answer: `{status, node, token, epoch, left, now}`.
type Answer = (i64, String, String, String, String, String);

/// A lease a script reported as `{status, node, token, epoch, left, now}`.
fn reported(
    op: &str,
    (status, node_id, lease_token, epoch, left, _now): Answer,
) -> Result<Option<StoredLease>, LeaseError> {
    match status {
        0 if op == "read_lease" => Ok(None),
        0..=2 => Ok(Some(StoredLease {
            node_id,
            lease_token,
            epoch: parse_number(&epoch, "lease epoch")?,
            ttl_left_ms: parse_number(&left, "lease time left")?,
        })),
        -1 => Err(corrupt(op)),
        other => Err(LeaseError::backend(format!(
            "redis {op}: unexpected script status {other}"
        ))),
    }
}

#[async_trait]
impl LeaseBackend for RedisDirectory {
    async fn read_lease(&self, room_id: &str) -> Result<Option<StoredLease>, LeaseError> {
        let (mono, steps) = self.step_args();
        let answer: Answer = scripts::READ
            .key(self.lease_key(room_id))
            .arg(self.clock_arg()?)
            .arg(&steps)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| error::map("read_lease", e))?;
        self.observed(&answer.5, mono)?;
        reported("read_lease", answer)
    }

    async fn ensure_lease(
        &self,
        room_id: &str,
        node_id: &str,
        ttl_ms: u64,
    ) -> Result<StoredLease, LeaseError> {
        let (mono, steps) = self.step_args();
        let answer: Answer = scripts::ENSURE
            .key(self.lease_key(room_id))
            .key(self.epoch_key())
            .arg(node_id)
            .arg(ttl_ms.to_string())
            .arg(new_lease_token())
            .arg(self.gc_grace_ms.to_string())
            .arg(self.clock_arg()?)
            .arg(&steps)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| error::map("ensure_owner", e))?;
        self.observed(&answer.5, mono)?;
        reported("ensure_owner", answer)?.ok_or_else(|| corrupt("ensure_owner"))
    }

    async fn release_lease(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        let status: i64 = scripts::RELEASE
            .key(self.lease_key(room_id))
            .arg(node_id)
            .arg(lease_token)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| error::map("release_owner", e))?;
        match status {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(corrupt("release_owner")),
        }
    }

    async fn write_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl_ms: u64,
    ) -> Result<StoredNode, LeaseError> {
        let _: i64 = scripts::REGISTER
            .key(self.node_key(node_id))
            .arg(grpc_addr)
            .arg(ttl_ms.to_string())
            .arg(self.clock_arg()?)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| error::map("register_node", e))?;
        Ok(StoredNode {
            grpc_addr: grpc_addr.to_owned(),
            age_ms: 0,
            ttl_left_ms: ttl_ms,
        })
    }

    async fn read_node(&self, node_id: &str) -> Result<Option<StoredNode>, LeaseError> {
        let (status, grpc_addr, age, left): (i64, String, String, String) = scripts::READ_NODE
            .key(self.node_key(node_id))
            .arg(self.clock_arg()?)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| error::map("lookup_node", e))?;
        match status {
            0 => Ok(None),
            1 => Ok(Some(StoredNode {
                grpc_addr,
                age_ms: parse_number(&age, "registration age")?,
                ttl_left_ms: parse_number(&left, "registration time left")?,
            })),
            _ => Err(corrupt("lookup_node")),
        }
    }

    async fn delete_node(&self, node_id: &str) -> Result<(), LeaseError> {
        let _removed: i64 = self
            .conn
            .clone()
            .del(self.node_key(node_id))
            .await
            .map_err(|e| error::map("unregister_node", e))?;
        Ok(())
    }
}
