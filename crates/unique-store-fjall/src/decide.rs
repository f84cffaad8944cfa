//! The writer's decisions: each write checked against the record (or lease row) as it stands,
//! the group's own earlier writes included.

use std::collections::HashMap;

use fjall::Keyspace;

use unique_core::{CasOutcome, Error, Fence, OwnerState, VacantClaim};
use unique_lease::{
    Clock, LeaseDump, LeaseError, LeaseRow, NodeDecision, NodeOp, NodeRow, NodeWrite, RoomOp,
    RoomWrite, StepGuard, SweepTable, clock_millis,
};

use crate::lease_record::{LAST_EPOCH, decode_epoch, decode_lease, decode_node};
use crate::opened::Keyspaces;
use crate::record::Record;
use crate::writer::{Decided, RoomAnswer, StoreError, Write, decided, unavailable};

/// What one group writes: each key's latest value, so a later write of the group sees the
/// earlier ones. `None` deletes.
#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) records: HashMap<Vec<u8>, Record>,
    pub(crate) leases: HashMap<String, Option<LeaseRow>>,
    pub(crate) nodes: HashMap<String, Option<NodeRow>>,
    pub(crate) last_epoch: Option<u64>,
}

impl Pending {
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
            && self.leases.is_empty()
            && self.nodes.is_empty()
            && self.last_epoch.is_none()
    }
}

/// Decides writes against the keyspaces' latest state, which is durable: every earlier group
/// was fsynced before this one began.
pub(crate) struct Decide<'a> {
    pub(crate) keyspaces: &'a Keyspaces,
}

impl Decide<'_> {
    /// Checks one write against the record as it stands and, when it holds, adds the new
    /// record to `pending`.
    pub(crate) fn decide(&self, write: Write, pending: &mut Pending) -> Decided {
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
                steps,
                answer,
            } => decided(
                answer,
                self.decide_room(room, &op, &*clock, &steps, pending),
            ),
            Write::Node {
                node,
                op,
                clock,
                answer,
            } => decided(answer, self.decide_node(node, &op, &*clock, pending)),
            Write::Sweep {
                table,
                keys,
                grace_ms,
                clock,
                steps,
                answer,
            } => decided(
                answer,
                self.sweep(table, keys, grace_ms, (&*clock, &steps), pending),
            ),
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
        steps: &StepGuard,
        pending: &mut Pending,
    ) -> RoomAnswer {
        let row = self.lease_row(&room, pending)?;
        let decision = op.decide(row.clone(), steps.read(clock)?, "fjall")?;
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
            RoomWrite::Extend { expires_ms, ttl_ms } => {
                if let Some(mut row) = row {
                    row.expires_ms = *expires_ms;
                    row.ttl_ms = *ttl_ms;
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

    /// Deletes each of `keys` whose row, as it stands, the rules still call sweepable
    /// (D12): a row granted, renewed or registered since the snapshot stays.
    fn sweep(
        &self,
        table: SweepTable,
        keys: Vec<String>,
        grace_ms: u64,
        (clock, steps): (&dyn Clock, &StepGuard),
        pending: &mut Pending,
    ) -> Result<usize, LeaseError> {
        let now = steps.read(clock)?;
        let mut deleted = 0;
        for key in keys {
            let sweepable = match table {
                SweepTable::Rooms => self
                    .lease_row(&key, pending)?
                    .is_some_and(|row| row.sweepable(&now, grace_ms)),
                SweepTable::Nodes => self
                    .node_row(&key, pending)?
                    .is_some_and(|row| row.sweepable(now.ms, grace_ms)),
            };
            if sweepable {
                match table {
                    SweepTable::Rooms => drop(pending.leases.insert(key, None)),
                    SweepTable::Nodes => drop(pending.nodes.insert(key, None)),
                }
                deleted += 1;
            }
        }
        Ok(deleted)
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

    fn node_row(&self, node: &str, pending: &Pending) -> Result<Option<NodeRow>, LeaseError> {
        match pending.nodes.get(node) {
            Some(row) => Ok(row.clone()),
            None => read_row(&self.keyspaces.nodes, node.as_bytes(), decode_node),
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
