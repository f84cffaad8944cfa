//! The writer thread: every write of the store, checked and committed in groups.
//!
//! Writes queue on a channel. The thread takes every write queued (up to `max_batch`), checks
//! each one's fence against the record as it stands (the group's own earlier writes
//! included), commits the group's writes as one fjall batch, fsyncs the journal, and only then
//! publishes a snapshot that holds them and answers their callers. Readers read that
//! snapshot, so no read sees a write before it is durable: a write lost in a crash was never
//! seen or acknowledged.
//!
//! A failed commit or fsync leaves the journal in a state this process cannot trust (after a
//! failed fsync the kernel may have dropped the pages), so the writer stops writing: the
//! group and every later write answer [`Error::Unavailable`], and readiness fails, until the
//! writer has opened the database again, the way a crash recovery does, from what the journal
//! durably holds. It tries that every [`RECOVERY_INTERVAL`] once a probe shows that the
//! directory takes writes again (a full disk has space again).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fjall::PersistMode;
use tokio::sync::oneshot;
use unique_core::{CasOutcome, Error, OwnerState, VacantClaim, WriteHealth, probe_writable};
use unique_lease::{
    Clock, LeaseDump, LeaseError, NodeDecision, NodeOp, RoomDecision, RoomOp, StepGuard, SweepTable,
};

use crate::decide::{Decide, Pending};
use crate::lease_record::{LAST_EPOCH, encode_lease, encode_node};
use crate::opened::{Opened, Published, View, publish};
#[cfg(feature = "test-util")]
use crate::record::Record;

/// What a lease write answers: the decision and the epoch a grant drew.
pub(crate) type RoomAnswer = Result<(RoomDecision, Option<u64>), LeaseError>;

/// One write, with where its answer goes.
pub(crate) enum Write {
    /// A fenced claim from `snap` (C3, C4, C9); `owner` is already encoded.
    Claim {
        pk: Vec<u8>,
        owner: String,
        claim_id: String,
        snap: OwnerState,
        answer: oneshot::Sender<Result<CasOutcome, Error>>,
    },
    /// A write-first claim (C11): written when the record is vacant, else the record.
    ClaimVacant {
        pk: Vec<u8>,
        owner: String,
        claim_id: String,
        answer: oneshot::Sender<Result<VacantClaim, Error>>,
    },
    /// A fenced tombstone at `generation` (C5).
    Release {
        pk: Vec<u8>,
        generation: i64,
        answer: oneshot::Sender<Result<bool, Error>>,
    },
    /// An unconditional write of the contract suite's raw-record hook.
    #[cfg(feature = "test-util")]
    Raw {
        pk: Vec<u8>,
        record: Record,
        answer: oneshot::Sender<Result<(), Error>>,
    },
    /// A lease operation on one room, decided by the lease rules on `clock`'s reading
    /// (through the directory's step guard, D11) when the writer reaches it.
    Room {
        room: String,
        op: RoomOp,
        clock: Arc<dyn Clock>,
        steps: Arc<StepGuard>,
        answer: oneshot::Sender<RoomAnswer>,
    },
    /// An operation on one node registration.
    Node {
        node: String,
        op: NodeOp,
        clock: Arc<dyn Clock>,
        answer: oneshot::Sender<Result<NodeDecision, LeaseError>>,
    },
    /// Rows a sweep found sweepable in the snapshot (D12): each decided again on the row
    /// as it stands and deleted when it still is; answers how many were deleted.
    Sweep {
        table: SweepTable,
        keys: Vec<String>,
        grace_ms: u64,
        clock: Arc<dyn Clock>,
        steps: Arc<StepGuard>,
        answer: oneshot::Sender<Result<usize, LeaseError>>,
    },
    /// Rows of another lease directory, merged in (see `FjallDirectory::import`).
    Import {
        dump: LeaseDump,
        answer: oneshot::Sender<Result<(), LeaseError>>,
    },
}

/// A decided write's answer, held until its group is durable: called with `None` once it
/// is, or with the error that stopped the group.
pub(crate) type Decided = Box<dyn FnOnce(Option<Error>) + Send>;

/// Holds `result` for `answer` until the group's fate is known; a caller that gave up
/// waiting is no error.
pub(crate) fn decided<T, E>(answer: oneshot::Sender<Result<T, E>>, result: Result<T, E>) -> Decided
where
    T: Send + 'static,
    E: StoreError + Send + 'static,
{
    Box::new(move |failed| {
        drop(answer.send(match failed {
            None => result,
            Some(error) => Err(E::from_store(error)),
        }));
    })
}

/// Answers `answer` with `error` at once.
fn refused<T, E: StoreError>(answer: oneshot::Sender<Result<T, E>>, error: Error) {
    drop(answer.send(Err(E::from_store(error))));
}

