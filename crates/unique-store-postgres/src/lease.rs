//! [`PostgresDirectory`]: the room lease directory and node registry of `unique-lease` on
//! PostgreSQL, judged on the database server's clock.

use std::fmt;
use std::sync::Arc;

use deadpool_postgres::Object;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use unique_lease::{
    Clock, LeaseError, LeaseRow, LeaseRows, NodeDecision, NodeOp, NodeRow, NodeWrite, RoomDecision,
    RoomOp, RoomWrite, StepGuard, StoreNow, SweepCursor, SweepTable, Swept, SystemClock,
    async_trait, clock_millis,
};

use crate::error::Failure;
use crate::sql::Statements;
use crate::store::{Checkout, PostgresStore};

/// The default prefix of the directory's tables: `unique_lease_leases`,
/// `unique_lease_epoch` (a sequence) and `unique_lease_nodes`.
pub const DEFAULT_LEASE_PREFIX: &str = "unique_lease";

/// The name [`RoomOp::decide`] gives a corrupt record.
const STORE: &str = "postgres";

/// The database's clock in whole milliseconds since the Unix epoch (truncated), unless the
/// statement's clock parameter (`$n`) carries a test clock's reading.
macro_rules! now_ms {
    ($param:literal) => {
        concat!(
            "COALESCE(",
            $param,
            "::bigint, floor(extract(epoch from clock_timestamp()) * 1000)::bigint)"
        )
    };
}

/// A [`Directory`](unique_lease::Directory) and
/// [`NodeRegistry`](unique_lease::NodeRegistry) in PostgreSQL, on the pool (connection
/// settings, TLS, timeouts) of a [`PostgresStore`]. Cheap to clone.
///
/// # Storage
///
/// - `<prefix>_leases (room text PRIMARY KEY, node text, token text, epoch bigint,
///   expires_ms bigint)`: one row per held (or expired, not yet replaced) room; `expires_ms`
///   is in Unix milliseconds on **the database server's clock**. Every step reads that clock
///   (`clock_timestamp()`) in the statement that reads the row, so the callers' clocks never
///   decide who holds a room (D10). Expired rows stay until the room is granted again or
///   released, or a sweep deletes them once their grace has passed (D12).
/// - `<prefix>_epoch`: a sequence (`CACHE 1`, `NO CYCLE`) that every new holding of any room
///   takes its epoch from. A sequence never goes back, not on rollback, release or expiry, so
///   epochs strictly increase and are never issued twice (D4).
/// - `<prefix>_nodes (node text PRIMARY KEY, addr text, updated_ms bigint, expires_ms
///   bigint)`: the registrations, on the server's clock; an expired one is deleted when it
///   is next looked up or swept.
///
/// [`create_tables`](Self::create_tables) creates them (opt-in, like the session store's
/// `--create-table`); [`check`](Self::check) is the startup check.
///
/// # Atomicity
///
/// The directory is a [`LeaseRows`] backend: the lease rules are `unique-lease`'s
/// ([`RoomOp::decide`], [`NodeOp::decide`]); this file reads a row with the clock and writes
/// the decided row. Every operation that may write is one transaction: a
/// transaction-scoped advisory lock on the room or node (`pg_advisory_xact_lock`, keyed by
/// a fixed 64-bit FNV-1a hash of the table's name and the id), then the row `FOR UPDATE`
/// with the server's now, then the decided write (a grant draws its epoch from the sequence
/// in the statement that writes the row), then `COMMIT`. Concurrent writers of one room
/// queue on the lock, so of those racing for a free room exactly one grants and the others
/// see its lease (D8); the epoch is drawn under the lock, after every earlier holding of the
/// room committed, so it is greater than theirs. Two ids whose keys collide only wait for
/// each other. A lookup is one statement (row and clock together); a node lookup that finds
/// an expired registration redoes its step under the lock to delete it.
#[derive(Clone)]
pub struct PostgresDirectory {
    inner: Arc<Inner>,
}

struct Inner {
    store: PostgresStore,
    sql: LeaseStatements,
    /// `None`: the database's clock judges (production). `Some`: a test clock does.
    clock: Option<Arc<dyn Clock>>,
    steps: Steps,
    /// Where this directory's sweep stands (D12).
    cursor: SweepCursor,
}

/// Forward steps of the database server's clock (D11), noticed against this process's
/// monotonic clock (the test clock's, when one judges).
struct Steps {
    guard: StepGuard,
    monotonic: Arc<dyn Clock>,
}

impl Steps {
    /// The server's reading `now_ms`, observed just after its answer arrived.
    fn observe(&self, now_ms: u64) -> StoreNow {
        self.guard.observe(now_ms, self.monotonic.monotonic())
    }
}

