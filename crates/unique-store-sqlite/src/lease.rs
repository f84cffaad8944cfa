//! [`SqliteDirectory`]: the room lease directory and node registry of `unique-lease` in an
//! SQLite file, judged on the process's clock.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{
    Connection, MAIN_DB, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use unique_lease::{
    Clock, LeaseDump, LeaseError, LeaseRow, LeaseRows, NodeDecision, NodeOp, NodeRow, NodeWrite,
    RoomDecision, RoomOp, RoomWrite, StepGuard, SweepCursor, SweepTable, Swept, SystemClock,
    async_trait,
};

use crate::error::map_sqlite;
use crate::options::{DEFAULT_BUSY_TIMEOUT, Synchronous};
use crate::schema::check_path;

/// Marks a database file as a lease directory's (`PRAGMA application_id`, "uqls"), so
/// neither a session store nor this directory mistakes the other's file for its own.
const LEASE_APPLICATION_ID: i32 = 0x7571_6c73;

/// The lease schema version this build writes and understands (`PRAGMA user_version`).
/// Version 2 added `leases.ttl_ms` (D11); a version 1 file is migrated when opened.
const LEASE_SCHEMA_VERSION: i32 = 2;

/// Migrates a version 1 file: its rows keep a NULL ttl (unknown, judged on their expiry
/// alone until they are next written).
const MIGRATE_1_TO_2: &str = "ALTER TABLE leases ADD COLUMN ttl_ms INTEGER";

