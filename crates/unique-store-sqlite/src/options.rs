//! Store options and the builder that opens a [`SqliteStore`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use unique_core::Error;

use crate::store::SqliteStore;

/// Default time a connection waits for a lock held by another connection
/// (another process on the same file) before the operation fails.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Default number of read connections.
pub const DEFAULT_READERS: usize = 4;
/// Default largest number of writes committed together in one transaction.
pub const DEFAULT_MAX_BATCH: usize = 256;

/// When a committed transaction is forced to stable storage (SQLite's
/// `PRAGMA synchronous`, in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Synchronous {
    /// Every commit is fsynced before the caller is answered: a claim's `Ok`
    /// survives a process crash, an OS crash and a power loss. The default.
    #[default]
    Full,
    /// Commits are written to the WAL but fsynced only at checkpoints. A process
    /// crash (SIGKILL, panic, OOM kill) loses nothing, because the data is in the
    /// OS page cache. An OS crash or a power loss can roll back the most recent
    /// transactions (those since the last checkpoint): their claims were
    /// acknowledged, so after such a loss a gen already handed out could be
    /// issued again, breaking fencing (I2) for those keys. The database itself
    /// stays consistent. Use it only when the machine's power and kernel are
    /// trusted more than the fencing guarantee.
    Normal,
}

impl Synchronous {
    pub(crate) fn pragma_value(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

/// Where a read runs (see [`SqliteStoreBuilder::reads_on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReadsOn {
    /// On the task that asked, without a thread hand-off: a primary-key lookup
    /// on cached pages takes microseconds, less than waking another thread. The
    /// default.
    #[default]
    CallingTask,
    /// On tokio's blocking pool: for files much larger than memory on slow disks,
    /// where a read may wait for the disk and should not hold up an async worker.
    BlockingPool,
}

/// Configures and opens a [`SqliteStore`]. Start from [`SqliteStore::builder`].
#[derive(Debug, Clone)]
pub struct SqliteStoreBuilder {
    pub(crate) path: PathBuf,
    pub(crate) synchronous: Synchronous,
    pub(crate) busy_timeout: Duration,
    pub(crate) readers: usize,
    pub(crate) max_batch: usize,
    pub(crate) reads_on: ReadsOn,
    pub(crate) record_cache: usize,
}

impl SqliteStoreBuilder {
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            synchronous: Synchronous::Full,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            readers: DEFAULT_READERS,
            max_batch: DEFAULT_MAX_BATCH,
            reads_on: ReadsOn::CallingTask,
            record_cache: 0,
        }
    }

    /// Commit durability; [`Synchronous::Full`] by default. Read what
    /// [`Synchronous::Normal`] can lose before relaxing it.
    #[must_use]
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// How long an operation waits for a lock held by another connection to the
    /// same file before failing with `Unavailable` (default 5 s). Also bounds
    /// how long [`open`](Self::open) can wait.
    #[must_use]
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Number of read connections (default 4, at least 1). Reads run on these
    /// in parallel with the writer.
    #[must_use]
    pub fn readers(mut self, readers: usize) -> Self {
        self.readers = readers.max(1);
        self
    }

    /// Where reads run; [`ReadsOn::CallingTask`] by default.
    #[must_use]
    pub fn reads_on(mut self, reads_on: ReadsOn) -> Self {
        self.reads_on = reads_on;
        self
    }

    /// Largest number of writes committed together (default 256, at least 1).
    /// 1 disables group commit: one transaction and one fsync per write.
    #[must_use]
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch.max(1);
        self
    }

    /// Keeps up to `capacity` recently written records in memory (0, the default:
    /// no cache), so that `read_owner` and `current` of a key this store wrote
    /// are answered without a SQLite read transaction.
    ///
    /// The cache is right only while this store is the file's one writer, which
    /// [`open`](Self::open) ensures for every store, cache on or off: a store
    /// holds the file for its life and a second store on it (of this process or
    /// another) is refused. A change made to the file by a tool that bypasses
    /// the store (the `sqlite3` CLI) while the store is open is not seen by reads
    /// of keys it has cached: stop the store first, or call
    /// [`SqliteStore::forget_cached`] for each key changed. With the cache off
    /// every read is a SQLite read.
    ///
    /// Batch reads (`read_owners`) and the health check always read the file.
    #[must_use]
    pub fn record_cache(mut self, capacity: usize) -> Self {
        self.record_cache = capacity;
        self
    }

    /// Opens (creating when missing) the database file, checks it, and starts
    /// the writer thread.
    ///
    /// This blocks the calling thread for the startup check, which is bounded by
    /// the busy timeout; from async code, call it once at startup or inside
    /// `spawn_blocking`.
    ///
    /// # Errors
    ///
    /// `Unavailable` with a reason naming the path when the directory is
    /// missing, the file or directory cannot be opened (permissions), the file
    /// is not an SQLite database, its schema is not this store's (or newer than
    /// this build's; an older one is migrated), or the file stays locked by
    /// another connection past the busy timeout; and at once when another store,
    /// of this process or another, has the file open, whatever the options of
    /// either (the message names the other process's pid when it can).
    pub fn open(self) -> Result<SqliteStore, Error> {
        SqliteStore::from_builder(self)
    }
}