impl fmt::Debug for PostgresDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresDirectory")
            .field("target", &self.inner.store.target())
            .field("leases", &self.inner.sql.leases)
            .field("test_clock", &self.inner.clock.is_some())
            .finish_non_exhaustive()
    }
}

/// Configures a [`PostgresDirectory`]; see [`PostgresDirectory::builder`].
#[must_use]
pub struct PostgresDirectoryBuilder {
    store: PostgresStore,
    prefix: String,
    clock: Option<Arc<dyn Clock>>,
}

impl fmt::Debug for PostgresDirectoryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresDirectoryBuilder")
            .field("store", &self.store)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl PostgresDirectoryBuilder {
    /// The prefix of the tables' names (`name` or `schema.name`; letters, digits, `_` and
    /// `-`, the whole name of each table within 63 bytes). Default [`DEFAULT_LEASE_PREFIX`].
    /// Directories with different prefixes share nothing, epochs included.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Judges leases and registrations on `clock` instead of the database's clock: for
    /// tests and simulations that move time by hand. Every directory on the tables must then
    /// use the same clock; in production leave it unset, so that the database's one clock
    /// decides and node clocks cannot make two holders (D10).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The directory. Opens no connection (see [`PostgresDirectory::check`]).
    ///
    /// # Errors
    ///
    /// `InvalidParams` when the prefix makes a table name that is not allowed.
    pub fn build(self) -> Result<PostgresDirectory, LeaseError> {
        Ok(PostgresDirectory {
            inner: Arc::new(Inner {
                sql: LeaseStatements::for_prefix(&self.prefix)?,
                store: self.store,
                steps: Steps {
                    guard: StepGuard::new(),
                    monotonic: self.clock.clone().unwrap_or_else(|| Arc::new(SystemClock)),
                },
                clock: self.clock,
                cursor: SweepCursor::new(),
            }),
        })
    }
}

impl PostgresDirectory {
    /// A builder for a directory on `store`'s database: it shares the store's connection
    /// pool (and so its URL, TLS setup, pool size and operation timeout). The store's own
    /// table is not touched; a store built only to reach the database is fine.
    pub fn builder(store: &PostgresStore) -> PostgresDirectoryBuilder {
        PostgresDirectoryBuilder {
            store: store.clone(),
            prefix: DEFAULT_LEASE_PREFIX.to_owned(),
            clock: None,
        }
    }

    /// A directory with the default prefix on the database at `url` (a libpq URL, with the
    /// store's defaults for the pool and timeouts), after the startup [`check`](Self::check).
    ///
    /// # Errors
    ///
    /// `InvalidParams` for a URL the store refuses; the check's errors.
    pub async fn connect(url: &str) -> Result<Self, LeaseError> {
        let store = PostgresStore::builder(url).build().map_err(lease_error)?;
        let directory = Self::builder(&store).build()?;
        directory.check().await?;
        Ok(directory)
    }

    /// The leases table, as a quoted SQL identifier.
    pub fn leases_table(&self) -> &str {
        &self.inner.sql.leases
    }

    /// The nodes table, as a quoted SQL identifier.
    pub fn nodes_table(&self) -> &str {
        &self.inner.sql.nodes
    }

    /// The epoch sequence, as a quoted SQL identifier.
    pub fn epoch_sequence(&self) -> &str {
        &self.inner.sql.epoch
    }