/// The tables of a new file. The epoch counter is one row that only ever grows.
const CREATE_TABLES: &str = "
CREATE TABLE leases (
    room       TEXT PRIMARY KEY NOT NULL,
    node       TEXT NOT NULL,
    token      TEXT NOT NULL,
    epoch      INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    ttl_ms     INTEGER
) WITHOUT ROWID;
CREATE TABLE lease_epoch (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
);
INSERT INTO lease_epoch (id, last) VALUES (1, 0);
CREATE TABLE nodes (
    node       TEXT PRIMARY KEY NOT NULL,
    addr       TEXT NOT NULL,
    updated_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;
";

const READ: &str = "SELECT node, token, epoch, expires_ms, ttl_ms FROM leases WHERE room = ?1";
const NEXT_EPOCH: &str = "UPDATE lease_epoch SET last = last + 1 WHERE id = 1 RETURNING last";
const GRANT: &str = "INSERT INTO leases (room, node, token, epoch, expires_ms, ttl_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
     ON CONFLICT (room) DO UPDATE SET node = excluded.node, token = excluded.token, \
     epoch = excluded.epoch, expires_ms = excluded.expires_ms, ttl_ms = excluded.ttl_ms";
const EXTEND: &str = "UPDATE leases SET expires_ms = ?2, ttl_ms = ?3 WHERE room = ?1";
const DELETE: &str = "DELETE FROM leases WHERE room = ?1";
const READ_NODE: &str = "SELECT addr, updated_ms, expires_ms FROM nodes WHERE node = ?1";
const PUT_NODE: &str = "INSERT INTO nodes (node, addr, updated_ms, expires_ms) \
     VALUES (?1, ?2, ?3, ?4) \
     ON CONFLICT (node) DO UPDATE SET addr = excluded.addr, \
     updated_ms = excluded.updated_ms, expires_ms = excluded.expires_ms";
const DELETE_NODE: &str = "DELETE FROM nodes WHERE node = ?1";
const LAST_EPOCH: &str = "SELECT last FROM lease_epoch WHERE id = 1";
const ALL_LEASES: &str =
    "SELECT room, node, token, epoch, expires_ms, ttl_ms FROM leases ORDER BY room";
const ALL_NODES: &str = "SELECT node, addr, updated_ms, expires_ms FROM nodes ORDER BY node";
/// A sweep's batch (D12): up to `?2` rows after the key `?1`, in key order (ids are never
/// empty, so `''` starts at the first).
const SWEEP_LEASES: &str = "SELECT room, node, token, epoch, expires_ms, ttl_ms FROM leases \
     WHERE room > ?1 ORDER BY room LIMIT ?2";
const SWEEP_NODES: &str = "SELECT node, addr, updated_ms, expires_ms FROM nodes \
     WHERE node > ?1 ORDER BY node LIMIT ?2";

/// The name [`RoomOp::decide`] gives a corrupt record.
const STORE: &str = "sqlite";

/// A [`Directory`](unique_lease::Directory) and
/// [`NodeRegistry`](unique_lease::NodeRegistry) in an SQLite file of its own (WAL,
/// `synchronous = FULL` by default). Cheap to clone.
///
/// **The process's clock judges**: expiry is decided on the directory's [`Clock`]
/// ([`SystemClock`] unless a test injects another), never on the callers' `now`
/// arguments (D10). Every process on one machine reads the same system clock, so
/// directories of several processes on one file agree on it.
///
/// # Storage
///
/// `leases (room, node, token, epoch, expires_ms)`, `nodes (node, addr, updated_ms,
/// expires_ms)` and `lease_epoch`, one row holding the last epoch issued: every new holding
/// of any room takes the next one in the transaction that writes it, so epochs strictly
/// increase and are never reused, whatever was released or expired (D4). Expired leases
/// stay until the room is granted again or released, or a sweep deletes them once their
/// grace has passed ([`LeaseRows::sweep`], D12); an expired registration is deleted when
/// it is next looked up or swept.
///
/// # The file
///
/// Give the directory a file of its own (say `leases.db` beside the session store's
/// file), not the session store's: the file is marked as a lease directory's
/// (`application_id`), and each refuses the other's file. Unlike
/// [`SqliteStore`](crate::SqliteStore), the directory takes no lock of its own on the
/// file: several directories, of one process or of several on one machine, may share a
/// lease file, and SQLite's locking serialises them. A network file system is not
/// supported.
///
/// # Atomicity
///
/// The directory is a [`LeaseRows`] backend: the lease rules are `unique-lease`'s
/// ([`RoomOp::decide`], [`NodeOp::decide`]); this file reads a row and the clock and writes
/// the decided row. Every operation that may write is one `BEGIN IMMEDIATE` transaction
/// (SQLite's write lock, so one writer at a time on the file): read the row, read the clock
/// (the lock is held by then), decide, write, commit. Of concurrent ensures on a free room
/// exactly one grants and the others see its lease (D8). A lease lookup is one read
/// transaction; a node lookup too, unless it finds an expired registration, which it then
/// deletes under the write lock.
///
/// Operations run on tokio's blocking pool, one at a time per directory on its one
/// connection; they need a tokio runtime.
#[derive(Clone)]
pub struct SqliteDirectory {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    clock: Arc<dyn Clock>,
    /// Forward steps of the clock (D11), per directory: each process sharing the file
    /// notices a step itself.
    steps: StepGuard,
    /// Where this directory's sweep stands (D12).
    cursor: SweepCursor,
    path: PathBuf,
}

impl std::fmt::Debug for SqliteDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteDirectory")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// Configures and opens a [`SqliteDirectory`]; see [`SqliteDirectory::builder`].
#[must_use]
pub struct SqliteDirectoryBuilder {
    path: PathBuf,
    clock: Arc<dyn Clock>,
    busy_timeout: Duration,
    synchronous: Synchronous,
}

impl std::fmt::Debug for SqliteDirectoryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteDirectoryBuilder")
            .field("path", &self.path)
            .field("busy_timeout", &self.busy_timeout)
            .field("synchronous", &self.synchronous)
            .finish_non_exhaustive()
    }
}