/// The error types the writer answers with: the store's own, and the lease directory's.
pub(crate) trait StoreError {
    fn from_store(error: Error) -> Self;
}

impl StoreError for Error {
    fn from_store(error: Error) -> Self {
        error
    }
}

impl StoreError for LeaseError {
    /// The writer only ever fails with `Unavailable` (a stopped writer, a failed commit,
    /// fsync or read) or a corrupt session record, which a lease operation never reads.
    fn from_store(error: Error) -> Self {
        match error {
            Error::Unavailable { reason, source } => LeaseError::Unavailable { reason, source },
            other => LeaseError::backend_with("fjall store", other),
        }
    }
}

impl Write {
    /// The answer this write gets without being checked.
    fn refuse(self, error: Error) {
        match self {
            Self::Claim { answer, .. } => refused(answer, error),
            Self::ClaimVacant { answer, .. } => refused(answer, error),
            Self::Release { answer, .. } => refused(answer, error),
            #[cfg(feature = "test-util")]
            Self::Raw { answer, .. } => refused(answer, error),
            Self::Room { answer, .. } => refused(answer, error),
            Self::Node { answer, .. } => refused(answer, error),
            Self::Sweep { answer, .. } => refused(answer, error),
            Self::Import { answer, .. } => refused(answer, error),
        }
    }
}

/// How often a writer whose writes fail tries to recover (and no more often).
const RECOVERY_INTERVAL: Duration = Duration::from_millis(250);

/// The running writer thread; dropping the last sender stops it after the queued writes.
#[derive(Debug)]
pub(crate) struct Writer {
    sender: Option<Sender<Write>>,
    thread: Option<JoinHandle<()>>,
}

/// What the writer thread starts with.
pub(crate) struct Start {
    pub path: PathBuf,
    pub opened: Opened,
    pub published: Published,
    pub health: Arc<WriteHealth>,
    pub max_batch: usize,
    pub faults: Arc<Faults>,
}

impl Writer {
    pub(crate) fn spawn(start: Start) -> Result<Self, Error> {
        let (sender, queue) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("unique-fjall-writer".into())
            .spawn(move || {
                GroupCommit {
                    path: start.path,
                    opened: Some(start.opened),
                    published: start.published,
                    health: start.health,
                    max_batch: start.max_batch.max(1),
                    failed: None,
                    last_attempt: None,
                    faults: start.faults,
                }
                .run(&queue);
            })
            .map_err(|e| Error::unavailable_with("fjall store: cannot start the writer", e))?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    /// Queues the write `make` builds around its answer's sender, and waits for the answer;
    /// a writer that stops before answering is `Unavailable`.
    pub(crate) async fn ask<T, E: StoreError>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, E>>) -> Write,
    ) -> Result<T, E> {
        let (answer, answered) = oneshot::channel();
        self.send(make(answer));
        answered.await.unwrap_or_else(|_| {
            Err(E::from_store(Error::unavailable(
                "fjall store: the writer stopped before answering",
            )))
        })
    }

    /// Queues `write`; a writer that has stopped refuses it.
    fn send(&self, write: Write) {
        match &self.sender {
            Some(sender) => {
                if let Err(refused) = sender.send(write) {
                    refused.0.refuse(stopped());
                }
            }
            None => write.refuse(stopped()),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel lets the thread finish the queued writes and return.
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn stopped() -> Error {
    Error::unavailable("fjall store: the writer has stopped")
}

/// Faults a test injects into the writer (only with the `test-util` feature).
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// Fsyncs still to fail before the journal's own runs again.
    #[cfg(feature = "test-util")]
    pub fail_fsyncs: std::sync::atomic::AtomicUsize,
}

impl Faults {
    /// Whether this fsync is to fail.
    #[cfg_attr(
        not(feature = "test-util"),
        expect(clippy::unused_self, reason = "only the test-util hook reads it")
    )]
    fn fsync_fails(&self) -> bool {
        #[cfg(feature = "test-util")]
        {
            use std::sync::atomic::Ordering;
            self.fail_fsyncs
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        }
        #[cfg(not(feature = "test-util"))]
        false
    }
}

struct GroupCommit {
    path: PathBuf,
    /// The database; `None` from a failed write until it is opened again.
    opened: Option<Opened>,
    published: Published,
    health: Arc<WriteHealth>,
    max_batch: usize,
    /// Why writing stopped, once a commit or an fsync failed.
    failed: Option<String>,
    /// When the last recovery was tried.
    last_attempt: Option<Instant>,
    faults: Arc<Faults>,
}