    /// Creates the two tables and the epoch sequence when they are missing (`IF NOT
    /// EXISTS`; an existing one is left as it is). Safe when several processes race. Needs
    /// the `CREATE` privilege on the schema.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the database cannot be reached or refuses the DDL.
    pub async fn create_tables(&self) -> Result<(), LeaseError> {
        let sql = &self.inner.sql;
        self.with_connection("create lease tables", |c| async move {
            // Concurrent `IF NOT EXISTS` creations of one name can still collide in the
            // catalog; the loser tries again and then finds the name taken.
            let mut attempt = 0;
            loop {
                match c.client().batch_execute(&sql.create).await {
                    Ok(()) => return Ok((c, Ok(()))),
                    Err(e)
                        if attempt < 3
                            && [
                                SqlState::DUPLICATE_TABLE,
                                SqlState::DUPLICATE_OBJECT,
                                SqlState::UNIQUE_VIOLATION,
                            ]
                            .iter()
                            .any(|code| e.code() == Some(code)) =>
                    {
                        attempt += 1;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        })
        .await
    }

    /// The startup check: the database answers, on a primary, the two tables and the epoch
    /// sequence exist (the sequence with `CACHE 1` and without `CYCLE`, which D4 needs), and
    /// every statement prepares (so a table of the wrong shape is found here).
    ///
    /// # Errors
    ///
    /// `Unavailable` naming what is missing or wrong, and how to create the tables.
    pub async fn check(&self) -> Result<(), LeaseError> {
        let sql = &self.inner.sql;
        self.with_connection("lease startup check", |c| async move {
            let row = c
                .client()
                .query_one(INSPECT, &[&sql.leases, &sql.nodes, &sql.epoch])
                .await?;
            let found = (|| {
                Ok::<_, LeaseError>(Inspection {
                    leases: get(&row, 0, "leases table")?,
                    nodes: get(&row, 1, "nodes table")?,
                    epoch: get(&row, 2, "epoch sequence")?,
                    cache: get(&row, 3, "sequence cache")?,
                    cycle: get(&row, 4, "sequence cycle")?,
                    standby: get(&row, 5, "pg_is_in_recovery")?,
                })
            })();
            let verdict = found.and_then(|found| verdict(sql, &found));
            if verdict.is_err() {
                return Ok((c, verdict));
            }
            // A leases table an older build created lacks `ttl_ms` (D11): add it, or say how.
            let has_ttl: bool = c.client().query_one(HAS_TTL, &[&sql.leases]).await?.get(0);
            if !has_ttl && let Err(e) = c.client().batch_execute(&sql.add_ttl).await {
                let why = unavailable(format!(
                    "postgres lease table {} lacks the ttl_ms column this version needs, and \
                     adding it failed ({e}): run as the table's owner: {}",
                    sql.leases, sql.add_ttl
                ));
                return Ok((c, Err(why)));
            }
            for statement in sql.all() {
                c.client().prepare_cached(statement).await?;
            }
            Ok((c, Ok(())))
        })
        .await
    }

    /// The test clock's reading in ms, or `None` for the database's clock.
    fn clock_param(&self) -> Result<Option<i64>, LeaseError> {
        self.inner
            .clock
            .as_deref()
            .map(|clock| clock_millis(clock).map(to_i64))
            .transpose()
    }

    /// Runs `op` on a pooled connection of the store (bounded by its operation timeout; a
    /// connection whose call failed is closed). `op` answers `Ok` with its own verdict, a
    /// driver failure with `Err`.
    async fn with_connection<T, F, Fut>(&self, what: &str, op: F) -> Result<T, LeaseError>
    where
        F: FnOnce(Checkout) -> Fut,
        Fut: Future<Output = Result<(Checkout, Result<T, LeaseError>), Failure>>,
    {
        self.inner
            .store
            .with_connection(what, op)
            .await
            .map_err(lease_error)?
    }
}

/// The statement texts for one prefix.
#[derive(Debug)]
struct LeaseStatements {
    leases: String,
    nodes: String,
    epoch: String,
    /// `$1` room, `$2` clock → one row `now, node, token, epoch, expires_ms, ttl_ms` (the room's
    /// columns NULL when it has no lease).
    read: String,
    /// As `read`, the row locked.
    lock_read: String,
    /// `$1` room, `$2` node, `$3` token, `$4` expiry, `$5` ttl → the epoch drawn.
    grant: String,
    /// `$1` room, `$2` expiry, `$3` ttl.
    extend: String,
    /// Adds `ttl_ms` (D11) to a leases table an older build created.
    add_ttl: String,
    /// `$1` room.
    delete: String,
    /// `$1` node, `$2` clock → one row `now, addr, updated_ms, expires_ms` (the node's
    /// columns NULL when it has no registration).
    read_node: String,
    /// As `read_node`, the row locked.
    lock_read_node: String,
    /// `$1` node, `$2` addr, `$3` updated_ms, `$4` expires_ms.
    put_node: String,
    /// `$1` node.
    delete_node: String,
    /// `$1` the key to start after, `$2` how many, `$3` clock → rows `now, room, node,
    /// token, epoch, expires_ms, ttl_ms` in key order (one row of NULLs but `now` when
    /// there are none).
    sweep_rooms: String,
    /// `$1` rooms, `$2` tokens, `$3` expiries: deletes each row still at that version.
    sweep_delete_rooms: String,
    /// As `sweep_rooms`: `now, node, addr, updated_ms, expires_ms`.
    sweep_nodes: String,
    /// `$1` nodes, `$2` updated, `$3` expiries: as `sweep_delete_rooms`.
    sweep_delete_nodes: String,
    /// The tables and the sequence, `IF NOT EXISTS`.
    create: String,
}

impl LeaseStatements {
    fn for_prefix(prefix: &str) -> Result<Self, LeaseError> {
        if prefix.rsplit('.').next().is_none_or(str::is_empty) {
            return Err(LeaseError::invalid(
                "postgres lease table prefix must not be empty",
            ));
        }
        // The session store's rules for a table name (and its quoting).
        let quoted = |suffix: &str| {
            Statements::for_table(&format!("{prefix}{suffix}"))
                .map(|sql| sql.table)
                .map_err(|_| {
                    LeaseError::invalid(
                        "postgres lease table prefix must be NAME or SCHEMA.NAME of letters, \
                         digits, '_' and '-' (each table name at most 63 bytes)",
                    )
                })
        };
        let leases = quoted("_leases")?;
        let nodes = quoted("_nodes")?;
        let epoch = quoted("_epoch")?;
        // One row: the clock's now, then `columns` of the row whose `key` is `$1` (NULL when
        // there is none), `$2` the clock parameter; `lock` is empty or ` FOR UPDATE`.
        let with_now = |table: &str, key: &str, columns: &str, lock: &str| {
            format!(
                "SELECT n.now, r.* FROM (SELECT {} AS now) n LEFT JOIN LATERAL \
                 (SELECT {columns} FROM {table} WHERE {key} = $1{lock}) r ON true",
                now_ms!("$2")
            )
        };
        let [
            sweep_rooms,
            sweep_delete_rooms,
            sweep_nodes,
            sweep_delete_nodes,
        ] = sweep_statements(&leases, &nodes);
        // The quoted name holds no `'` (only letters, digits, `_`, `-`, `.` and `"`).
        let nextval = format!("nextval('{epoch}'::regclass)");
        Ok(Self {
            read: with_now(
                &leases,
                "room",
                "node, token, epoch, expires_ms, ttl_ms",
                "",
            ),
            lock_read: with_now(
                &leases,
                "room",
                "node, token, epoch, expires_ms, ttl_ms",
                " FOR UPDATE",
            ),
            grant: format!(
                "INSERT INTO {leases} AS l (room, node, token, epoch, expires_ms, ttl_ms) \
                 VALUES ($1, $2, $3, {nextval}, $4::bigint, $5::bigint) \
                 ON CONFLICT (room) DO UPDATE SET node = excluded.node, token = excluded.token, \
                 epoch = excluded.epoch, expires_ms = excluded.expires_ms, \
                 ttl_ms = excluded.ttl_ms RETURNING l.epoch"
            ),
            extend: format!(
                "UPDATE {leases} SET expires_ms = $2::bigint, ttl_ms = $3::bigint WHERE room = $1"
            ),
            add_ttl: format!("ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS ttl_ms bigint"),
            delete: format!("DELETE FROM {leases} WHERE room = $1"),
            read_node: with_now(&nodes, "node", "addr, updated_ms, expires_ms", ""),
            lock_read_node: with_now(
                &nodes,
                "node",
                "addr, updated_ms, expires_ms",
                " FOR UPDATE",
            ),
            put_node: format!(
                "INSERT INTO {nodes} (node, addr, updated_ms, expires_ms) \
                 VALUES ($1, $2, $3::bigint, $4::bigint) \
                 ON CONFLICT (node) DO UPDATE SET addr = excluded.addr, \
                 updated_ms = excluded.updated_ms, expires_ms = excluded.expires_ms"
            ),
            delete_node: format!("DELETE FROM {nodes} WHERE node = $1"),
            sweep_rooms,
            sweep_delete_rooms,
            sweep_nodes,
            sweep_delete_nodes,
            create: format!(
                "CREATE TABLE IF NOT EXISTS {leases} (room text PRIMARY KEY, \
                 node text NOT NULL, token text NOT NULL, epoch bigint NOT NULL, \
                 expires_ms bigint NOT NULL, ttl_ms bigint); \
                 ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS ttl_ms bigint; \
                 CREATE SEQUENCE IF NOT EXISTS {epoch} AS bigint MINVALUE 1 START 1 CACHE 1 \
                 NO CYCLE; \
                 CREATE TABLE IF NOT EXISTS {nodes} (node text PRIMARY KEY, \
                 addr text NOT NULL, updated_ms bigint NOT NULL, expires_ms bigint NOT NULL)"
            ),
            leases,
            nodes,
            epoch,
        })
    }

    /// Every statement an operation prepares.
    fn all(&self) -> [&str; 13] {
        [
            &self.sweep_rooms,
            &self.sweep_delete_rooms,
            &self.sweep_nodes,
            &self.sweep_delete_nodes,
            &self.read,
            &self.lock_read,
            &self.grant,
            &self.extend,
            &self.delete,
            &self.read_node,
            &self.lock_read_node,
            &self.put_node,
            &self.delete_node,
        ]
    }

    /// The advisory lock key of `room`: 64-bit FNV-1a of the leases table's name, a `/`,
    /// and the room. Fixed forever: every process on the tables must compute the same key.
    fn lock_key(&self, room_id: &str) -> i64 {
        fnv1a(&self.leases, room_id)
    }

    /// The advisory lock key of `node`: as [`lock_key`](Self::lock_key), with the nodes
    /// table's name.
    fn node_lock_key(&self, node_id: &str) -> i64 {
        fnv1a(&self.nodes, node_id)
    }
}

/// The sweep's statements (D12) on the quoted `leases` and `nodes` tables: `sweep_rooms`,
/// `sweep_delete_rooms`, `sweep_nodes`, `sweep_delete_nodes` (see [`LeaseStatements`]).
fn sweep_statements(leases: &str, nodes: &str) -> [String; 4] {
    [
        format!(
            "SELECT n.now, r.* FROM (SELECT {} AS now) n LEFT JOIN LATERAL \
             (SELECT room, node, token, epoch, expires_ms, ttl_ms FROM {leases} \
             WHERE room > $1 ORDER BY room LIMIT $2) r ON true",
            now_ms!("$3")
        ),
        format!(
            "DELETE FROM {leases} l USING unnest($1::text[], $2::text[], $3::bigint[]) \
             AS d(room, token, expires_ms) WHERE l.room = d.room AND l.token = d.token \
             AND l.expires_ms = d.expires_ms"
        ),
        format!(
            "SELECT n.now, r.* FROM (SELECT {} AS now) n LEFT JOIN LATERAL \
             (SELECT node, addr, updated_ms, expires_ms FROM {nodes} \
             WHERE node > $1 ORDER BY node LIMIT $2) r ON true",
            now_ms!("$3")
        ),
        format!(
            "DELETE FROM {nodes} x USING unnest($1::text[], $2::bigint[], $3::bigint[]) \
             AS d(node, updated_ms, expires_ms) WHERE x.node = d.node \
             AND x.updated_ms = d.updated_ms AND x.expires_ms = d.expires_ms"
        ),
    ]
}

/// 64-bit FNV-1a of `table`, a `/` and `id`.
fn fnv1a(table: &str, id: &str) -> i64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = table.bytes().chain(*b"/").chain(id.bytes());
    let hash = bytes.fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// What the startup check reads: whether each relation exists (the sequence as a sequence),
/// the sequence's cache and cycle, and whether the server is a standby.
const INSPECT: &str = "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL, \
     s.seqrelid IS NOT NULL, COALESCE(s.seqcache, 1), COALESCE(s.seqcycle, false), \
     pg_is_in_recovery() \
     FROM (SELECT 1) one LEFT JOIN pg_sequence s ON s.seqrelid = to_regclass($3)";

/// Whether the leases table (`$1`) has the `ttl_ms` column.
const HAS_TTL: &str = "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) \
     AND attname = 'ttl_ms' AND NOT attisdropped)";

/// What [`INSPECT`] found.
#[allow(clippy::struct_excessive_bools)] // one field per independent fact of the row
struct Inspection {
    leases: bool,
    nodes: bool,
    epoch: bool,
    cache: i64,
    cycle: bool,
    standby: bool,
}

fn verdict(sql: &LeaseStatements, found: &Inspection) -> Result<(), LeaseError> {
    if found.standby {
        return Err(unavailable(
            "postgres server is a read-only standby: point the url at the primary",
        ));
    }
    let missing: Vec<&str> = [
        (found.leases, sql.leases.as_str()),
        (found.epoch, sql.epoch.as_str()),
        (found.nodes, sql.nodes.as_str()),
    ]
    .into_iter()
    .filter(|(exists, _)| !exists)
    .map(|(_, name)| name)
    .collect();
    if !missing.is_empty() {
        return Err(unavailable(format!(
            "postgres lease tables are missing: {} (the epoch counter is a sequence): create \
             them with create_tables() (the server's --create-table) or by hand: {}",
            missing.join(", "),
            sql.create
        )));
    }
    if found.cache != 1 || found.cycle {
        return Err(unavailable(format!(
            "postgres sequence {} must have CACHE 1 and NO CYCLE, or epochs drawn by different \
             connections could go backwards: ALTER SEQUENCE {} CACHE 1 NO CYCLE",
            sql.epoch, sql.epoch
        )));
    }
    Ok(())
}

fn unavailable(reason: impl Into<String>) -> LeaseError {
    LeaseError::Unavailable {
        reason: reason.into(),
        source: None,
    }
}

/// The session store's error (every driver and pool failure is `Unavailable` there) as a
/// lease error.
fn lease_error(e: unique_core::Error) -> LeaseError {
    match e {
        unique_core::Error::InvalidParams(reason) => LeaseError::InvalidParams(reason),
        unique_core::Error::Unavailable { reason, source } => {
            LeaseError::Unavailable { reason, source }
        }
        other => LeaseError::backend_with("postgres", other),
    }
}

/// Column `idx` of `row`; a NULL or a value of another type is a record this crate did not
/// write.
fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    idx: usize,
    what: &str,
) -> Result<T, LeaseError> {
    row.try_get(idx)
        .map_err(|e| LeaseError::Corrupt(format!("postgres lease record: {what}: {e}")))
}

/// A stored number that must not be negative.
fn whole(value: i64, what: &str) -> Result<u64, LeaseError> {
    u64::try_from(value)
        .map_err(|_| LeaseError::Corrupt(format!("postgres lease record: {what} is negative")))
}

/// Every value this crate sends fits: times below 2^52 ms, ttls below ten years.
fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The clock column of a step's row: the database's (or the test clock's) now.
fn now_of(row: &Row) -> Result<u64, LeaseError> {
    let now: i64 = get(row, 0, "now")?;
    u64::try_from(now)
        .map_err(|_| LeaseError::invalid("the postgres clock is before the unix epoch"))
}

/// A `read`/`lock_read` row: the clock, and the room's row unless it has none.
fn lease_row(row: &Row) -> Result<(u64, Option<LeaseRow>), LeaseError> {
    let now = now_of(row)?;
    // The columns are NOT NULL: a NULL node is the outer join finding no row.
    let Some(node_id) = get::<Option<String>>(row, 1, "node")? else {
        return Ok((now, None));
    };
    let lease = LeaseRow {
        node_id,
        lease_token: get(row, 2, "token")?,
        epoch: whole(get(row, 3, "epoch")?, "epoch")?,
        expires_ms: whole(get(row, 4, "expires_ms")?, "expires_ms")?,
        // NULL in a row an older build wrote: unknown (D11).
        ttl_ms: get::<Option<i64>>(row, 5, "ttl_ms")?
            .map(|ttl| whole(ttl, "ttl_ms"))
            .transpose()?,
    };
    Ok((now, Some(lease)))
}

/// A `read_node`/`lock_read_node` row: the clock, and the registration unless there is none.
fn node_row(row: &Row) -> Result<(u64, Option<NodeRow>), LeaseError> {
    let now = now_of(row)?;
    let Some(grpc_addr) = get::<Option<String>>(row, 1, "addr")? else {
        return Ok((now, None));
    };
    let node = NodeRow {
        grpc_addr,
        updated_ms: whole(get(row, 2, "updated_ms")?, "updated_ms")?,
        expires_ms: whole(get(row, 3, "expires_ms")?, "expires_ms")?,
    };
    Ok((now, Some(node)))
}

/// Why a step inside a transaction stopped.
enum Step {
    /// The driver failed: the connection is closed.
    Pg(tokio_postgres::Error),
    /// A stored record is not one this crate wrote: the transaction rolls back.
    Lease(LeaseError),
}

impl From<tokio_postgres::Error> for Step {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Pg(e)
    }
}

impl From<LeaseError> for Step {
    fn from(e: LeaseError) -> Self {
        Self::Lease(e)
    }
}

/// Runs `step` (not polled before the lock is held) in a transaction holding the advisory
/// lock `key`, and commits; a record this crate did not write rolls it back and is the
/// answer; a driver failure is `Err`, and the caller drops the connection (the server
/// rolls back).
async fn locked<T>(
    client: &Object,
    key: i64,
    step: impl Future<Output = Result<T, Step>>,
) -> Result<Result<T, LeaseError>, tokio_postgres::Error> {
    // One round trip: the transaction and the lock. The key is a quoted literal: unquoted,
    // i64::MIN would parse as the negation of a numeric.
    client
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock('{key}'::bigint)"
        ))
        .await?;
    match step.await {
        Ok(done) => {
            client.batch_execute("COMMIT").await?;
            Ok(Ok(done))
        }
        Err(Step::Lease(e)) => {
            client.batch_execute("ROLLBACK").await?;
            Ok(Err(e))
        }
        Err(Step::Pg(e)) => Err(e),
    }
}