impl SqliteDirectoryBuilder {
    /// Judges leases and registrations on `clock` (default [`SystemClock`]): for tests and
    /// simulations that move time by hand. Every directory on the file must use the same
    /// clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How long an operation waits for another connection's write lock on the file before
    /// failing with `Unavailable` (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Commit durability; [`Synchronous::Full`] by default. Under
    /// [`Synchronous::Normal`] an OS crash or power loss can roll back the last grants,
    /// and their epochs would be issued again.
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Opens (creating when missing) the file and its tables. Blocks the calling thread,
    /// bounded by the busy timeout: call it at startup or inside `spawn_blocking`.
    ///
    /// # Errors
    ///
    /// `Unavailable` naming the path when the directory is missing, the file cannot be
    /// opened or written, is not an SQLite database, belongs to another application (a
    /// session store's file included) or to a newer build, or stays locked past the busy
    /// timeout.
    pub fn open(self) -> Result<SqliteDirectory, LeaseError> {
        let path = self.path.as_path();
        check_path(path).map_err(store_error)?;
        let failed = |e| opening(path, e);
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(failed)?;
        conn.busy_timeout(self.busy_timeout).map_err(failed)?;
        if conn.is_readonly(MAIN_DB).map_err(failed)? {
            return Err(refused(
                path,
                "the file is not writable (permission denied)",
            ));
        }
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(failed)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(refused(
                path,
                &format!("write-ahead logging is not available there (journal mode stayed {mode})"),
            ));
        }
        conn.pragma_update(None, "synchronous", self.synchronous.pragma_value())
            .map_err(failed)?;
        ensure_tables(&conn, path)?;
        Ok(SqliteDirectory {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                clock: self.clock,
                steps: StepGuard::new(),
                cursor: SweepCursor::new(),
                path: self.path,
            }),
        })
    }
}

