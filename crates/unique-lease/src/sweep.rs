//! Sweeping (D12): expired lease rows and node registrations deleted after a grace period,
//! so a directory whose callers churn room names holds its live rows, not its history.
//!
//! Which row may go is a lease rule ([`LeaseRow::sweepable`](crate::LeaseRow::sweepable),
//! [`NodeRow::sweepable`](crate::NodeRow::sweepable)); a [`LeaseRows`] backend runs it in
//! batches ([`LeaseRows::sweep`]), keeping its place in a [`SweepCursor`], and
//! [`sweep_pass`] runs one whole pass over both tables. Redis needs none of it (its keys
//! expire `gc_grace` after their lease); DynamoDB keeps its lease items (see D12).

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::error::LeaseError;
use crate::rules::LeaseRows;

/// How long an expired row stays before a sweep may delete it, by default (10 min): a
/// lookup still reports the last holding for that long (D7).
pub const DEFAULT_SWEEP_GRACE: Duration = Duration::from_mins(10);

/// How often a server sweeps, by default (60 s).
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_mins(1);

/// How many rows one [`LeaseRows::sweep`] call examines in [`sweep_pass`] (500): each
/// batch is one short atomic step (one transaction, one writer group, one mutex hold).
pub const SWEEP_BATCH: usize = 500;

/// What a sweep did: rows deleted and rows examined and kept, per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Lease rows deleted.
    pub rooms: usize,
    /// Node registrations deleted.
    pub nodes: usize,
    /// Lease rows examined and kept (in force, or within the grace).
    pub kept_rooms: usize,
    /// Registrations examined and kept.
    pub kept_nodes: usize,
    /// The pass examined both tables to their end: over a whole pass with no other
    /// writer, `kept_rooms` and `kept_nodes` are the tables' row counts.
    pub done: bool,
}

impl Swept {
    /// Adds `batch` to a pass's totals (`done` is the batch's).
    #[must_use]
    pub fn and(self, batch: Swept) -> Swept {
        Swept {
            rooms: self.rooms + batch.rooms,
            nodes: self.nodes + batch.nodes,
            kept_rooms: self.kept_rooms + batch.kept_rooms,
            kept_nodes: self.kept_nodes + batch.kept_nodes,
            done: batch.done,
        }
    }
}

/// The table a sweep batch examines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SweepTable {
    /// The lease rows.
    #[default]
    Rooms,
    /// The node registrations.
    Nodes,
}

/// Where a backend's sweep stands: the table, and the last key examined in it (rows are
/// examined in key order, so a batch is a range read from there).
#[derive(Debug, Default)]
pub struct SweepCursor {
    at: Mutex<(SweepTable, Option<String>)>,
}

impl SweepCursor {
    /// A cursor at the start of a pass.
    pub fn new() -> Self {
        Self::default()
    }

    /// The table to examine next, and the key to start after (`None`: its first row).
    pub fn position(&self) -> (SweepTable, Option<String>) {
        self.at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records a batch of `table` that examined `examined` rows, the last with key `last`,
    /// asked for at most `limit`: fewer than asked means the table ended, and the pass moves
    /// to the next table. Returns whether the pass is done (the registrations ended).
    pub fn advance(
        &self,
        table: SweepTable,
        last: Option<String>,
        examined: usize,
        limit: usize,
    ) -> bool {
        let mut at = self.at.lock().unwrap_or_else(PoisonError::into_inner);
        if examined >= limit.max(1) {
            *at = (table, last);
            return false;
        }
        match table {
            SweepTable::Rooms => {
                *at = (SweepTable::Nodes, None);
                false
            }
            SweepTable::Nodes => {
                *at = (SweepTable::Rooms, None);
                true
            }
        }
    }

    /// What a batch that examined `examined` rows of `table` (the last `last`), deleting
    /// `deleted` of them, reports, with the cursor moved on.
    pub fn batch(
        &self,
        table: SweepTable,
        last: Option<String>,
        (examined, deleted): (usize, usize),
        limit: usize,
    ) -> Swept {
        let done = self.advance(table, last, examined, limit);
        let kept = examined.saturating_sub(deleted);
        match table {
            SweepTable::Rooms => Swept {
                rooms: deleted,
                kept_rooms: kept,
                done,
                ..Swept::default()
            },
            SweepTable::Nodes => Swept {
                nodes: deleted,
                kept_nodes: kept,
                done,
                ..Swept::default()
            },
        }
    }
}

/// The grace in whole milliseconds, as [`LeaseRows::sweep`] takes it.
pub fn grace_millis(grace: Duration) -> u64 {
    u64::try_from(grace.as_millis()).unwrap_or(u64::MAX)
}

/// One whole pass (D12): [`LeaseRows::sweep`] in batches of [`SWEEP_BATCH`] until it says
/// done, yielding to other tasks between batches. Returns the pass's totals.
///
/// # Errors
///
/// The first batch's error; the rows swept before it stay swept, and the next pass
/// resumes where the failed batch would have started.
pub async fn sweep_pass<R: LeaseRows + ?Sized>(
    rows: &R,
    grace: Duration,
) -> Result<Swept, LeaseError> {
    let grace_ms = grace_millis(grace);
    let mut total = Swept::default();
    loop {
        total = total.and(rows.sweep(grace_ms, SWEEP_BATCH).await?);
        if total.done {
            return Ok(total);
        }
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_walks_rooms_then_nodes_then_starts_again() {
        let cursor = SweepCursor::new();
        assert_eq!(cursor.position(), (SweepTable::Rooms, None));
        let full = cursor.batch(SweepTable::Rooms, Some("m".into()), (2, 1), 2);
        assert_eq!((full.rooms, full.kept_rooms, full.done), (1, 1, false));
        assert_eq!(cursor.position(), (SweepTable::Rooms, Some("m".into())));
        assert!(!cursor.advance(SweepTable::Rooms, Some("z".into()), 1, 2));
        assert_eq!(cursor.position(), (SweepTable::Nodes, None));
        let last = cursor.batch(SweepTable::Nodes, None, (0, 0), 2);
        assert!(last.done);
        assert_eq!(cursor.position(), (SweepTable::Rooms, None));
        let total = full.and(last);
        assert_eq!((total.rooms, total.kept_rooms, total.done), (1, 1, true));
    }
}
