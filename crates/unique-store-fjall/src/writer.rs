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

use crate::record::Record;

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
}

/// A decided write, held until its group is durable.
enum Decided {
    Claim(
        oneshot::Sender<Result<CasOutcome, Error>>,
        Result<CasOutcome, Error>,
    ),
    ClaimVacant(
        oneshot::Sender<Result<VacantClaim, Error>>,
        Result<VacantClaim, Error>,
    ),
    Release(oneshot::Sender<Result<bool, Error>>, Result<bool, Error>),
    #[cfg(feature = "test-util")]
    Raw(oneshot::Sender<Result<(), Error>>),
}

impl Decided {
    /// Sends the answer; a caller that gave up waiting is no error.
    fn send(self) {
        match self {
            Self::Claim(answer, result) => drop(answer.send(result)),
            Self::ClaimVacant(answer, result) => drop(answer.send(result)),
            Self::Release(answer, result) => drop(answer.send(result)),
            #[cfg(feature = "test-util")]
            Self::Raw(answer) => drop(answer.send(Ok(()))),
        }
    }

    fn fail(self, error: Error) {
        match self {
            Self::Claim(answer, _) => drop(answer.send(Err(error))),
            Self::ClaimVacant(answer, _) => drop(answer.send(Err(error))),
            Self::Release(answer, _) => drop(answer.send(Err(error))),
            #[cfg(feature = "test-util")]
            Self::Raw(answer) => drop(answer.send(Err(error))),
        }
    }
}

impl Write {
    /// The answer this write gets without being checked.
    fn refuse(self, error: Error) {
        match self {
            Self::Claim { answer, .. } => drop(answer.send(Err(error))),
            Self::ClaimVacant { answer, .. } => drop(answer.send(Err(error))),
            Self::Release { answer, .. } => drop(answer.send(Err(error))),
            #[cfg(feature = "test-util")]
            Self::Raw { answer, .. } => drop(answer.send(Err(error))),
        }
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
        records: Keyspace,
        published: Published,
        max_batch: usize,
    ) -> Result<Self, Error> {
        let (sender, queue) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("unique-fjall-writer".into())
            .spawn(move || {
                GroupCommit {
                    db,
                    records,
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
    records: Keyspace,
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
        // The group's own writes, by key: a later write of the group sees the earlier ones.
        let mut written: HashMap<Vec<u8>, Record> = HashMap::new();
        let mut decided = Vec::new();
        for write in group {
            decided.push(self.decide(write, &mut written));
        }
        if !written.is_empty()
            && let Err(why) = self.make_durable(written)
        {
            self.failed = Some(why.clone());
            for write in decided {
                write.fail(Error::unavailable(why.clone()));
            }
            return;
        }
        for write in decided {
            write.send();
        }
    }

    /// Checks one write against the record as it stands and, when it holds, adds the new
    /// record to `written`.
    fn decide(&self, write: Write, written: &mut HashMap<Vec<u8>, Record>) -> Decided {
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
                Decided::Claim(answer, result)
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
                Decided::ClaimVacant(answer, result)
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
                Decided::Release(answer, result)
            }
            #[cfg(feature = "test-util")]
            Write::Raw { pk, record, answer } => {
                written.insert(pk, record);
                Decided::Raw(answer)
            }
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
        self.records
            .get(pk)
            .map_err(unavailable)?
            .map(|bytes| Record::decode(&bytes))
            .transpose()
    }

    /// Commits `written` as one batch, fsyncs the journal, then publishes the snapshot that
    /// holds it. An error says why writing must stop.
    fn make_durable(&self, written: HashMap<Vec<u8>, Record>) -> Result<(), String> {
        let mut batch = self.db.batch();
        for (pk, record) in written {
            batch.insert(&self.records, pk, record.encode());
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

pub(crate) fn unavailable(error: fjall::Error) -> Error {
    Error::unavailable_with("fjall store: a read or write failed", error)
}