/// The room's step under its lock: the row (locked) with the clock, the decision, the
/// decided write with the epoch drawn for a grant.
async fn room_locked(
    client: &Object,
    sql: &LeaseStatements,
    room_id: &str,
    op: &RoomOp,
    (clock, steps): (Option<i64>, &Steps),
) -> Result<(RoomDecision, Option<u64>), Step> {
    let statement = client.prepare_cached(&sql.lock_read).await?;
    let (now, row) = lease_row(&client.query_one(&statement, &[&room_id, &clock]).await?)?;
    let decision = op.decide(row, steps.observe(now), STORE)?;
    let epoch = match &decision.write {
        RoomWrite::Nothing => None,
        RoomWrite::Grant(grant) => {
            // D4: the epoch comes from the sequence, in the statement that writes the row.
            let statement = client.prepare_cached(&sql.grant).await?;
            let (expires, ttl) = (to_i64(grant.expires_ms), to_i64(grant.ttl_ms));
            let row = client
                .query_one(
                    &statement,
                    &[&room_id, &grant.node_id, &grant.lease_token, &expires, &ttl],
                )
                .await?;
            Some(whole(get(&row, 0, "epoch")?, "epoch")?)
        }
        RoomWrite::Extend { expires_ms, ttl_ms } => {
            let statement = client.prepare_cached(&sql.extend).await?;
            let ttl = ttl_ms.map(to_i64);
            client
                .execute(&statement, &[&room_id, &to_i64(*expires_ms), &ttl])
                .await?;
            None
        }
        RoomWrite::Delete => {
            let statement = client.prepare_cached(&sql.delete).await?;
            client.execute(&statement, &[&room_id]).await?;
            None
        }
    };
    Ok((decision, epoch))
}