/// Creates the tables in a new file, accepts a file of this directory, refuses anything
/// else; in one write transaction.
fn ensure_tables(conn: &Connection, path: &Path) -> Result<(), LeaseError> {
    let failed = |e| opening(path, e);
    conn.execute_batch("BEGIN IMMEDIATE").map_err(failed)?;
    let checked = (|| {
        let app_id: i32 = conn
            .pragma_query_value(None, "application_id", |row| row.get(0))
            .map_err(failed)?;
        let version: i32 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(failed)?;
        if app_id == LEASE_APPLICATION_ID {
            if version == 1 {
                conn.execute_batch(MIGRATE_1_TO_2).map_err(failed)?;
                conn.pragma_update(None, "user_version", LEASE_SCHEMA_VERSION)
                    .map_err(failed)?;
            }
            if version > LEASE_SCHEMA_VERSION {
                return Err(refused(
                    path,
                    &format!(
                        "lease schema version {version} is newer than this build supports \
                         ({LEASE_SCHEMA_VERSION})"
                    ),
                ));
            }
            return Ok(());
        }
        let objects: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
            .map_err(failed)?;
        if app_id != 0 || objects > 0 {
            return Err(refused(
                path,
                "it is an sqlite database of another application (a session store's file?): \
                 give the lease directory a file of its own",
            ));
        }
        conn.execute_batch(CREATE_TABLES).map_err(failed)?;
        conn.pragma_update(None, "application_id", LEASE_APPLICATION_ID)
            .map_err(failed)?;
        conn.pragma_update(None, "user_version", LEASE_SCHEMA_VERSION)
            .map_err(failed)?;
        Ok(())
    })();
    match checked {
        Ok(()) => conn.execute_batch("COMMIT").map_err(failed),
        Err(e) => {
            // Best effort: the connection is dropped right after anyway.
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

impl SqliteDirectory {
    /// Opens (creating when missing) the directory at `path` with the defaults: the system
    /// clock, a 5 s busy timeout, [`Synchronous::Full`]. Blocks; see
    /// [`SqliteDirectoryBuilder::open`].
    ///
    /// # Errors
    ///
    /// See [`SqliteDirectoryBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LeaseError> {
        Self::builder(path).open()
    }

    /// Starts configuring a directory at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteDirectoryBuilder {
        SqliteDirectoryBuilder {
            path: path.as_ref().to_path_buf(),
            clock: Arc::new(SystemClock),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            synchronous: Synchronous::Full,
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Everything the file holds: the last epoch issued, every lease row (expired ones
    /// included) and every node registration (likewise), read in one transaction. For
    /// moving a directory to another backend: `unique-server` imports an older build's lease
    /// file into its fjall store this way. Blocks the calling thread (on this directory's
    /// connection, then on SQLite's locks up to the busy timeout): call it at startup or
    /// inside `spawn_blocking`, not on an async worker.
    ///
    /// # Errors
    ///
    /// `Corrupt` when a stored value is not one this crate writes (see
    /// [`LeaseRow::check`]); `Unavailable` when the file cannot be read.
    pub fn export(&self) -> Result<LeaseDump, LeaseError> {
        let mut conn = self
            .inner
            .conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let exported = (|| -> Result<LeaseDump, Failure> {
            let tx = conn.transaction()?;
            let last_epoch = tx.query_row(LAST_EPOCH, [], |r| whole(r, 0))?;
            let leases = tx
                .prepare(ALL_LEASES)?
                .query_map([], |r| Ok((r.get(0)?, lease_row(r, 1)?)))?
                .collect::<rusqlite::Result<Vec<(String, LeaseRow)>>>()?;
            for (_, row) in &leases {
                row.check(STORE)?;
            }
            let nodes = tx
                .prepare(ALL_NODES)?
                .query_map([], |r| Ok((r.get(0)?, node_row(r, 1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(LeaseDump {
                last_epoch,
                leases,
                nodes,
            })
        })();
        exported.map_err(|failure| failure.into_error("export"))
    }

    /// Runs `step` on the connection on tokio's blocking pool, with the directory's clock.
    async fn run<T, F>(&self, what: &'static str, step: F) -> Result<T, LeaseError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Timing<'_>) -> Result<T, Failure> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            let timing = Timing {
                clock: &*inner.clock,
                steps: &inner.steps,
            };
            step(&mut conn, &timing).map_err(|failure| failure.into_error(what))
        })
        .await
        .map_err(|e| LeaseError::unavailable_with("sqlite lease task did not complete", e))?
    }
}

/// The directory's clock and its step guard, read together (D11).
struct Timing<'a> {
    clock: &'a dyn Clock,
    steps: &'a StepGuard,
}

impl Timing<'_> {
    fn now(&self) -> Result<unique_lease::StoreNow, LeaseError> {
        self.steps.read(self.clock)
    }
}

/// One read-decide-write step, atomically: `step` reads the row and the clock inside the
/// transaction it is given and decides; told it may write, it applies the decided write
/// and answers `Some`; told it may not, it answers `Some` only when the decision writes
/// nothing. A `read` first tries without SQLite's write lock (a deferred transaction, one
/// snapshot) and takes it only when its decision writes (an expired registration to
/// sweep); every other step runs in one `BEGIN IMMEDIATE` transaction, so the row cannot
/// change between the read, the clock reading and the write.
fn atomically<T>(
    conn: &mut Connection,
    read: bool,
    mut step: impl FnMut(&Transaction<'_>, bool) -> Result<Option<T>, Failure>,
) -> Result<T, Failure> {
    if read {
        // Dropped without a commit: it wrote nothing.
        let tx = conn.transaction()?;
        if let Some(done) = step(&tx, false)? {
            return Ok(done);
        }
    }
    // Dropped without a commit (an error, a corrupt record): rolled back.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let done = step(&tx, true)?.ok_or_else(|| {
        LeaseError::backend("sqlite lease step answered nothing under the write lock")
    })?;
    tx.commit()?;
    Ok(done)
}

/// Every value this crate stores fits: times below 2^52 ms, epochs from an `i64` counter.
fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Why an operation failed, before it becomes a [`LeaseError`].
#[derive(Debug)]
enum Failure {
    Sqlite(rusqlite::Error),
    Lease(LeaseError),
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sqlite(e)
    }
}

impl From<LeaseError> for Failure {
    fn from(e: LeaseError) -> Self {
        Self::Lease(e)
    }
}

impl Failure {
    /// The one mapping to [`LeaseError`]: a stored value of the wrong type is a record this
    /// crate did not write (`Corrupt`), every other SQLite failure `Unavailable` (with the
    /// session store's words for it).
    fn into_error(self, what: &str) -> LeaseError {
        match self {
            Self::Lease(e) => e,
            Self::Sqlite(
                e @ (rusqlite::Error::InvalidColumnType(..)
                | rusqlite::Error::FromSqlConversionFailure(..)
                | rusqlite::Error::IntegralValueOutOfRange(..)),
            ) => LeaseError::Corrupt(format!("sqlite {what}: {e}")),
            Self::Sqlite(e) => store_error(map_sqlite(what, e)),
        }
    }
}

/// The session store's error as a lease error (its SQLite failures are all `Unavailable`).
fn store_error(e: unique_core::Error) -> LeaseError {
    match e {
        unique_core::Error::InvalidParams(reason) => LeaseError::InvalidParams(reason),
        unique_core::Error::Unavailable { reason, source } => {
            LeaseError::Unavailable { reason, source }
        }
        other => LeaseError::backend_with("sqlite", other),
    }
}

fn opening(path: &Path, e: rusqlite::Error) -> LeaseError {
    store_error(map_sqlite(&format!("open of {}", path.display()), e))
}

fn refused(path: &Path, why: &str) -> LeaseError {
    LeaseError::Unavailable {
        reason: format!(
            "cannot open sqlite lease database {}: {why}",
            path.display()
        ),
        source: None,
    }
}

fn corrupt(what: &str) -> Failure {
    Failure::Lease(LeaseError::Corrupt(format!("sqlite lease record: {what}")))
}

/// Column `idx` as a number that is never negative (a negative one is out of range, which
/// [`Failure::into_error`] reports as `Corrupt`).
fn whole(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let value: i64 = row.get(idx)?;
    u64::try_from(value).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, value))
}

