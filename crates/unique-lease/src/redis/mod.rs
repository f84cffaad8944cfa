//! The Redis backend.

mod error;
mod scripts;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::directory::{Directory, NodeRegistry, new_token};
use crate::error::LeaseError;
use crate::time::{Clock, MAX_TTL, SystemClock, from_millis, to_millis, ttl_millis};
use crate::types::{Lease, NodeRegistration};
use crate::validate;

/// Default key prefix. The braces are a Redis Cluster hash tag: every key of one
/// directory lands in one slot, which the scripts need (they touch a lease key and
/// the shared epoch counter together).
pub const DEFAULT_KEY_PREFIX: &str = "{unique-lease}";

/// Default time a lease key outlives its lease before Redis deletes it.
pub const DEFAULT_GC_GRACE: Duration = Duration::from_mins(1);

/// A [`Directory`] and [`NodeRegistry`] in Redis, over a [`ConnectionManager`]
/// (which reconnects by itself after a dropped connection; the call that saw the
/// drop fails with [`LeaseError::Unavailable`]). Cheap to clone.
///
/// # Storage
///
/// - `<prefix>:lease:<room_id>`: a hash `{node, token, epoch, exp}` (`exp` in Unix
///   milliseconds, the caller's clock). Ownership is decided **only** by `exp`
///   against the caller's `now`. The key also carries a Redis TTL of
///   `exp - now + gc_grace`, purely as garbage collection, so rooms nobody serves any
///   more do not accumulate. The grace keeps a lease key alive past its expiry even
///   when the caller's clock runs up to `gc_grace` behind Redis's; with a larger
///   skew a lease could vanish before its holder thinks it expired.
/// - `<prefix>:epoch`: the epoch counter, **without TTL**. Every new holding of any
///   room takes `INCR` of it, so epochs keep increasing after a lease key expired or
///   was released and are never issued twice (D4). One counter per directory (rather
///   than one per room) is what lets dead rooms leave nothing behind at all.
/// - `<prefix>:node:<node_id>`: a hash `{addr, updated, exp}` with a Redis TTL of
///   exactly the registration's ttl, judged on lookup against the directory's clock
///   as well.
///
/// Epoch fencing across a Redis restart needs Redis persistence (AOF): a server that
/// restarts empty starts the counter again at 1.
///
/// # Atomicity
///
/// `ensure_owner`, `release_owner` and `register_node` each run as one Lua script;
/// `lookup`, `verify_owner` and `lookup_node` are one `HMGET`; so every operation is
/// atomic (D8).
#[derive(Clone)]
pub struct RedisDirectory {
    conn: ConnectionManager,
    prefix: Arc<str>,
    gc_grace_ms: u64,
    clock: Arc<dyn Clock>,
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
    clock: Arc<dyn Clock>,
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
            clock: Arc::new(SystemClock),
        }
    }

    /// Starts configuring a directory on `conn`.
    pub fn builder(conn: ConnectionManager) -> RedisDirectoryBuilder {
        RedisDirectoryBuilder {
            conn,
            prefix: DEFAULT_KEY_PREFIX.to_owned(),
            gc_grace: DEFAULT_GC_GRACE,
            clock: Arc::new(SystemClock),
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

    async fn read_lease(&self, op: &str, room_id: &str) -> Result<Option<Lease>, LeaseError> {
        let fields: (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        ) = self
            .conn
            .clone()
            .hmget(self.lease_key(room_id), &["node", "token", "epoch", "exp"])
            .await
            .map_err(|e| error::map(op, e))?;
        match fields {
            (None, None, None, None) => Ok(None),
            (Some(node), Some(token), Some(epoch), Some(exp)) => {
                decode_lease(room_id, node, token, &epoch, &exp).map(Some)
            }
            _ => Err(LeaseError::Corrupt(format!(
                "redis {op}: lease record is missing fields"
            ))),
        }
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

    /// How long a lease key outlives its lease (default [`DEFAULT_GC_GRACE`]); see
    /// [`RedisDirectory`] for why it should exceed the clock skew between callers
    /// and Redis.
    pub fn gc_grace(mut self, grace: Duration) -> Self {
        self.gc_grace = grace;
        self
    }

    /// The clock node registrations are judged by (default [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Builds the directory. Errors: `InvalidParams` for an empty, over-long or
    /// control-character prefix, or a grace above [`MAX_TTL`].
    pub fn build(self) -> Result<RedisDirectory, LeaseError> {
        validate::id(&self.prefix, "key prefix")?;
        if self.gc_grace > MAX_TTL {
            return Err(LeaseError::invalid("gc grace is longer than ten years"));
        }
        Ok(RedisDirectory {
            conn: self.conn,
            prefix: self.prefix.into(),
            gc_grace_ms: duration_millis(self.gc_grace),
            clock: self.clock,
        })
    }
}

fn duration_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn parse_millis(raw: &str, what: &str) -> Result<u64, LeaseError> {
    raw.parse::<u64>()
        .map_err(|_| LeaseError::Corrupt(format!("{what} is not a whole number of milliseconds")))
}

fn decode_lease(
    room_id: &str,
    node_id: String,
    lease_token: String,
    epoch: &str,
    exp: &str,
) -> Result<Lease, LeaseError> {
    let epoch = epoch
        .parse::<u64>()
        .map_err(|_| LeaseError::Corrupt("lease epoch is not a whole number".into()))?;
    Ok(Lease {
        room_id: room_id.to_owned(),
        node_id,
        lease_token,
        epoch,
        expires_at: from_millis(parse_millis(exp, "lease expiry")?),
    })
}

#[async_trait]
impl Directory for RedisDirectory {
    async fn lookup(&self, room_id: &str) -> Result<Option<Lease>, LeaseError> {
        validate::id(room_id, "room_id")?;
        self.read_lease("lookup", room_id).await
    }

    async fn ensure_owner(
        &self,
        room_id: &str,
        node_id: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        validate::id(room_id, "room_id")?;
        validate::id(node_id, "node_id")?;
        let now_ms = to_millis(now, "now")?;
        let wanted_ms = now_ms + ttl_millis(ttl)?;
        let (status, node, token, epoch, exp): (i64, String, String, String, String) =
            scripts::ENSURE
                .key(self.lease_key(room_id))
                .key(self.epoch_key())
                .arg(node_id)
                .arg(now_ms.to_string())
                .arg(wanted_ms.to_string())
                .arg(new_token())
                .arg(self.gc_grace_ms.to_string())
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(|e| error::map("ensure_owner", e))?;
        match status {
            0..=2 => decode_lease(room_id, node, token, &epoch, &exp),
            -1 => Err(LeaseError::Corrupt(
                "redis ensure_owner: lease record is not one this crate wrote".into(),
            )),
            other => Err(LeaseError::backend(format!(
                "redis ensure_owner: unexpected script status {other}"
            ))),
        }
    }

    async fn verify_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
        now: SystemTime,
    ) -> Result<bool, LeaseError> {
        validate::id(room_id, "room_id")?;
        validate::id(node_id, "node_id")?;
        validate::token(lease_token)?;
        let now = from_millis(to_millis(now, "now")?);
        let lease = self.read_lease("verify_owner", room_id).await?;
        Ok(lease.is_some_and(|lease| lease.fences(node_id, lease_token, now)))
    }

    async fn release_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        validate::id(room_id, "room_id")?;
        validate::id(node_id, "node_id")?;
        validate::token(lease_token)?;
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
            _ => Err(LeaseError::Corrupt(
                "redis release_owner: lease record is not one this crate wrote".into(),
            )),
        }
    }
}

