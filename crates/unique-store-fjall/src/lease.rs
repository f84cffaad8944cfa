//! [`FjallDirectory`]: the lease directory and node registry of `unique-lease` in the
//! store's own fjall directory.

use std::ops::Bound;
use std::sync::Arc;

use fjall::{Keyspace, Readable};
use tokio::sync::oneshot;
use unique_lease::{
    Clock, LeaseDump, LeaseError, LeaseRows, NodeDecision, NodeOp, NodeWrite, RoomDecision, RoomOp,
    StepGuard, SweepCursor, SweepTable, Swept, async_trait, clock_millis,
};

use crate::lease_record::{decode_lease, decode_node};
use crate::opened::{Keyspaces, Published, latest};
use crate::writer::{RoomAnswer, StoreError, Write, Writer, unavailable};

/// A [`Directory`](unique_lease::Directory) and [`NodeRegistry`](unique_lease::NodeRegistry)
/// in a [`FjallStore`](crate::FjallStore)'s directory; take one with
/// [`FjallStore::directory`](crate::FjallStore::directory). Cheap to clone.
///
/// Rooms, node registrations and the epoch counter live in keyspaces of their own beside
/// the session records. Every grant, renewal, release and registration goes through the
/// store's one writer thread, which decides it with the lease rules of `unique-lease`
/// against the row as it stands and the clock's reading at that moment (the writer runs
/// one decision at a time, so each is atomic: D8), and answers only once the group that
/// holds it is fsynced: a grant acknowledged before a crash is still there after it, and
/// its epoch is never issued again (D4). Lookups read the last durable snapshot on the
/// calling task.
///
/// **The process's clock judges** (D10): expiry is decided on the directory's [`Clock`]
/// (the system clock unless a test injects another). One process holds a fjall directory
/// at a time, so there is one clock; a [`StepGuard`] beside it keeps leases safe across
/// steps of it (D11).
#[derive(Clone)]
pub struct FjallDirectory {
    writer: Arc<Writer>,
    published: Published,
    clock: Arc<dyn Clock>,
    steps: Arc<StepGuard>,
    cursor: Arc<SweepCursor>,
}

impl std::fmt::Debug for FjallDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallDirectory").finish_non_exhaustive()
    }
}

impl FjallDirectory {
    pub(crate) fn new(writer: Arc<Writer>, published: Published, clock: Arc<dyn Clock>) -> Self {
        Self {
            writer,
            published,
            clock,
            steps: Arc::new(StepGuard::new()),
            cursor: Arc::new(SweepCursor::new()),
        }
    }

    /// Merges another lease directory's rows into this one, durably, in one group: the
    /// epoch counter ends above every epoch either side issued (so every later grant of
    /// any room is fenced above the imported holdings, D4), a room keeps whichever row
    /// has the higher epoch, and a node registration is added where this directory has
    /// none. Importing the same dump twice changes nothing the second time.
    ///
    /// # Errors
    ///
    /// `Corrupt` when a row of `dump` is not one this crate writes (nothing is
    /// imported); `Unavailable` when the store cannot write.
    pub async fn import(&self, dump: LeaseDump) -> Result<(), LeaseError> {
        self.writer
            .ask(|answer| Write::Import { dump, answer })
            .await
    }

