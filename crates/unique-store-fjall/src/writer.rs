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
//! failed fsync the kernel may have dropped the pages), so the store stops writing: every
//! later write answers [`Error::Unavailable`] until the store is opened again, which recovers
//! from what is on disk.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

use fjall::{Database, Keyspace, PersistMode, Snapshot};
use tokio::sync::oneshot;
use unique_core::{CasOutcome, Error, Fence, OwnerState, VacantClaim};
use unique_lease::{
    Clock, LeaseDump, LeaseError, LeaseRow, NodeDecision, NodeOp, NodeRow, NodeWrite, RoomDecision,
    RoomOp, RoomWrite, clock_millis,
};

use crate::lease_record::{
    LAST_EPOCH, decode_epoch, decode_lease, decode_node, encode_lease, encode_node,
};
use crate::record::Record;

/// The keyspaces (fjall's name for trees) of one store directory.
#[derive(Clone)]
pub(crate) struct Keyspaces {
    /// The session records, by key.
    pub records: Keyspace,
    /// The room leases, by room id.
    pub leases: Keyspace,
    /// The node registrations, by node id.
    pub nodes: Keyspace,
    /// The lease epoch counter.
    pub meta: Keyspace,
}

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
    /// when the writer reaches it.
    Room {
        room: String,
        op: RoomOp,
        clock: Arc<dyn Clock>,
        answer: oneshot::Sender<RoomAnswer>,
    },
    /// An operation on one node registration.
    Node {
        node: String,
        op: NodeOp,
        clock: Arc<dyn Clock>,
        answer: oneshot::Sender<Result<NodeDecision, LeaseError>>,
    },
    /// Rows of another lease directory, merged in (see `FjallDirectory::import`).
    Import {
        dump: LeaseDump,
        answer: oneshot::Sender<Result<(), LeaseError>>,
    },
}

/// A decided write's answer, held until its group is durable: called with `None` once it
/// is, or with the error that stopped the group.
type Decided = Box<dyn FnOnce(Option<Error>) + Send>;

/// Holds `result` for `answer` until the group's fate is known; a caller that gave up
/// waiting is no error.
fn decided<T, E>(answer: oneshot::Sender<Result<T, E>>, result: Result<T, E>) -> Decided
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
            Self::Import { answer, .. } => refused(answer, error),
        }
    }
}

/// What one group writes: each key's latest value, so a later write of the group sees the
/// earlier ones. `None` deletes.
#[derive(Default)]
struct Pending {
    records: HashMap<Vec<u8>, Record>,
    leases: HashMap<String, Option<LeaseRow>>,
    nodes: HashMap<String, Option<NodeRow>>,
    last_epoch: Option<u64>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.records.is_empty()
            && self.leases.is_empty()
            && self.nodes.is_empty()
            && self.last_epoch.is_none()
    }
}

/// The snapshot readers read: everything committed and fsynced, nothing else.
pub(crate) type Published = Arc<RwLock<Snapshot>>;