#[async_trait]
impl NodeRegistry for RedisDirectory {
    async fn register_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl: Duration,
    ) -> Result<NodeRegistration, LeaseError> {
        validate::id(node_id, "node_id")?;
        validate::addr(grpc_addr)?;
        let ttl_ms = ttl_millis(ttl)?;
        let now_ms = to_millis(self.clock.now(), "clock")?;
        let () = scripts::REGISTER
            .key(self.node_key(node_id))
            .arg(grpc_addr)
            .arg(now_ms.to_string())
            .arg((now_ms + ttl_ms).to_string())
            .arg(ttl_ms.to_string())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| error::map("register_node", e))?;
        Ok(NodeRegistration {
            node_id: node_id.to_owned(),
            grpc_addr: grpc_addr.to_owned(),
            updated_at: from_millis(now_ms),
            expires_at: from_millis(now_ms + ttl_ms),
        })
    }

    async fn lookup_node(&self, node_id: &str) -> Result<Option<NodeRegistration>, LeaseError> {
        validate::id(node_id, "node_id")?;
        let fields: (Option<String>, Option<String>, Option<String>) = self
            .conn
            .clone()
            .hmget(self.node_key(node_id), &["addr", "updated", "exp"])
            .await
            .map_err(|e| error::map("lookup_node", e))?;
        let registration = match fields {
            (None, None, None) => return Ok(None),
            (Some(grpc_addr), Some(updated), Some(exp)) => NodeRegistration {
                node_id: node_id.to_owned(),
                grpc_addr,
                updated_at: from_millis(parse_millis(&updated, "registration update time")?),
                expires_at: from_millis(parse_millis(&exp, "registration expiry")?),
            },
            _ => {
                return Err(LeaseError::Corrupt(
                    "redis lookup_node: registration record is missing fields".into(),
                ));
            }
        };
        Ok(registration
            .valid_at(self.clock.now())
            .then_some(registration))
    }

    async fn unregister_node(&self, node_id: &str) -> Result<(), LeaseError> {
        validate::id(node_id, "node_id")?;
        let _removed: i64 = self
            .conn
            .clone()
            .del(self.node_key(node_id))
            .await
            .map_err(|e| error::map("unregister_node", e))?;
        Ok(())
    }
}