/// The registration's step under its lock, as [`room_locked`].
async fn node_locked(
    client: &Object,
    sql: &LeaseStatements,
    node_id: &str,
    op: &NodeOp,
    clock: Option<i64>,
) -> Result<NodeDecision, Step> {
    let statement = client.prepare_cached(&sql.lock_read_node).await?;
    let (now, row) = node_row(&client.query_one(&statement, &[&node_id, &clock]).await?)?;
    let decision = op.decide(row, now);
    match &decision.write {
        NodeWrite::Nothing => {}
        NodeWrite::Put(row) => {
            let statement = client.prepare_cached(&sql.put_node).await?;
            let times = (to_i64(row.updated_ms), to_i64(row.expires_ms));
            client
                .execute(&statement, &[&node_id, &row.grpc_addr, &times.0, &times.1])
                .await?;
        }
        NodeWrite::Delete => {
            let statement = client.prepare_cached(&sql.delete_node).await?;
            client.execute(&statement, &[&node_id]).await?;
        }
    }
    Ok(decision)
}

/// A row a sweep deletes, at the version it read: the key, and the token (rooms) or
/// `updated_ms` (nodes) with the expiry.
struct Doomed {
    key: String,
    token: String,
    updated_ms: i64,
    expires_ms: i64,
}

