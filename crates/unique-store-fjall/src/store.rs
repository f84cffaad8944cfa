//! [`FjallStore`]: the [`Store`] implementation.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use fjall::{Keyspace, Readable, Snapshot};
use unique_core::{
    CasOutcome, CurrentView, Error, Fence, Key, Owner, OwnerState, Store, UserKey, UserSession,
    VacantClaim, VacantClaims, WriteHealth, async_trait, encode_owner, listed_session,
};

use crate::lease::FjallDirectory;
use crate::opened::{Opened, Published, latest};
use crate::record::Record;
use crate::writer::{Faults, Start, Write, Writer, unavailable};

/// Writes one group may hold by default: as many as the SQLite store's.
const DEFAULT_MAX_BATCH: usize = 256;

/// A durable [`Store`] in one directory, on fjall's LSM tree.
///
/// Writes go through one writer thread that commits concurrent writes together (group
/// commit: one journal write and one fsync per group); reads run on the calling task
/// against the last durable snapshot. A claim or a release is answered only after the
/// journal holding it is fsynced, and no read sees it before.
///
/// The same directory holds a lease directory ([`FjallStore::directory`]) in keyspaces of
/// its own, written by the same writer under the same group commit and fsync.
///
/// One store at a time may have a directory open: fjall holds a lock file in it for the
/// store's life, and opening the directory again, in this process or another, fails until
/// the store (and every [`FjallDirectory`] taken from it) is dropped. Dropping the last of
/// them finishes the queued writes and closes it.
pub struct FjallStore {
    writer: Arc<Writer>,
    published: Published,
    health: Arc<WriteHealth>,
    #[cfg_attr(
        not(feature = "test-util"),
        expect(dead_code, reason = "read only by the test-util fault hook")
    )]
    faults: Arc<Faults>,
    path: PathBuf,
}

/// Options of a [`FjallStore`] before it opens.
#[derive(Debug, Clone)]
#[must_use]
pub struct FjallStoreBuilder {
    path: PathBuf,
    max_batch: usize,
}

impl FjallStoreBuilder {
    /// The most writes one group commit holds (default 256; at least 1).
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch.max(1);
        self
    }

    /// Opens the store, creating the directory and the database when missing, and
    /// recovering what an earlier process fsynced.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] naming the directory when it cannot be created, holds no
    /// fjall database of a version this build reads, or is open in another store.
    pub fn open(self) -> Result<FjallStore, Error> {
        let failed = |e: fjall::Error| {
            Error::unavailable_with(
                format!("cannot open the fjall store at {}", self.path.display()),
                e,
            )
        };
        let opened = Opened::open(&self.path).map_err(failed)?;
        let published = Arc::new(RwLock::new(Some(opened.view())));
        let (health, faults) = (Arc::default(), Arc::default());
        let writer = Writer::spawn(Start {
            path: self.path.clone(),
            opened,
            published: Arc::clone(&published),
            health: Arc::clone(&health),
            max_batch: self.max_batch,
            faults: Arc::clone(&faults),
        })?;
        Ok(FjallStore {
            writer: Arc::new(writer),
            published,
            health,
            faults,
            path: self.path,
        })
    }
}

impl std::fmt::Debug for FjallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FjallStore {
    /// Opens (creating when missing) the store in the directory `path` with the defaults.
    ///
    /// # Errors
    ///
    /// See [`FjallStoreBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::builder(path).open()
    }

    /// Starts configuring a store in the directory `path`.
    pub fn builder(path: impl AsRef<Path>) -> FjallStoreBuilder {
        FjallStoreBuilder {
            path: path.as_ref().to_owned(),
            max_batch: DEFAULT_MAX_BATCH,
        }
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lease directory and node registry in this store's directory, judged on the
    /// system clock.
    pub fn directory(&self) -> FjallDirectory {
        self.directory_with_clock(Arc::new(unique_lease::SystemClock))
    }

    /// The lease directory judged on `clock`: for tests that move time by hand. Every
    /// directory of one store must use the same clock.
    pub fn directory_with_clock(&self, clock: Arc<dyn unique_lease::Clock>) -> FjallDirectory {
        FjallDirectory::new(Arc::clone(&self.writer), Arc::clone(&self.published), clock)
    }

    /// Writes a record exactly as given, past every fence: the raw-record hook of the
    /// contract suite. Only with the `test-util` feature.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the write could not be made durable.
    #[cfg(feature = "test-util")]
    pub async fn put_raw(
        &self,
        key: &Key,
        generation: i64,
        owner: Option<&str>,
        claim_id: Option<&str>,
        won: Option<&str>,
    ) -> Result<(), Error> {
        let record = Record {
            generation,
            owner: owner.map(str::to_owned),
            claim_id: claim_id.map(str::to_owned),
            won: won.map(str::to_owned),
        };
        self.writer
            .ask(|answer| Write::Raw {
                pk: key.to_string().into_bytes(),
                record,
                answer,
            })
            .await
    }

    /// Makes the next `count` journal fsyncs fail, as a failing disk would: the hook behind
    /// the tests of the writer's recovery. Only with the `test-util` feature.
    #[cfg(feature = "test-util")]
    pub fn fail_next_fsyncs(&self, count: usize) {
        self.faults
            .fail_fsyncs
            .store(count, std::sync::atomic::Ordering::SeqCst);
    }

    fn read(snapshot: &Snapshot, records: &Keyspace, pk: &[u8]) -> Result<OwnerState, Error> {
        let stored = snapshot.get(records, pk).map_err(unavailable)?;
        Ok(match stored {
            Some(bytes) => Record::decode(&bytes)?.state(),
            None => OwnerState::absent(),
        })
    }
}

