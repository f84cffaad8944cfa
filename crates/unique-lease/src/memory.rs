//! The in-memory backend: for tests, simulations and single-process use.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use crate::error::LeaseError;
use crate::rules::{
    LeaseRow, LeaseRows, NodeDecision, NodeOp, NodeRow, NodeWrite, RoomDecision, RoomOp, RoomWrite,
};
use crate::step::{StepGuard, StoreNow};
use crate::sweep::{SweepCursor, SweepTable, Swept};
use crate::time::{Clock, SystemClock};

/// A [`Directory`](crate::Directory) and [`NodeRegistry`](crate::NodeRegistry) in
/// process memory, safe to share between tasks (`Arc<MemoryDirectory>`). One mutex
/// serialises every operation, which makes each one atomic and linearizable (D8).
/// Expiry is judged on the directory's [`Clock`] (the system clock unless a test
/// injects a [`ManualClock`](crate::ManualClock)): every caller in the process
/// shares it, so their `now` arguments never matter (D10). A [`StepGuard`] beside the
/// clock keeps leases safe across steps of it (D11).
///
/// Expired leases and registrations stay until they are replaced, released, or swept
/// ([`LeaseRows::sweep`], D12: `unique-server` sweeps in the background; a process of its
/// own runs [`sweep_pass`](crate::sweep_pass) now and then). The epoch counter lives as long
/// as the value: a new `MemoryDirectory` starts again at epoch 1, so fencing across
/// process restarts needs a durable backend.
#[derive(Debug)]
pub struct MemoryDirectory {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    steps: StepGuard,
    cursor: SweepCursor,
}

#[derive(Debug, Default)]
struct State {
    leases: BTreeMap<String, LeaseRow>,
    /// The last epoch issued in any room (D4: one counter, never decreases).
    last_epoch: u64,
    nodes: BTreeMap<String, NodeRow>,
}

impl Default for MemoryDirectory {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryDirectory {
    /// An empty directory judging time on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty directory judging leases and registrations on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
            steps: StepGuard::new(),
            cursor: SweepCursor::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock, but a poisoned lock must not turn
        // every later call into a panic either.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The clock, read under the state's lock through the step guard (D11).
    fn now(&self) -> Result<StoreNow, LeaseError> {
        self.steps.read(&*self.clock)
    }

    /// Test-only: makes the room's lease expired, as if its ttl had run out. A room
    /// without a lease is left alone. Not part of the production traits.
    #[cfg(any(test, feature = "test-util"))]
    pub fn force_expire(&self, room_id: &str) {
        if let Some(lease) = self.state().leases.get_mut(room_id) {
            lease.expires_ms = 0;
        }
    }
}

#[async_trait]
impl LeaseRows for MemoryDirectory {
    async fn room(
        &self,
        room_id: &str,
        op: RoomOp,
    ) -> Result<(RoomDecision, Option<u64>), LeaseError> {
        let mut state = self.state();
        let now = self.now()?;
        let decision = op.decide(state.leases.get(room_id).cloned(), now, "memory")?;
        let mut epoch = None;
        match &decision.write {
            RoomWrite::Nothing => {}
            RoomWrite::Grant(grant) => {
                let next = state
                    .last_epoch
                    .checked_add(1)
                    .ok_or_else(|| LeaseError::backend("epoch counter exhausted"))?;
                state.last_epoch = next;
                state.leases.insert(room_id.to_owned(), grant.row(next));
                epoch = Some(next);
            }
            RoomWrite::Extend { expires_ms, ttl_ms } => {
                if let Some(row) = state.leases.get_mut(room_id) {
                    row.expires_ms = *expires_ms;
                    row.ttl_ms = *ttl_ms;
                }
            }
            RoomWrite::Delete => {
                state.leases.remove(room_id);
            }
        }
        Ok((decision, epoch))
    }

    async fn node(&self, node_id: &str, op: NodeOp) -> Result<NodeDecision, LeaseError> {
        let mut state = self.state();
        let now_ms = self.now()?.ms;
        let decision = op.decide(state.nodes.get(node_id).cloned(), now_ms);
        match &decision.write {
            NodeWrite::Nothing => {}
            NodeWrite::Put(row) => {
                state.nodes.insert(node_id.to_owned(), row.clone());
            }
            NodeWrite::Delete => {
                state.nodes.remove(node_id);
            }
        }
        Ok(decision)
    }

    async fn sweep(&self, grace_ms: u64, limit: usize) -> Result<Swept, LeaseError> {
        let mut state = self.state();
        let now = self.now()?;
        let (table, after) = self.cursor.position();
        let from = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let (examined, doomed) = match table {
            SweepTable::Rooms => batch(&state.leases, from, limit, |row| {
                row.sweepable(&now, grace_ms)
            }),
            SweepTable::Nodes => batch(&state.nodes, from, limit, |row| {
                row.sweepable(now.ms, grace_ms)
            }),
        };
        let deleted = doomed.len();
        for key in &doomed {
            match table {
                SweepTable::Rooms => drop(state.leases.remove(key)),
                SweepTable::Nodes => drop(state.nodes.remove(key)),
            }
        }
        let last = examined.1;
        Ok(self.cursor.batch(table, last, (examined.0, deleted), limit))
    }
}

/// Up to `limit` rows of `rows` from `from` on: how many were examined and the last key,
/// and the keys `sweepable` picks.
fn batch<T>(
    rows: &BTreeMap<String, T>,
    from: Bound<&str>,
    limit: usize,
    sweepable: impl Fn(&T) -> bool,
) -> ((usize, Option<String>), Vec<String>) {
    let mut examined = 0;
    let mut last = None;
    let mut doomed = Vec::new();
    for (key, row) in rows.range::<str, _>((from, Bound::Unbounded)).take(limit) {
        examined += 1;
        last = Some(key);
        if sweepable(row) {
            doomed.push(key.clone());
        }
    }
    ((examined, last.cloned()), doomed)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::Directory;

    #[tokio::test]
    async fn force_expire_lets_another_node_take_over() {
        let dir = MemoryDirectory::new();
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let ttl = Duration::from_secs(30);
        let first = dir.ensure_owner("room", "a", now, ttl).await.unwrap();
        assert!(
            dir.ensure_owner("room", "b", now, ttl)
                .await
                .unwrap()
                .is_held_by("a")
        );

        dir.force_expire("room");
        assert!(
            !dir.verify_owner("room", "a", &first.lease_token, now)
                .await
                .unwrap()
        );
        let second = dir.ensure_owner("room", "b", now, ttl).await.unwrap();
        assert!(second.is_held_by("b"));
        assert!(second.epoch > first.epoch);
        assert_ne!(second.lease_token, first.lease_token);

        dir.force_expire("no-such-room");
        assert_eq!(dir.lookup("no-such-room").await.unwrap(), None);
    }
}
