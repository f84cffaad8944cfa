//! [`SqliteStore`]: the [`Store`] implementation.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use unique_core::{
    CasOutcome, CurrentView, Error, Fence, Key, Owner, OwnerState, Store, UserKey, UserSession,
    async_trait, encode_owner, listed_session, probe_writable,
};

use crate::cache::RecordCache;
use crate::error::{map_sqlite, read_task_failed};
use crate::exclusive::FileLock;
use crate::options::{SqliteStoreBuilder, Synchronous};
use crate::readers::Readers;
use crate::records::{Write, Written, read_state, read_states, read_user};
use crate::schema::{check_path, open_checkpointer, open_reader, open_writer};
use crate::writer::Writer;

/// A durable [`Store`] in one SQLite file (WAL mode).
///
/// Writes go through one writer thread that commits concurrent writes together
/// (group commit); reads use a small pool of read connections. A claim or a
/// release is answered only after its transaction committed, and with the
/// default [`Synchronous::Full`] after that commit is on disk.
///
/// One store at a time may have a file open, whatever its options: the store
/// holds a lock (`<db>-lock`, beside the file) for its life, and opening the
/// same file again, in this process or another, fails until it is dropped (see
/// [`SqliteStoreBuilder::open`]). A network file system is not supported.
///
/// Dropping the store waits for queued writes to finish and closes the file.
#[derive(Debug)]
pub struct SqliteStore {
    // Declared (and so dropped) before `writer`: no read outlives the store.
    readers: Arc<Readers>,
    writer: Writer,
    // Dropped after `readers` and `writer` (whose drop joins the writer thread
    // and closes its connections), so the next store on the file opens only once
    // this one has finished writing (see `crate::exclusive`).
    _lock: FileLock,
    /// Shared with the writer thread, the only one that puts records in.
    cache: Option<Arc<RecordCache>>,
    path: PathBuf,
    synchronous: Synchronous,
}