#[async_trait]
impl Store for FjallStore {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        let view = latest(&self.published)?;
        Self::read(
            &view.snapshot,
            &view.keyspaces.records,
            key.to_string().as_bytes(),
        )
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        // Refusals before anything is queued (C4, C8).
        Fence::for_snapshot(snap)?;
        let owner = encode_owner(owner)?;
        self.writer
            .ask(|answer| Write::Claim {
                pk: key.to_string().into_bytes(),
                owner,
                claim_id: claim_id.to_owned(),
                snap: snap.clone(),
                answer,
            })
            .await
    }

    /// Write-first: the Arbiter's read of a vacant record is skipped, and the writer, which
    /// reads the record anyway to check the fence, does the claim in the same step.
    fn vacant_claims(&self) -> VacantClaims {
        VacantClaims::AbsentAndTombstones
    }

    async fn claim_vacant(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
    ) -> Result<VacantClaim, Error> {
        // Refused before anything is queued (C8).
        let owner = encode_owner(owner)?;
        self.writer
            .ask(|answer| Write::ClaimVacant {
                pk: key.to_string().into_bytes(),
                owner,
                claim_id: claim_id.to_owned(),
                answer,
            })
            .await
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.read_owner(key).await?.into_current_view()
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.writer
            .ask(|answer| Write::Release {
                pk: key.to_string().into_bytes(),
                generation,
                answer,
            })
            .await
    }

    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        // One snapshot for the batch; each key's read is linearizable on its own (C1).
        let view = latest(&self.published)?;
        Ok(keys
            .iter()
            .map(|key| {
                Self::read(
                    &view.snapshot,
                    &view.keyspaces.records,
                    key.to_string().as_bytes(),
                )
            })
            .collect())
    }

    /// Ready while writes succeed (from a failed commit or fsync until the writer has opened
    /// the database again, it is not) and the durable snapshot reads.
    async fn check_ready(&self) -> Result<(), Error> {
        self.health.check()?;
        self.read_owner(&unique_core::ready_key()).await.map(drop)
    }

    /// C13: one pass over a snapshot of the records, on a thread of its own (a scan of the
    /// whole tree is too long for an async worker).
    async fn count_online(&self) -> Result<Option<u64>, Error> {
        let view = latest(&self.published)?;
        let (answer, counted) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("fjall-count".into())
            .spawn(move || {
                let mut online = 0_u64;
                let mut count = || -> Result<u64, Error> {
                    for entry in view.snapshot.iter(&view.keyspaces.records) {
                        let (_, bytes) = entry.into_inner().map_err(unavailable)?;
                        if Record::decode(&bytes)?.holds_session() {
                            online += 1;
                        }
                    }
                    Ok(online)
                };
                let _ = answer.send(count());
            })
            .map_err(|e| Error::unavailable(format!("fjall store: cannot start a count: {e}")))?;
        let online = counted
            .await
            .map_err(|_| Error::unavailable("fjall store: the count stopped"))??;
        Ok(Some(online))
    }

    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        // The default slot's key, then the range of the user's other slots, from one
        // snapshot: one strongly consistent read (C10).
        let view = latest(&self.published)?;
        let (snapshot, records) = (&view.snapshot, &view.keyspaces.records);
        let default = user.to_string();
        let (start, end) = user.slot_range();
        let mut sessions = Vec::new();
        let default_record = snapshot
            .get(records, default.as_bytes())
            .map_err(unavailable)?
            .map(|bytes| (default.into_bytes(), bytes.to_vec()));
        let others = snapshot
            .range(records, start.as_bytes()..end.as_bytes())
            .map(|guard| {
                guard
                    .into_inner()
                    .map(|(pk, bytes)| (pk.to_vec(), bytes.to_vec()))
                    .map_err(unavailable)
            });
        for entry in default_record.map(Ok).into_iter().chain(others) {
            let (pk, bytes) = entry?;
            let record = Record::decode(&bytes)?;
            // Every key read is the user's, so each has a slot.
            let Some(slot) = std::str::from_utf8(&pk)
                .ok()
                .and_then(|pk| user.slot_of(pk))
            else {
                continue;
            };
            sessions.extend(listed_session(slot, record.state())?);
        }
        Ok(sessions)
    }
}