/// A sweep batch's keys as read, and the rows the rules call sweepable.
type SweepBatch = (Vec<String>, Vec<Doomed>);

/// The rows of a `sweep_rooms` / `sweep_nodes` answer, judged by the rules at its clock
/// reading (D12).
fn sweep_batch(
    rows: &[Row],
    table: SweepTable,
    steps: &Steps,
    grace_ms: u64,
) -> Result<SweepBatch, LeaseError> {
    let Some(first) = rows.first() else {
        return Ok((Vec::new(), Vec::new()));
    };
    let now = steps.observe(now_of(first)?);
    let (mut keys, mut doomed) = (Vec::new(), Vec::new());
    for row in rows {
        let Some(key) = get::<Option<String>>(row, 1, "key")? else {
            continue;
        };
        let (sweepable, version) = match table {
            SweepTable::Rooms => {
                let lease = LeaseRow {
                    node_id: get(row, 2, "node")?,
                    lease_token: get(row, 3, "token")?,
                    epoch: whole(get(row, 4, "epoch")?, "epoch")?,
                    expires_ms: whole(get(row, 5, "expires_ms")?, "expires_ms")?,
                    ttl_ms: get::<Option<i64>>(row, 6, "ttl_ms")?
                        .map(|ttl| whole(ttl, "ttl_ms"))
                        .transpose()?,
                };
                let version = (lease.lease_token.clone(), 0, to_i64(lease.expires_ms));
                (lease.sweepable(&now, grace_ms), version)
            }
            SweepTable::Nodes => {
                let updated: i64 = get(row, 3, "updated_ms")?;
                let node = NodeRow {
                    grpc_addr: get(row, 2, "addr")?,
                    updated_ms: whole(updated, "updated_ms")?,
                    expires_ms: whole(get(row, 4, "expires_ms")?, "expires_ms")?,
                };
                let version = (String::new(), updated, to_i64(node.expires_ms));
                (node.sweepable(now.ms, grace_ms), version)
            }
        };
        if sweepable {
            doomed.push(Doomed {
                key: key.clone(),
                token: version.0,
                updated_ms: version.1,
                expires_ms: version.2,
            });
        }
        keys.push(key);
    }
    Ok((keys, doomed))
}