impl GroupCommit {
    fn run(mut self, queue: &Receiver<Write>) {
        let mut group = Vec::with_capacity(self.max_batch);
        loop {
            let first = if self.failed.is_some() {
                // Failing: wake up to try again even when nobody writes, so readiness
                // reports the recovery without waiting for a claim.
                match queue.recv_timeout(RECOVERY_INTERVAL) {
                    Ok(write) => Some(write),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match queue.recv() {
                    Ok(write) => Some(write),
                    Err(_) => break,
                }
            };
            if self.failed.is_some() {
                self.recover();
            }
            let Some(first) = first else { continue };
            group.push(first);
            while group.len() < self.max_batch {
                match queue.try_recv() {
                    Ok(write) => group.push(write),
                    Err(_) => break,
                }
            }
            self.commit(group.drain(..));
        }
    }

    fn commit(&mut self, group: impl Iterator<Item = Write>) {
        let (Some(opened), None) = (&self.opened, &self.failed) else {
            let why = self.failed.clone().unwrap_or_default();
            for write in group {
                write.refuse(Error::unavailable(why.clone()));
            }
            return;
        };
        let decide = Decide {
            keyspaces: &opened.keyspaces,
        };
        let mut pending = Pending::default();
        let mut decided = Vec::new();
        for write in group {
            decided.push(decide.decide(write, &mut pending));
        }
        if !pending.is_empty()
            && let Err(why) = self.make_durable(pending)
        {
            self.stop_writing(why.clone());
            for answer in decided {
                answer(Some(Error::unavailable(why.clone())));
            }
            return;
        }
        for answer in decided {
            answer(None);
        }
    }

    /// A commit or an fsync failed. What the journal holds past the last good fsync is not
    /// known (after a failed fsync the kernel may have dropped the pages), and fjall refuses
    /// every later write (it poisons itself), so the writer does what a crash recovery does:
    /// it drops the database and opens it again from the journal on disk, once the directory
    /// takes writes again. Readers keep the last durable snapshot until then.
    fn stop_writing(&mut self, why: String) {
        self.health.failing(why.clone());
        self.failed = Some(why);
        self.last_attempt = None;
    }

    /// Tries to reopen the database, at most once per [`RECOVERY_INTERVAL`]: first a probe
    /// (a file written and fsynced in the directory; a full disk fails it), then the database
    /// closed and opened again, recovering what its journal durably holds.
    fn recover(&mut self) {
        if self
            .last_attempt
            .is_some_and(|at| at.elapsed() < RECOVERY_INTERVAL)
        {
            return;
        }
        self.last_attempt = Some(Instant::now());
        if let Err(e) = probe_writable(&self.path) {
            self.health.failing(format!(
                "fjall store: writes stopped ({}); the directory still refuses writes: {e}",
                self.failed.as_deref().unwrap_or_default()
            ));
            return;
        }
        // Readers lose the old view, and with it the last handles of the old database, which
        // must close (its lock file included) before it can be opened again.
        publish(&self.published, None);
        self.opened = None;
        match Opened::open(&self.path) {
            Ok(opened) => {
                publish(&self.published, Some(opened.view()));
                self.opened = Some(opened);
                self.failed = None;
                self.health.healthy();
            }
            Err(e) => self.health.failing(format!(
                "fjall store: reopening {} after a failed write failed: {e}",
                self.path.display()
            )),
        }
    }

    /// Commits `written` as one batch, fsyncs the journal, then publishes the snapshot that
    /// holds it. An error says why writing must stop.
    fn make_durable(&self, pending: Pending) -> Result<(), String> {
        let Some(Opened { db, keyspaces }) = &self.opened else {
            return Err("fjall store: the database is not open".to_owned());
        };
        let mut batch = db.batch();
        let (records, leases, nodes, meta) = (
            &keyspaces.records,
            &keyspaces.leases,
            &keyspaces.nodes,
            &keyspaces.meta,
        );
        for (pk, record) in pending.records {
            batch.insert(records, pk, record.encode());
        }
        for (room, row) in pending.leases {
            match row {
                Some(row) => batch.insert(leases, room, encode_lease(&row)),
                None => batch.remove(leases, room),
            }
        }
        for (node, row) in pending.nodes {
            match row {
                Some(row) => batch.insert(nodes, node, encode_node(&row)),
                None => batch.remove(nodes, node),
            }
        }
        if let Some(last) = pending.last_epoch {
            batch.insert(meta, LAST_EPOCH, last.to_le_bytes());
        }
        batch
            .commit()
            .map_err(|e| format!("fjall store: a commit failed, writes stopped: {e}"))?;
        let synced = if self.faults.fsync_fails() {
            Err("injected by a test".to_owned())
        } else {
            db.persist(PersistMode::SyncAll).map_err(|e| e.to_string())
        };
        synced.map_err(|e| format!("fjall store: an fsync failed, writes stopped: {e}"))?;
        publish(
            &self.published,
            Some(Arc::new(View {
                keyspaces: keyspaces.clone(),
                snapshot: db.snapshot(),
            })),
        );
        Ok(())
    }
}

pub(crate) fn unavailable(error: fjall::Error) -> Error {
    Error::unavailable_with("fjall store: a read or write failed", error)
}