impl SqliteStore {
    /// Opens (creating when missing) the store at `path` with the defaults:
    /// [`Synchronous::Full`], 5 s busy timeout, 4 readers, batches of up to 256.
    ///
    /// # Errors
    ///
    /// See [`SqliteStoreBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::builder(path).open()
    }

    /// Starts configuring a store at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(path.as_ref())
    }

    pub(crate) fn from_builder(options: SqliteStoreBuilder) -> Result<Self, Error> {
        // Before any connection is opened: no store of another process (or of
        // this one) writes the file while this one has it (see `crate::exclusive`).
        check_path(&options.path)?;
        let lock = FileLock::acquire(&options.path)?;
        let cache =
            (options.record_cache > 0).then(|| Arc::new(RecordCache::new(options.record_cache)));
        let writer_conn = open_writer(&options)?;
        let readers = (0..options.readers)
            .map(|_| open_reader(&options))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            readers: Readers::new(readers, options.reads_on),
            writer: Writer::spawn(
                writer_conn,
                open_checkpointer(&options)?,
                options.max_batch,
                cache.clone(),
            )?,
            _lock: lock,
            cache,
            path: options.path,
            synchronous: options.synchronous,
        })
    }

    /// Drops what the [record cache](SqliteStoreBuilder::record_cache) holds for
    /// `key`, so its next read goes to the file. For a change made to the file
    /// behind the store's back (with no write of the store to `key` in flight):
    /// call it after that change. Without the cache it does nothing.
    pub fn forget_cached(&self, key: &Key) {
        if let Some(cache) = &self.cache {
            cache.forget(&partition_key(key));
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The commit durability in force.
    pub fn synchronous(&self) -> Synchronous {
        self.synchronous
    }

    /// A cheap check for health endpoints: one read through the pool (also the store's
    /// [`Store::check_ready`]).
    ///
    /// # Errors
    ///
    /// `Unavailable` when the database cannot be read.
    pub async fn check(&self) -> Result<(), Error> {
        self.readers
            .run(|conn| {
                conn.query_row(
                    "SELECT count(*) FROM (SELECT 1 FROM records LIMIT 1)",
                    [],
                    |_| Ok(()),
                )
                .map_err(|e| map_sqlite("health check", e))
            })
            .await
    }

    async fn read(&self, key: &Key) -> Result<OwnerState, Error> {
        let pk = partition_key(key);
        if let Some(state) = self.cache.as_ref().and_then(|cache| cache.get(&pk)) {
            return Ok(state);
        }
        self.readers
            .run(move |conn| read_state(conn, &pk).map_err(|e| map_sqlite("read", e)))
            .await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.read(key).await
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        // Both refusals happen before anything is queued: nothing is written (C4, C8).
        let encoded = encode_owner(owner)?;
        let fence = Fence::for_snapshot(snap)?;
        let write = Write::fenced_claim(
            partition_key(key),
            owner,
            encoded,
            claim_id.to_owned(),
            fence.into(),
            &snap.recent_claims,
            self.cache.is_some(),
        );
        match self.writer.submit(write).await? {
            Written::Claim(outcome) => Ok(outcome),
            Written::Released(_) => Err(Error::unavailable(
                "sqlite writer answered a claim with a release",
            )),
        }
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.read(key).await?.into_current_view()
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        if generation <= 0 {
            return Ok(false);
        }
        let write = Write::Release {
            pk: partition_key(key),
            generation,
        };
        match self.writer.submit(write).await? {
            Written::Released(released) => Ok(released),
            Written::Claim(_) => Err(Error::unavailable(
                "sqlite writer answered a release with a claim",
            )),
        }
    }

    /// One query on one pooled connection (see `read_states`).
    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let pks: Vec<String> = keys.iter().map(Key::to_string).collect();
        let states = self
            .readers
            .run(move |conn| read_states(conn, &pks).map_err(|e| map_sqlite("batch read", e)))
            .await?;
        Ok(states.into_iter().map(Ok).collect())
    }

    /// One statement on one pooled connection (see `read_user`): the file, never the
    /// record cache, as for `read_owners`. A read starts from the latest commit, and a
    /// write is answered only after its commit, so the listing sees every claim and
    /// release answered before it began (C10).
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let owned = user.clone();
        let records = self
            .readers
            .run(move |conn| read_user(conn, &owned).map_err(|e| map_sqlite("listing", e)))
            .await?;
        let mut sessions = Vec::with_capacity(records.len());
        for (pk, state) in records {
            // The statement selects only this user's keys; `slot_of` names their slot.
            if let Some(slot) = user.slot_of(&pk)
                && let Some(session) = listed_session(slot, state)?
            {
                sessions.push(session);
            }
        }
        Ok(sessions)
    }

    /// C13: one `count(*)` on a reader (a scan of the table, which holds only records).
    async fn count_online(&self) -> Result<Option<u64>, Error> {
        let online: i64 = self
            .readers
            .run(|conn| {
                conn.query_row(
                    "SELECT count(*) FROM records WHERE gen > 0 AND owner <> ''",
                    [],
                    |row| row.get(0),
                )
                .map_err(|e| map_sqlite("counting", e))
            })
            .await?;
        Ok(Some(online.cast_unsigned()))
    }

    /// Whether the store can commit now: after a batch failed as a whole (a full disk),
    /// a probe write in the file's directory (see [`unique_core::probe_writable`]) must pass
    /// before it is ready again; then [`check`](SqliteStore::check): the read pool answers
    /// and the table is there, without touching any key.
    async fn check_ready(&self) -> Result<(), Error> {
        let health = self.writer.health();
        if health.is_failing() {
            let dir = match self.path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
                _ => PathBuf::from("."),
            };
            match tokio::task::spawn_blocking(move || probe_writable(&dir)).await {
                Ok(Ok(())) => health.healthy(),
                Ok(Err(e)) => health.failing(format!(
                    "sqlite writes fail and the database's directory still refuses writes: {e}"
                )),
                Err(e) => return Err(read_task_failed(e)),
            }
        }
        health.check()?;
        self.check().await
    }
}

/// `key`'s partition key as `Key`'s `Display` writes it (`project#env#uid`, then
/// `#slot` off the default slot), built without the formatting machinery (which
/// was 950 instructions per call, measured; the store makes two per claim).
fn partition_key(key: &Key) -> String {
    use std::fmt::Write as _;
    let mut pk = String::with_capacity(key.project.len() + key.env.len() + key.slot.len() + 23);
    pk.push_str(&key.project);
    pk.push('#');
    pk.push_str(&key.env);
    pk.push('#');
    // Writing into a String cannot fail.
    let _ = write!(pk, "{}", key.uid);
    if !key.slot.is_empty() {
        pk.push('#');
        pk.push_str(&key.slot);
    }
    pk
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_key_is_the_keys_display() {
        for (project, env, uid, slot) in [
            ("p", "e", 1, ""),
            ("game-1", "prod", 42, "mobile"),
            ("é", "staging", i64::MAX, "ü"),
            ("x", "y", i64::MIN, "$"),
            ("", "", 0, ""),
        ] {
            let key = Key::new(project, env, uid).with_slot(slot);
            assert_eq!(partition_key(&key), key.to_string());
        }
    }
}