    /// Up to `limit` keys of `table` after `after` in the last durable snapshot, with the
    /// keys of the rows the rules call sweepable there (D12); the writer decides those
    /// again on the rows as they stand before it deletes them.
    fn sweep_candidates(
        &self,
        table: SweepTable,
        after: Option<&str>,
        grace_ms: u64,
        limit: usize,
    ) -> Result<Candidates, LeaseError> {
        let view = latest(&self.published).map_err(LeaseError::from_store)?;
        let keyspace = match table {
            SweepTable::Rooms => &view.keyspaces.leases,
            SweepTable::Nodes => &view.keyspaces.nodes,
        };
        let now = self.steps.read(&*self.clock)?;
        let from = after.map_or(Bound::Unbounded, |key| Bound::Excluded(key.as_bytes()));
        let (mut examined, mut last, mut doomed) = (0, None, Vec::new());
        for entry in view
            .snapshot
            .range::<&[u8], _>(keyspace, (from, Bound::Unbounded))
            .take(limit)
        {
            let (key, bytes) = entry
                .into_inner()
                .map_err(|e| LeaseError::from_store(unavailable(e)))?;
            let key = String::from_utf8(key.to_vec())
                .map_err(|_| LeaseError::Corrupt("fjall lease key is not utf-8".to_owned()))?;
            let sweepable = match table {
                SweepTable::Rooms => decode_lease(&bytes)?.sweepable(&now, grace_ms),
                SweepTable::Nodes => decode_node(&bytes)?.sweepable(now.ms, grace_ms),
            };
            examined += 1;
            if sweepable {
                doomed.push(key.clone());
            }
            last = Some(key);
        }
        Ok(((examined, last), doomed))
    }

    /// The row of `key` in the keyspace `which` picks, as the last durable snapshot holds it.
    fn read<T>(
        &self,
        which: fn(&Keyspaces) -> &Keyspace,
        key: &str,
        decode: fn(&[u8]) -> Result<T, LeaseError>,
    ) -> Result<Option<T>, LeaseError> {
        let view = latest(&self.published).map_err(LeaseError::from_store)?;
        view.snapshot
            .get(which(&view.keyspaces), key.as_bytes())
            .map_err(|e| LeaseError::from_store(unavailable(e)))?
            .map(|bytes| decode(&bytes))
            .transpose()
    }
}

/// A sweep batch as read: how many rows it examined and the last key, and the keys of
/// the rows to delete.
type Candidates = ((usize, Option<String>), Vec<String>);

#[async_trait]
impl LeaseRows for FjallDirectory {
    async fn room(
        &self,
        room_id: &str,
        op: RoomOp,
    ) -> Result<(RoomDecision, Option<u64>), LeaseError> {
        if op == RoomOp::Read {
            // A read writes nothing: the durable snapshot and the clock read after it.
            let row = self.read(|k| &k.leases, room_id, decode_lease)?;
            let decision = op.decide(row, self.steps.read(&*self.clock)?, "fjall")?;
            return Ok((decision, None));
        }
        let clock = Arc::clone(&self.clock);
        let steps = Arc::clone(&self.steps);
        self.writer
            .ask(|answer: oneshot::Sender<RoomAnswer>| Write::Room {
                room: room_id.to_owned(),
                op,
                clock,
                steps,
                answer,
            })
            .await
    }

    async fn node(&self, node_id: &str, op: NodeOp) -> Result<NodeDecision, LeaseError> {
        if op == NodeOp::Read {
            let row = self.read(|k| &k.nodes, node_id, decode_node)?;
            let decision = op.decide(row, clock_millis(&*self.clock)?);
            if decision.write == NodeWrite::Nothing {
                return Ok(decision);
            }
            // An expired registration to sweep: the writer decides again on the row as
            // it stands there (a registration written since stays).
        }
        let clock = Arc::clone(&self.clock);
        self.writer
            .ask(|answer| Write::Node {
                node: node_id.to_owned(),
                op,
                clock,
                answer,
            })
            .await
    }

    /// A range read of the durable snapshot on the calling task, then the candidates
    /// through the writer in one group (decided again there, deleted durably).
    async fn sweep(&self, grace_ms: u64, limit: usize) -> Result<Swept, LeaseError> {
        let (table, after) = self.cursor.position();
        let ((examined, last), doomed) =
            self.sweep_candidates(table, after.as_deref(), grace_ms, limit)?;
        let deleted = if doomed.is_empty() {
            0
        } else {
            let clock = Arc::clone(&self.clock);
            let steps = Arc::clone(&self.steps);
            self.writer
                .ask(|answer| Write::Sweep {
                    table,
                    keys: doomed,
                    grace_ms,
                    clock,
                    steps,
                    answer,
                })
                .await?
        };
        Ok(self.cursor.batch(table, last, (examined, deleted), limit))
    }
}