/// Deletes the rows of `doomed` still at the version read (compare and delete: a row
/// granted, renewed or registered again since stays), in one statement.
async fn sweep_delete(
    client: &Object,
    sql: &LeaseStatements,
    table: SweepTable,
    doomed: Vec<Doomed>,
) -> Result<u64, tokio_postgres::Error> {
    if doomed.is_empty() {
        return Ok(0);
    }
    let expiries: Vec<i64> = doomed.iter().map(|d| d.expires_ms).collect();
    let updated: Vec<i64> = doomed.iter().map(|d| d.updated_ms).collect();
    let (keys, tokens): (Vec<String>, Vec<String>) =
        doomed.into_iter().map(|d| (d.key, d.token)).unzip();
    match table {
        SweepTable::Rooms => {
            let statement = client.prepare_cached(&sql.sweep_delete_rooms).await?;
            client
                .execute(&statement, &[&keys, &tokens, &expiries])
                .await
        }
        SweepTable::Nodes => {
            let statement = client.prepare_cached(&sql.sweep_delete_nodes).await?;
            client
                .execute(&statement, &[&keys, &updated, &expiries])
                .await
        }
    }
}

#[async_trait]
impl LeaseRows for PostgresDirectory {
    async fn room(
        &self,
        room_id: &str,
        op: RoomOp,
    ) -> Result<(RoomDecision, Option<u64>), LeaseError> {
        let clock = self.clock_param()?;
        let sql = &self.inner.sql;
        let steps = &self.inner.steps;
        let what = match op {
            RoomOp::Read => "read_lease",
            RoomOp::Ensure { .. } => "ensure_owner",
            RoomOp::Release { .. } => "release_owner",
        };
        let op = &op;
        self.with_connection(what, |c| async move {
            if matches!(op, RoomOp::Read) {
                // One statement, no lock: a decision that writes nothing is answered.
                let statement = c.client().prepare_cached(&sql.read).await?;
                let row = c
                    .client()
                    .query_one(&statement, &[&room_id, &clock])
                    .await?;
                let decided = lease_row(&row)
                    .and_then(|(now, row)| op.decide(row, steps.observe(now), STORE));
                match decided {
                    Ok(decision) if decision.write == RoomWrite::Nothing => {
                        return Ok((c, Ok((decision, None))));
                    }
                    Err(e) => return Ok((c, Err(e))),
                    Ok(_) => {}
                }
            }
            let step = room_locked(c.client(), sql, room_id, op, (clock, steps));
            let answer = locked(c.client(), sql.lock_key(room_id), step).await?;
            Ok((c, answer))
        })
        .await
    }

