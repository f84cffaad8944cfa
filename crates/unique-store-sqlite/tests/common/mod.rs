//! Shared by the integration tests: a fresh on-disk store per test and the
//! contract suite's raw-record hook.
//!
//! The raw writer is a second, independent SQLite connection to the same file,
//! as an operator with the sqlite3 CLI would be: the store sees its writes only
//! through the file, never through shared memory, and its write lock competes
//! with the store's writer exactly like another process's would.

#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{Connection, params};
use tempfile::TempDir;
use unique_core::{Error, Key, async_trait};
use unique_store_contract::{RawRecord, RawWriter, Subject};
use unique_store_sqlite::{ReadsOn, SqliteStore, Synchronous};

/// A store on a file in its own temporary directory (on disk, so WAL is real).
pub struct Fixture {
    pub store: Arc<SqliteStore>,
    pub raw: Arc<SqliteRaw>,
}

impl Fixture {
    pub fn new() -> Self {
        Self::with(Synchronous::Full)
    }

    pub fn with(synchronous: Synchronous) -> Self {
        Self::with_options(synchronous, ReadsOn::default())
    }

    pub fn with_options(synchronous: Synchronous, reads_on: ReadsOn) -> Self {
        Self::with_cache(synchronous, reads_on, 0)
    }

    /// With the record cache on (`record_cache` > 0), the raw writer forgets
    /// what the store cached of each key it writes, as an operator must.
    pub fn with_cache(synchronous: Synchronous, reads_on: ReadsOn, record_cache: usize) -> Self {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let path = dir.path().join("unique.db");
        let store = SqliteStore::builder(&path)
            .synchronous(synchronous)
            .reads_on(reads_on)
            .record_cache(record_cache)
            .open()
            .expect("open the store");
        let store = Arc::new(store);
        let cached = (record_cache > 0).then(|| Arc::clone(&store));
        let raw = SqliteRaw::open(dir, path, cached);
        Self {
            store,
            raw: Arc::new(raw),
        }
    }

    pub fn subject(&self) -> Subject {
        Subject {
            store: self.store.clone(),
            raw: self.raw.clone(),
        }
    }
}

/// The factory the contract suite calls once per case. Opening blocks (file
/// I/O, fsync), so it runs off the async workers, as a server should do it.
pub async fn subject() -> Subject {
    tokio::task::spawn_blocking(Fixture::new)
        .await
        .expect("open the store")
        .subject()
}

/// As [`subject`], with reads on tokio's blocking pool instead of the calling task.
pub async fn subject_reading_on_blocking_pool() -> Subject {
    tokio::task::spawn_blocking(|| Fixture::with_options(Synchronous::Full, ReadsOn::BlockingPool))
        .await
        .expect("open the store")
        .subject()
}

/// As [`subject`], with the record cache on (small, so eviction happens too).
pub async fn subject_with_record_cache() -> Subject {
    tokio::task::spawn_blocking(|| Fixture::with_cache(Synchronous::Full, ReadsOn::default(), 8))
        .await
        .expect("open the store")
        .subject()
}

/// Unconditional writes straight into the `records` table of the store's file.
/// Owns the temporary directory, so the file lives as long as the subject.
pub struct SqliteRaw {
    /// The store whose record cache forgets each key written (cache on only).
    /// Declared before `_dir`: the store closes before the directory goes.
    cached: Option<Arc<SqliteStore>>,
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    _dir: TempDir,
}

impl SqliteRaw {
    fn open(dir: TempDir, path: PathBuf, cached: Option<Arc<SqliteStore>>) -> Self {
        let conn = Connection::open(&path).expect("open a raw connection");
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .expect("busy timeout");
        Self {
            cached,
            conn: Arc::new(Mutex::new(conn)),
            path,
            _dir: dir,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `sql` on the raw connection (e.g. to store values of odd types).
    pub fn execute(&self, sql: &str) {
        self.lock().execute_batch(sql).expect("raw sql");
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl RawWriter for SqliteRaw {
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error> {
        let conn = Arc::clone(&self.conn);
        let pk = key.to_string();
        let written = tokio::task::spawn_blocking(move || {
            conn.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .execute(
                    "INSERT INTO records (pk, gen, owner, cid, won) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (pk) DO UPDATE
                     SET gen = excluded.gen, owner = excluded.owner, cid = excluded.cid,
                         won = excluded.won",
                    params![
                        pk,
                        record.generation,
                        record.owner,
                        record.claim_id,
                        record.won
                    ],
                )
                .map(drop)
                .map_err(|e| Error::unavailable_with("raw write failed", e))
        })
        .await
        .map_err(|e| Error::unavailable_with("raw write task failed", e))?;
        // After the write, as an operator editing the file must (or stop the store).
        if let Some(store) = &self.cached {
            store.forget_cached(key);
        }
        written
    }
}