/// Columns `first..first + 5` of a lease row: `node, token, epoch, expires_ms, ttl_ms`
/// (NULL in a row an older build wrote).
fn lease_row(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<LeaseRow> {
    let ttl: Option<i64> = row.get(first + 4)?;
    let ttl_ms = ttl
        .map(|t| {
            u64::try_from(t).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(first + 4, t))
        })
        .transpose()?;
    Ok(LeaseRow {
        node_id: row.get(first)?,
        lease_token: row.get(first + 1)?,
        epoch: whole(row, first + 2)?,
        expires_ms: whole(row, first + 3)?,
        ttl_ms,
    })
}

/// Columns `first..first + 3` of a node row: `addr, updated_ms, expires_ms`.
fn node_row(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<NodeRow> {
    Ok(NodeRow {
        grpc_addr: row.get(first)?,
        updated_ms: whole(row, first + 1)?,
        expires_ms: whole(row, first + 2)?,
    })
}

/// The room's step in `tx`: its row, the clock, the decision, and (when `write`) the
/// decided write with the epoch drawn for a grant.
fn room_step(
    tx: &Transaction<'_>,
    timing: &Timing<'_>,
    room_id: &str,
    op: &RoomOp,
    write: bool,
) -> Result<Option<(RoomDecision, Option<u64>)>, Failure> {
    let row = tx
        .prepare_cached(READ)?
        .query_row([room_id], |r| lease_row(r, 0))
        .optional()?;
    let decision = op.decide(row, timing.now()?, STORE)?;
    let epoch = match &decision.write {
        RoomWrite::Nothing => None,
        _ if !write => return Ok(None),
        RoomWrite::Grant(grant) => {
            // D4: the counter row only grows, in the transaction that writes the holding.
            let epoch = tx
                .prepare_cached(NEXT_EPOCH)?
                .query_row([], |r| whole(r, 0))
                .optional()?;
            let epoch = epoch
                .filter(|epoch| *epoch > 0)
                .ok_or_else(|| corrupt("the epoch counter row is missing or not positive"))?;
            let row = grant.row(epoch);
            tx.prepare_cached(GRANT)?.execute(params![
                room_id,
                row.node_id,
                row.lease_token,
                to_i64(row.epoch),
                to_i64(row.expires_ms),
                row.ttl_ms.map(to_i64)
            ])?;
            Some(epoch)
        }
        RoomWrite::Extend { expires_ms, ttl_ms } => {
            tx.prepare_cached(EXTEND)?.execute(params![
                room_id,
                to_i64(*expires_ms),
                ttl_ms.map(to_i64)
            ])?;
            None
        }
        RoomWrite::Delete => {
            tx.prepare_cached(DELETE)?.execute([room_id])?;
            None
        }
    };
    Ok(Some((decision, epoch)))
}

/// The registration's step in `tx`, as [`room_step`].
fn node_step(
    tx: &Transaction<'_>,
    timing: &Timing<'_>,
    node_id: &str,
    op: &NodeOp,
    write: bool,
) -> Result<Option<NodeDecision>, Failure> {
    let row = tx
        .prepare_cached(READ_NODE)?
        .query_row([node_id], |r| node_row(r, 0))
        .optional()?;
    let decision = op.decide(row, timing.now()?.ms);
    match &decision.write {
        NodeWrite::Nothing => {}
        _ if !write => return Ok(None),
        NodeWrite::Put(row) => {
            tx.prepare_cached(PUT_NODE)?.execute(params![
                node_id,
                row.grpc_addr,
                to_i64(row.updated_ms),
                to_i64(row.expires_ms)
            ])?;
        }
        NodeWrite::Delete => {
            tx.prepare_cached(DELETE_NODE)?.execute([node_id])?;
        }
    }
    Ok(Some(decision))
}

/// A sweep's batch of `table` in `tx` (under the write lock): up to `limit` rows after
/// `after`, those the rules call sweepable at the clock deleted (D12). Answers how many
/// rows were examined, the last key, and how many were deleted.
fn sweep_step(
    tx: &Transaction<'_>,
    timing: &Timing<'_>,
    (table, after): (SweepTable, &str),
    grace_ms: u64,
    limit: usize,
) -> Result<(usize, Option<String>, usize), Failure> {
    let now = timing.now()?;
    let limit_param = i64::try_from(limit).unwrap_or(i64::MAX);
    let (keys, doomed): (Vec<String>, Vec<String>) = match table {
        SweepTable::Rooms => {
            let rows = tx
                .prepare_cached(SWEEP_LEASES)?
                .query_map(params![after, limit_param], |r| {
                    Ok((r.get::<_, String>(0)?, lease_row(r, 1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let doomed = rows
                .iter()
                .filter(|(_, row)| row.sweepable(&now, grace_ms))
                .map(|(key, _)| key.clone())
                .collect();
            (rows.into_iter().map(|(key, _)| key).collect(), doomed)
        }
        SweepTable::Nodes => {
            let rows = tx
                .prepare_cached(SWEEP_NODES)?
                .query_map(params![after, limit_param], |r| {
                    Ok((r.get::<_, String>(0)?, node_row(r, 1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let doomed = rows
                .iter()
                .filter(|(_, row)| row.sweepable(now.ms, grace_ms))
                .map(|(key, _)| key.clone())
                .collect();
            (rows.into_iter().map(|(key, _)| key).collect(), doomed)
        }
    };
    let delete = match table {
        SweepTable::Rooms => DELETE,
        SweepTable::Nodes => DELETE_NODE,
    };
    let mut statement = tx.prepare_cached(delete)?;
    for key in &doomed {
        statement.execute([key])?;
    }
    Ok((keys.len(), keys.last().cloned(), doomed.len()))
}

#[async_trait]
impl LeaseRows for SqliteDirectory {
    async fn room(
        &self,
        room_id: &str,
        op: RoomOp,
    ) -> Result<(RoomDecision, Option<u64>), LeaseError> {
        let what = match op {
            RoomOp::Read => "read_lease",
            RoomOp::Ensure { .. } => "ensure_owner",
            RoomOp::Release { .. } => "release_owner",
        };
        let room_id = room_id.to_owned();
        self.run(what, move |conn, timing| {
            let read = matches!(op, RoomOp::Read);
            atomically(conn, read, |tx, write| {
                room_step(tx, timing, &room_id, &op, write)
            })
        })
        .await
    }

    async fn node(&self, node_id: &str, op: NodeOp) -> Result<NodeDecision, LeaseError> {
        let what = match op {
            NodeOp::Read => "lookup_node",
            NodeOp::Write { .. } => "register_node",
            NodeOp::Delete => "unregister_node",
        };
        let node_id = node_id.to_owned();
        self.run(what, move |conn, timing| {
            let read = matches!(op, NodeOp::Read);
            atomically(conn, read, |tx, write| {
                node_step(tx, timing, &node_id, &op, write)
            })
        })
        .await
    }

    /// One `BEGIN IMMEDIATE` transaction per batch: the rows read, the clock read, the
    /// sweepable ones deleted, committed.
    async fn sweep(&self, grace_ms: u64, limit: usize) -> Result<Swept, LeaseError> {
        let (table, after) = self.inner.cursor.position();
        let (examined, last, deleted) = self
            .run("sweep", move |conn, timing| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let after = after.as_deref().unwrap_or_default();
                let done = sweep_step(&tx, timing, (table, after), grace_ms, limit)?;
                tx.commit()?;
                Ok(done)
            })
            .await?;
        Ok(self
            .inner
            .cursor
            .batch(table, last, (examined, deleted), limit))
    }
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