    async fn node(&self, node_id: &str, op: NodeOp) -> Result<NodeDecision, LeaseError> {
        let clock = self.clock_param()?;
        let sql = &self.inner.sql;
        let what = match op {
            NodeOp::Read => "lookup_node",
            NodeOp::Write { .. } => "register_node",
            NodeOp::Delete => "unregister_node",
        };
        let op = &op;
        self.with_connection(what, |c| async move {
            if matches!(op, NodeOp::Read) {
                // One statement, no lock, unless the decision writes (an expired
                // registration to delete): then the step again under the lock.
                let statement = c.client().prepare_cached(&sql.read_node).await?;
                let row = c
                    .client()
                    .query_one(&statement, &[&node_id, &clock])
                    .await?;
                match node_row(&row).map(|(now, row)| op.decide(row, now)) {
                    Ok(decision) if decision.write == NodeWrite::Nothing => {
                        return Ok((c, Ok(decision)));
                    }
                    Err(e) => return Ok((c, Err(e))),
                    Ok(_) => {}
                }
            }
            let step = node_locked(c.client(), sql, node_id, op, clock);
            let answer = locked(c.client(), sql.node_lock_key(node_id), step).await?;
            Ok((c, answer))
        })
        .await
    }

    /// Two statements, no transaction and no lock held between them: the batch read with
    /// the server's clock, then one compare-and-delete of the rows the rules call sweepable.
    async fn sweep(&self, grace_ms: u64, limit: usize) -> Result<Swept, LeaseError> {
        let clock = self.clock_param()?;
        let (sql, steps) = (&self.inner.sql, &self.inner.steps);
        let (table, after) = self.inner.cursor.position();
        let after = after.unwrap_or_default();
        let count = i64::try_from(limit).unwrap_or(i64::MAX);
        let (keys, deleted) = self
            .with_connection("sweep", |c| async move {
                let read = match table {
                    SweepTable::Rooms => &sql.sweep_rooms,
                    SweepTable::Nodes => &sql.sweep_nodes,
                };
                let statement = c.client().prepare_cached(read).await?;
                let rows = c
                    .client()
                    .query(&statement, &[&after, &count, &clock])
                    .await?;
                let (keys, doomed) = match sweep_batch(&rows, table, steps, grace_ms) {
                    Ok(batch) => batch,
                    Err(e) => return Ok((c, Err(e))),
                };
                let deleted = sweep_delete(c.client(), sql, table, doomed).await?;
                Ok((c, Ok((keys, deleted))))
            })
            .await?;
        let deleted = usize::try_from(deleted).unwrap_or(usize::MAX);
        let last = keys.last().cloned();
        Ok(self
            .inner
            .cursor
            .batch(table, last, (keys.len(), deleted), limit))
    }
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