/// The running writer thread; dropping the last sender stops it after the queued writes.
#[derive(Debug)]
pub(crate) struct Writer {
    sender: Option<Sender<Write>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub(crate) fn spawn(
        db: Database,
        keyspaces: Keyspaces,
        published: Published,
        max_batch: usize,
    ) -> Result<Self, Error> {
        let (sender, queue) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("unique-fjall-writer".into())
            .spawn(move || {
                GroupCommit {
                    db,
                    keyspaces,
                    published,
                    max_batch: max_batch.max(1),
                    failed: None,
                }
                .run(&queue);
            })
            .map_err(|e| Error::unavailable_with("fjall store: cannot start the writer", e))?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    /// Queues `write`; a writer that has stopped refuses it.
    pub(crate) fn send(&self, write: Write) {
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

struct GroupCommit {
    db: Database,
    keyspaces: Keyspaces,
    published: Published,
    max_batch: usize,
    /// Why writing stopped, once a commit or an fsync failed.
    failed: Option<String>,
}

impl GroupCommit {
    fn run(mut self, queue: &Receiver<Write>) {
        let mut group = Vec::with_capacity(self.max_batch);
        while let Ok(first) = queue.recv() {
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
        if let Some(why) = &self.failed {
            for write in group {
                write.refuse(Error::unavailable(why.clone()));
            }
            return;
        }
        let mut pending = Pending::default();
        let mut decided = Vec::new();
        for write in group {
            decided.push(self.decide(write, &mut pending));
        }
        if !pending.is_empty()
            && let Err(why) = self.make_durable(pending)
        {
            self.failed = Some(why.clone());
            for answer in decided {
                answer(Some(Error::unavailable(why.clone())));
            }
            return;
        }
        for answer in decided {
            answer(None);
        }
    }

    /// Checks one write against the record as it stands and, when it holds, adds the new
    /// record to `pending`.
    fn decide(&self, write: Write, pending: &mut Pending) -> Decided {
        let written = &mut pending.records;
        match write {
            Write::Claim {
                pk,
                owner,
                claim_id,
                snap,
                answer,
            } => {
                let result = self.stored(&pk, written).and_then(|stored| {
                    let fence = Fence::for_snapshot(&snap)?;
                    if !fence.holds(stored.as_ref().map(Record::pins)) {
                        let current = stored.map_or_else(OwnerState::absent, |r| r.state());
                        return Ok(CasOutcome::LostRace {
                            current: Some(current),
                        });
                    }
                    let generation = fence.next_generation();
                    // The stored list is the snapshot's whenever the fence holds: only a
                    // claim changes it, and every claim changes the gen (C9).
                    let won = snap.won_after(&claim_id, generation);
                    written.insert(pk, Record::claimed(owner, claim_id, generation, won));
                    Ok(CasOutcome::Written { generation })
                });
                decided(answer, result)
            }
            Write::ClaimVacant {
                pk,
                owner,
                claim_id,
                answer,
            } => {
                let result = self.stored(&pk, written).map(|stored| {
                    let state = stored.map_or_else(OwnerState::absent, |r| r.state());
                    if !VacantClaim::is_vacant(&state, &claim_id) {
                        return VacantClaim::Occupied(state);
                    }
                    // What claim_cas from this record writes: gen 1 over an absent record,
                    // else the tombstone's + 1, and its recent claims with this win (C9).
                    let generation = if state.exists {
                        state.generation + 1
                    } else {
                        1
                    };
                    let won = state.won_after(&claim_id, generation);
                    written.insert(pk, Record::claimed(owner, claim_id, generation, won));
                    VacantClaim::Written { generation }
                });
                decided(answer, result)
            }
            Write::Release {
                pk,
                generation,
                answer,
            } => {
                let result = self.stored(&pk, written).map(|stored| match stored {
                    Some(mut record) if generation > 0 && record.generation == generation => {
                        // A tombstone; `won` stays (C9).
                        record.owner = Some(String::new());
                        record.claim_id = None;
                        written.insert(pk, record);
                        true
                    }
                    _ => false,
                });
                decided(answer, result)
            }
            #[cfg(feature = "test-util")]
            Write::Raw { pk, record, answer } => {
                written.insert(pk, record);
                decided(answer, Ok(()))
            }
            Write::Room {
                room,
                op,
                clock,
                answer,
            } => decided(answer, self.decide_room(room, &op, &*clock, pending)),
            Write::Node {
                node,
                op,
                clock,
                answer,
            } => decided(answer, self.decide_node(node, &op, &*clock, pending)),
            Write::Import { dump, answer } => decided(answer, self.import(dump, pending)),
        }
    }

    /// The lease rules on the room's row as it stands (the group's own writes included);
    /// a grant draws the next epoch of the one counter (D4).
    fn decide_room(
        &self,
        room: String,
        op: &RoomOp,
        clock: &dyn Clock,
        pending: &mut Pending,
    ) -> RoomAnswer {
        let row = self.lease_row(&room, pending)?;
        let now_ms = clock_millis(clock)?;
        let decision = op.decide(row.clone(), now_ms, "fjall")?;
        let mut epoch = None;
        match &decision.write {
            RoomWrite::Nothing => {}
            RoomWrite::Grant(grant) => {
                let next = self
                    .last_epoch(pending)?
                    .checked_add(1)
                    .ok_or_else(|| LeaseError::backend("epoch counter exhausted"))?;
                pending.last_epoch = Some(next);
                pending.leases.insert(room, Some(grant.row(next)));
                epoch = Some(next);
            }
            RoomWrite::Extend { expires_ms } => {
                if let Some(mut row) = row {
                    row.expires_ms = *expires_ms;
                    pending.leases.insert(room, Some(row));
                }
            }
            RoomWrite::Delete => {
                pending.leases.insert(room, None);
            }
        }
        Ok((decision, epoch))
    }

    fn decide_node(
        &self,
        node: String,
        op: &NodeOp,
        clock: &dyn Clock,
        pending: &mut Pending,
    ) -> Result<NodeDecision, LeaseError> {
        let row = match pending.nodes.get(&node) {
            Some(row) => row.clone(),
            None => read_row(&self.keyspaces.nodes, node.as_bytes(), decode_node)?,
        };
        let decision = op.decide(row, clock_millis(clock)?);
        match &decision.write {
            NodeWrite::Nothing => {}
            NodeWrite::Put(row) => {
                pending.nodes.insert(node, Some(row.clone()));
            }
            NodeWrite::Delete => {
                pending.nodes.insert(node, None);
            }
        }
        Ok(decision)
    }

    /// Merges another directory's rows: the counter ends above every epoch either side
    /// issued, and a room keeps whichever row has the higher epoch (D4).
    fn import(&self, dump: LeaseDump, pending: &mut Pending) -> Result<(), LeaseError> {
        let mut last = self.last_epoch(pending)?.max(dump.last_epoch);
        for (room, row) in dump.leases {
            row.check("imported")?;
            last = last.max(row.epoch);
            let newer = self
                .lease_row(&room, pending)?
                .is_none_or(|ours| ours.epoch < row.epoch);
            if newer {
                pending.leases.insert(room, Some(row));
            }
        }
        for (node, row) in dump.nodes {
            if read_row(&self.keyspaces.nodes, node.as_bytes(), decode_node)?.is_none()
                && !pending.nodes.contains_key(&node)
            {
                pending.nodes.insert(node, Some(row));
            }
        }
        pending.last_epoch = Some(last);
        Ok(())
    }

    fn lease_row(&self, room: &str, pending: &Pending) -> Result<Option<LeaseRow>, LeaseError> {
        match pending.leases.get(room) {
            Some(row) => Ok(row.clone()),
            None => read_row(&self.keyspaces.leases, room.as_bytes(), decode_lease),
        }
    }

    fn last_epoch(&self, pending: &Pending) -> Result<u64, LeaseError> {
        match pending.last_epoch {
            Some(last) => Ok(last),
            None => Ok(read_row(&self.keyspaces.meta, LAST_EPOCH, decode_epoch)?.unwrap_or(0)),
        }
    }

    /// The record of `pk` as it stands: the group's own write, else the tree's latest,
    /// which is durable (every earlier group was fsynced before this one began).
    fn stored(
        &self,
        pk: &[u8],
        written: &HashMap<Vec<u8>, Record>,
    ) -> Result<Option<Record>, Error> {
        if let Some(record) = written.get(pk) {
            return Ok(Some(record.clone()));
        }
        self.keyspaces
            .records
            .get(pk)
            .map_err(unavailable)?
            .map(|bytes| Record::decode(&bytes))
            .transpose()
    }

    /// Commits `written` as one batch, fsyncs the journal, then publishes the snapshot that
    /// holds it. An error says why writing must stop.
    fn make_durable(&self, pending: Pending) -> Result<(), String> {
        let Keyspaces {
            records,
            leases,
            nodes,
            meta,
        } = &self.keyspaces;
        let mut batch = self.db.batch();
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
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| format!("fjall store: an fsync failed, writes stopped: {e}"))?;
        let snapshot = self.db.snapshot();
        *self
            .published
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = snapshot;
        Ok(())
    }
}

/// A row of `keyspace` as the tree holds it now, decoded.
fn read_row<T>(
    keyspace: &Keyspace,
    key: &[u8],
    decode: fn(&[u8]) -> Result<T, LeaseError>,
) -> Result<Option<T>, LeaseError> {
    let bytes = keyspace
        .get(key)
        .map_err(|e| LeaseError::from_store(unavailable(e)))?;
    bytes.map(|bytes| decode(&bytes)).transpose()
}

pub(crate) fn unavailable(error: fjall::Error) -> Error {
    Error::unavailable_with("fjall store: a read or write failed", error)
}
