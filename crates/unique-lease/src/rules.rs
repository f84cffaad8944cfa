//! The lease rules, decided once.
//!
//! A backend that can read a row and write it back atomically (the memory directory, fjall,
//! SQLite, PostgreSQL) implements [`LeaseRows`]: "read the room's row and the store's clock,
//! write the decided row". Everything else (when a lease is in force, grant, renewal, who
//! may release, what a report says, when a registration has expired) is decided here, by
//! [`RoomOp::decide`] and [`NodeOp::decide`], and every such backend gets
//! [`LeaseBackend`](crate::LeaseBackend) from the blanket implementation below. Redis (Lua
//! scripts) and DynamoDB (holder-side expiry, D10) cannot run Rust inside their atomic step
//! and implement `LeaseBackend` directly; the same contract suite runs on all of them.

use async_trait::async_trait;

use crate::directory::{LeaseBackend, StoredLease, StoredNode, new_lease_token};
use crate::error::LeaseError;
use crate::step::{STEP_TOLERANCE_MS, StoreNow};
#[cfg(doc)]
use crate::sweep::SweepCursor;
use crate::sweep::Swept;

/// A room's row as a row-atomic backend stores it: times are whole milliseconds on the
/// store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// The node that holds (or last held) the room.
    pub node_id: String,
    /// The holding's token.
    pub lease_token: String,
    /// The holding's epoch (D4).
    pub epoch: u64,
    /// The instant the holding expires; at and after it the room is free (D1), unless a
    /// step of the store's clock says otherwise (D11).
    pub expires_ms: u64,
    /// The ttl the holding was granted or last extended with (D11): it was written at
    /// `expires_ms - ttl_ms` on the store's clock. `None` for a row an older build wrote,
    /// which is judged on `expires_ms` alone.
    pub ttl_ms: Option<u64>,
}

impl LeaseRow {
    /// The store reading the row was last written at, when its ttl is known.
    pub fn written_ms(&self) -> Option<u64> {
        self.ttl_ms.map(|ttl| self.expires_ms.saturating_sub(ttl))
    }

    /// How long the holding is still in force at `now`, in ms; zero once it has expired
    /// (the expiry instant itself is expired). D11: never more than the granted ttl (a row
    /// that claims more was written before the store's clock went back), and a row written
    /// before a forward step the directory saw stays in force until its ttl has passed on
    /// the monotonic clock since that step.
    pub fn left(&self, now: &StoreNow) -> u64 {
        let by_clock = self.expires_ms.saturating_sub(now.ms);
        let Some(ttl) = self.ttl_ms else {
            return by_clock;
        };
        let written = self.expires_ms.saturating_sub(ttl);
        let held_by_step = now
            .step
            .filter(|step| written.saturating_add(STEP_TOLERANCE_MS) < step.wall_ms)
            .map_or(0, |step| ttl.saturating_sub(step.elapsed_ms));
        by_clock.min(ttl).max(held_by_step)
    }

    /// Whether the holding is in force at `now` (see [`left`](Self::left)).
    pub fn in_force(&self, now: &StoreNow) -> bool {
        self.left(now) > 0
    }

    /// D12: whether a sweep may delete this row at `now`: the holding is not in force
    /// (so no forward step holds it either, D11) and it expired at least `grace_ms` ago on
    /// the store's clock. Deleting such a row frees no room the rules count as held, and
    /// lowers no epoch: a grant draws its epoch from the backend's counter, never from the
    /// room's row (D4). A row that claims an expiry ahead of the clock (written before a
    /// step back) waits until the clock passes it.
    pub fn sweepable(&self, now: &StoreNow, grace_ms: u64) -> bool {
        !self.in_force(now) && now.ms >= self.expires_ms.saturating_add(grace_ms)
    }

    /// What the backend reports of this row at `now`.
    pub fn report(&self, now: &StoreNow) -> StoredLease {
        StoredLease {
            node_id: self.node_id.clone(),
            lease_token: self.lease_token.clone(),
            epoch: self.epoch,
            ttl_left_ms: self.left(now),
        }
    }

    /// Refuses a row this crate never writes (empty ids or token, epoch 0): it is
    /// reported as [`LeaseError::Corrupt`] and no lease is granted over it.
    ///
    /// # Errors
    ///
    /// `Corrupt` naming `store` when the row is not one this crate writes.
    pub fn check(&self, store: &str) -> Result<(), LeaseError> {
        if self.node_id.is_empty() || self.lease_token.is_empty() || self.epoch == 0 {
            return Err(LeaseError::Corrupt(format!(
                "{store} lease record: empty node, empty token or epoch 0"
            )));
        }
        Ok(())
    }
}

/// A node's registration as a row-atomic backend stores it (store's clock, whole ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    /// The node's address.
    pub grpc_addr: String,
    /// When the registration was last written.
    pub updated_ms: u64,
    /// When it expires; at and after it the registration reads as absent (N2).
    pub expires_ms: u64,
}

impl NodeRow {
    /// Whether the registration is valid at `now_ms`.
    pub fn in_force(&self, now_ms: u64) -> bool {
        now_ms < self.expires_ms
    }

    /// D12: whether a sweep may delete this registration at `now_ms`: it expired at
    /// least `grace_ms` ago (it already reads as absent, N2).
    pub fn sweepable(&self, now_ms: u64, grace_ms: u64) -> bool {
        !self.in_force(now_ms) && now_ms >= self.expires_ms.saturating_add(grace_ms)
    }

    fn report(&self, now_ms: u64) -> StoredNode {
        StoredNode {
            grpc_addr: self.grpc_addr.clone(),
            age_ms: now_ms.saturating_sub(self.updated_ms),
            ttl_left_ms: self.expires_ms.saturating_sub(now_ms),
        }
    }
}

/// An operation on one room, as the front hands it to a [`LeaseRows`] backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoomOp {
    /// Report the row (D7); never writes.
    Read,
    /// Grant, renew or report the holder (D1–D3).
    Ensure {
        /// The caller.
        node_id: String,
        /// The ttl asked for, whole ms in `1..=MAX_TTL`.
        ttl_ms: u64,
    },
    /// Delete the row if it is this holding (D6).
    Release {
        /// The caller.
        node_id: String,
        /// The holding's token.
        lease_token: String,
    },
}

/// What a backend writes for a room, decided by [`RoomOp::decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoomWrite {
    /// Nothing.
    Nothing,
    /// A new holding: the backend takes the next epoch from its counter (D4) and stores
    /// [`Grant::row`] in place of whatever row there was.
    Grant(Grant),
    /// The same holding (token and epoch kept) with a new expiry and ttl: a renewal
    /// (D2: never earlier), or the row moved to the store clock's current frame after a
    /// step (D11: the same real-time promise, so earlier on the clock after a step back,
    /// later after a step forward).
    Extend {
        /// The new expiry.
        expires_ms: u64,
        /// The ttl to store with it ([`LeaseRow::ttl_ms`]).
        ttl_ms: Option<u64>,
    },
    /// Delete the row (D6).
    Delete,
}

/// A new holding before its epoch is drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The new holder.
    pub node_id: String,
    /// Its fresh token.
    pub lease_token: String,
    /// When it expires.
    pub expires_ms: u64,
    /// The ttl granted.
    pub ttl_ms: u64,
}

impl Grant {
    /// The row to store, with the epoch the backend drew.
    pub fn row(&self, epoch: u64) -> LeaseRow {
        LeaseRow {
            node_id: self.node_id.clone(),
            lease_token: self.lease_token.clone(),
            epoch,
            expires_ms: self.expires_ms,
            ttl_ms: Some(self.ttl_ms),
        }
    }
}

/// A decided room operation: what to write, and (once the write is done) what to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomDecision {
    /// What the backend writes, in the same atomic step as its read.
    pub write: RoomWrite,
    answer: RoomAnswer,
    now: StoreNow,
    /// For a grant over another node's row (expired: D3 never grants a room in force): that
    /// node.
    taken_from: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum RoomAnswer {
    /// The row as read (Read) or as it stands after the write (Ensure).
    Row(Option<LeaseRow>),
    Released(bool),
}

impl RoomOp {
    /// Decides the operation on the row as read at `now` on the store's clock (with the
    /// last forward step the directory saw, D11).
    ///
    /// # Errors
    ///
    /// `Corrupt` when the row is not one this crate writes (see [`LeaseRow::check`]).
    pub fn decide(
        &self,
        row: Option<LeaseRow>,
        now: StoreNow,
        store: &str,
    ) -> Result<RoomDecision, LeaseError> {
        if let Some(row) = &row {
            row.check(store)?;
        }
        let decided = |write, answer| RoomDecision {
            write,
            answer,
            now,
            taken_from: None,
        };
        Ok(match self {
            Self::Read => decided(RoomWrite::Nothing, RoomAnswer::Row(row)),
            Self::Ensure { node_id, ttl_ms } => {
                let wanted = now.ms.saturating_add(*ttl_ms);
                match row {
                    Some(mut held) if held.in_force(&now) => {
                        // The expiry in the store clock's current frame: the stored one
                        // unless a step moved the frame (D11).
                        let kept = now.ms.saturating_add(held.left(&now));
                        if held.node_id == *node_id && wanted > kept {
                            // D2: same token and epoch, a later expiry.
                            held.expires_ms = wanted;
                            held.ttl_ms = Some(*ttl_ms);
                        } else if kept != held.expires_ms {
                            // D11: the row moved to the current frame, the same promise.
                            held.expires_ms = kept;
                        } else {
                            // D3: another node's lease, unchanged; or D2 with nothing to
                            // extend (a renewal never shortens).
                            return Ok(decided(RoomWrite::Nothing, RoomAnswer::Row(Some(held))));
                        }
                        let write = RoomWrite::Extend {
                            expires_ms: held.expires_ms,
                            ttl_ms: held.ttl_ms,
                        };
                        decided(write, RoomAnswer::Row(Some(held)))
                    }
                    // D1: free, expired, or expired under this very node (its old token
                    // is dead too).
                    before => RoomDecision {
                        taken_from: before
                            .map(|row| row.node_id)
                            .filter(|holder| holder != node_id),
                        ..decided(
                            RoomWrite::Grant(Grant {
                                node_id: node_id.clone(),
                                lease_token: new_lease_token(),
                                expires_ms: wanted,
                                ttl_ms: *ttl_ms,
                            }),
                            RoomAnswer::Row(None),
                        )
                    },
                }
            }
            Self::Release {
                node_id,
                lease_token,
            } => {
                // D6: the caller's own holding, expired or not; nothing else.
                let own = row
                    .as_ref()
                    .is_some_and(|r| r.node_id == *node_id && r.lease_token == *lease_token);
                let write = if own {
                    RoomWrite::Delete
                } else {
                    RoomWrite::Nothing
                };
                decided(write, RoomAnswer::Released(own))
            }
        })
    }
}

impl RoomDecision {
    /// The node a grant takes the room over from: the room's row named another node, whose
    /// holding had expired (D1, D3). `None` for a first grant (no row, or one a sweep
    /// deleted, D12), a grant to the node that held it last, and every other decision. What
    /// the server counts as `unique_lease_takeovers_total`.
    pub fn taken_over_from(&self) -> Option<&str> {
        self.taken_from.as_deref()
    }

    /// The report for the front once the write is durable; `granted_epoch` is the epoch
    /// the backend drew for a [`RoomWrite::Grant`] (ignored otherwise).
    fn outcome(self, granted_epoch: Option<u64>) -> RoomOutcome {
        match (self.write, self.answer) {
            (RoomWrite::Grant(grant), _) => {
                let epoch = granted_epoch.unwrap_or_default();
                RoomOutcome::Lease(Some(grant.row(epoch).report(&self.now)))
            }
            (_, RoomAnswer::Row(row)) => RoomOutcome::Lease(row.map(|r| r.report(&self.now))),
            (_, RoomAnswer::Released(released)) => RoomOutcome::Released(released),
        }
    }
}

/// What a room operation answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoomOutcome {
    /// The room's lease as the store's clock judged it (`Read`, `Ensure`).
    Lease(Option<StoredLease>),
    /// Whether a holding was deleted (`Release`).
    Released(bool),
}

/// An operation on one node registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeOp {
    /// Report the registration while it is valid (N2).
    Read,
    /// Write or replace it for `ttl_ms` (N1).
    Write {
        /// The address.
        grpc_addr: String,
        /// Whole ms in `1..=MAX_TTL`.
        ttl_ms: u64,
    },
    /// Remove it (N3).
    Delete,
}

/// What a backend writes for a node registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeWrite {
    /// Nothing.
    Nothing,
    /// Store this row in place of any other.
    Put(NodeRow),
    /// Remove the row (an unregister, or an expired registration swept on lookup).
    Delete,
}

/// A decided node operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDecision {
    /// What the backend writes, atomically with its read.
    pub write: NodeWrite,
    /// What the front answers.
    pub answer: Option<StoredNode>,
}

impl NodeOp {
    /// Decides the operation on the registration as read at `now_ms`.
    pub fn decide(&self, row: Option<NodeRow>, now_ms: u64) -> NodeDecision {
        match self {
            Self::Read => match row {
                Some(row) if row.in_force(now_ms) => NodeDecision {
                    write: NodeWrite::Nothing,
                    answer: Some(row.report(now_ms)),
                },
                // Expired: drop it so dead nodes do not accumulate.
                Some(_) => NodeDecision {
                    write: NodeWrite::Delete,
                    answer: None,
                },
                None => NodeDecision {
                    write: NodeWrite::Nothing,
                    answer: None,
                },
            },
            Self::Write { grpc_addr, ttl_ms } => {
                let row = NodeRow {
                    grpc_addr: grpc_addr.clone(),
                    updated_ms: now_ms,
                    expires_ms: now_ms.saturating_add(*ttl_ms),
                };
                let answer = Some(row.report(now_ms));
                NodeDecision {
                    write: NodeWrite::Put(row),
                    answer,
                }
            }
            Self::Delete => NodeDecision {
                write: NodeWrite::Delete,
                answer: None,
            },
        }
    }
}

/// What a backend that reads a row and writes it back atomically implements; the lease
/// rules come from [`RoomOp::decide`] and [`NodeOp::decide`], and [`LeaseBackend`] (with
/// it [`Directory`](crate::Directory) and [`NodeRegistry`](crate::NodeRegistry)) comes
/// from the blanket implementation.
///
/// Every argument arrives checked (D9, N4), as for [`LeaseBackend`].
#[async_trait]
pub trait LeaseRows: Send + Sync + 'static {
    /// In one atomic step for `room_id` (D8): read its row and the store's clock (whole ms,
    /// read once the row cannot change under the step, through the directory's
    /// [`StepGuard`](crate::StepGuard) so that forward steps are seen, D11), call [`RoomOp::decide`], and
    /// apply [`RoomDecision::write`]: for a grant, draw the next epoch from a counter that
    /// only grows (D4) and store [`Grant::row`] with it. Returns the decision with the
    /// epoch drawn (`None` when nothing was granted).
    ///
    /// A [`RoomOp::Read`] writes nothing and may skip the atomic step.
    async fn room(
        &self,
        room_id: &str,
        op: RoomOp,
    ) -> Result<(RoomDecision, Option<u64>), LeaseError>;

    /// In one atomic step for `node_id`: read its registration and the store's clock, call
    /// [`NodeOp::decide`], apply [`NodeDecision::write`], return the decision.
    async fn node(&self, node_id: &str, op: NodeOp) -> Result<NodeDecision, LeaseError>;

    /// One batch of a sweep (D12): examines at most `limit` rows of one table (rooms,
    /// then registrations), starting after the last row the previous call on this instance
    /// examined (keep the position in a [`SweepCursor`]), and deletes those the rules call
    /// sweepable ([`LeaseRow::sweepable`] at the store's clock read through the step guard,
    /// [`NodeRow::sweepable`]), each decided again on the row as it stands in the atomic
    /// step that deletes it, so a row granted, renewed or registered again since it was
    /// read stays. Holds no lock longer than one batch. [`Swept::done`] once the pass has
    /// examined both tables to their end; the next call starts a new pass.
    async fn sweep(&self, grace_ms: u64, limit: usize) -> Result<Swept, LeaseError>;

    /// The longest room or node id this backend takes (see
    /// [`LeaseBackend::max_id_len`]).
    fn max_id_len(&self) -> usize {
        crate::MAX_ID_LEN
    }
}

#[async_trait]
impl<T: LeaseRows + ?Sized> LeaseRows for Box<T> {
    async fn room(
        &self,
        room_id: &str,
        op: RoomOp,
    ) -> Result<(RoomDecision, Option<u64>), LeaseError> {
        (**self).room(room_id, op).await
    }
    async fn node(&self, node_id: &str, op: NodeOp) -> Result<NodeDecision, LeaseError> {
        (**self).node(node_id, op).await
    }
    async fn sweep(&self, grace_ms: u64, limit: usize) -> Result<Swept, LeaseError> {
        (**self).sweep(grace_ms, limit).await
    }
    fn max_id_len(&self) -> usize {
        (**self).max_id_len()
    }
}

/// Runs `op` on `backend` and turns the decision into the front's answer.
async fn run_room<B: LeaseRows + ?Sized>(
    backend: &B,
    room_id: &str,
    op: RoomOp,
) -> Result<RoomOutcome, LeaseError> {
    let (decision, epoch) = backend.room(room_id, op).await?;
    if matches!(decision.write, RoomWrite::Grant(_)) && epoch.is_none_or(|e| e == 0) {
        return Err(LeaseError::backend("a grant drew no epoch"));
    }
    Ok(decision.outcome(epoch))
}

fn unexpected() -> LeaseError {
    LeaseError::backend("lease rules: an operation answered another operation's outcome")
}

#[async_trait]
impl<B: LeaseRows> LeaseBackend for B {
    async fn read_lease(&self, room_id: &str) -> Result<Option<StoredLease>, LeaseError> {
        match run_room(self, room_id, RoomOp::Read).await? {
            RoomOutcome::Lease(lease) => Ok(lease),
            RoomOutcome::Released(_) => Err(unexpected()),
        }
    }

    async fn ensure_lease(
        &self,
        room_id: &str,
        node_id: &str,
        ttl_ms: u64,
    ) -> Result<StoredLease, LeaseError> {
        let op = RoomOp::Ensure {
            node_id: node_id.to_owned(),
            ttl_ms,
        };
        match run_room(self, room_id, op).await? {
            RoomOutcome::Lease(Some(lease)) => Ok(lease),
            _ => Err(unexpected()),
        }
    }

    async fn release_lease(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        let op = RoomOp::Release {
            node_id: node_id.to_owned(),
            lease_token: lease_token.to_owned(),
        };
        match run_room(self, room_id, op).await? {
            RoomOutcome::Released(released) => Ok(released),
            RoomOutcome::Lease(_) => Err(unexpected()),
        }
    }

    async fn write_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl_ms: u64,
    ) -> Result<StoredNode, LeaseError> {
        let op = NodeOp::Write {
            grpc_addr: grpc_addr.to_owned(),
            ttl_ms,
        };
        self.node(node_id, op).await?.answer.ok_or_else(unexpected)
    }

    async fn read_node(&self, node_id: &str) -> Result<Option<StoredNode>, LeaseError> {
        Ok(self.node(node_id, NodeOp::Read).await?.answer)
    }

    async fn delete_node(&self, node_id: &str) -> Result<(), LeaseError> {
        self.node(node_id, NodeOp::Delete).await.map(drop)
    }

    fn max_id_len(&self) -> usize {
        LeaseRows::max_id_len(self)
    }
}

/// Everything a row-atomic directory holds, for moving a directory from one backend to
/// another (the server imports an old SQLite lease file into fjall this way).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseDump {
    /// The last epoch the source issued; the destination's next epoch must be above it.
    pub last_epoch: u64,
    /// Every room's row, expired ones included.
    pub leases: Vec<(String, LeaseRow)>,
    /// Every node registration, expired ones included.
    pub nodes: Vec<(String, NodeRow)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(node: &str, token: &str, epoch: u64, expires_ms: u64) -> LeaseRow {
        LeaseRow {
            node_id: node.into(),
            lease_token: token.into(),
            epoch,
            expires_ms,
            ttl_ms: None,
        }
    }

    fn at(ms: u64) -> StoreNow {
        StoreNow::at(ms)
    }

    fn ensure(node: &str, ttl_ms: u64) -> RoomOp {
        RoomOp::Ensure {
            node_id: node.into(),
            ttl_ms,
        }
    }

    #[test]
    fn a_grant_over_another_nodes_expired_row_is_a_takeover() {
        for (before, taken_from) in [
            (None, None),
            (Some(row("a", "t", 3, 1_000)), Some("a")),
            (Some(row("b", "t", 3, 999)), None),
        ] {
            let d = ensure("b", 500).decide(before, at(1_000), "test").unwrap();
            assert!(matches!(d.write, RoomWrite::Grant(_)), "{d:?}");
            assert_eq!(d.taken_over_from(), taken_from, "{d:?}");
        }
        // A renewal, a room held elsewhere and a read take nothing over.
        let held = Some(row("a", "t", 3, 2_000));
        for (op, node) in [(ensure("a", 5_000), "a"), (ensure("b", 500), "b")] {
            let d = op.decide(held.clone(), at(1_000), "test").unwrap();
            assert_eq!(d.taken_over_from(), None, "{node}: {d:?}");
        }
        let read = RoomOp::Read.decide(held, at(3_000), "test").unwrap();
        assert_eq!(read.taken_over_from(), None);
    }

    #[test]
    fn a_free_or_expired_room_is_granted() {
        for before in [
            None,
            Some(row("a", "t", 3, 1_000)),
            Some(row("b", "t", 3, 999)),
        ] {
            let d = ensure("b", 500).decide(before, at(1_000), "test").unwrap();
            let RoomWrite::Grant(grant) = &d.write else {
                panic!("not a grant: {d:?}")
            };
            assert_eq!((grant.node_id.as_str(), grant.expires_ms), ("b", 1_500));
            assert_ne!(grant.lease_token, "t");
            let RoomOutcome::Lease(Some(report)) = d.outcome(Some(4)) else {
                panic!("no lease")
            };
            assert_eq!((report.epoch, report.ttl_left_ms), (4, 500));
        }
    }

    #[test]
    fn a_holder_renews_without_shortening_and_others_are_refused() {
        let held = row("a", "t", 3, 2_000);
        let d = ensure("a", 5_000)
            .decide(Some(held.clone()), at(1_000), "t")
            .unwrap();
        assert_eq!(
            d.write,
            RoomWrite::Extend {
                expires_ms: 6_000,
                ttl_ms: Some(5_000)
            }
        );
        let d = ensure("a", 500)
            .decide(Some(held.clone()), at(1_000), "t")
            .unwrap();
        assert_eq!(d.write, RoomWrite::Nothing);
        assert_eq!(
            d.outcome(None),
            RoomOutcome::Lease(Some(held.report(&at(1_000))))
        );
        let d = ensure("b", 5_000)
            .decide(Some(held.clone()), at(1_000), "t")
            .unwrap();
        assert_eq!(d.write, RoomWrite::Nothing);
        assert_eq!(
            d.outcome(None),
            RoomOutcome::Lease(Some(held.report(&at(1_000))))
        );
    }

    #[test]
    fn only_the_holding_itself_releases() {
        let held = row("a", "t", 3, 2_000);
        let release = |node: &str, token: &str| RoomOp::Release {
            node_id: node.into(),
            lease_token: token.into(),
        };
        // Expired or not, the caller's own holding is deleted.
        for now in [1_000, 5_000] {
            let d = release("a", "t")
                .decide(Some(held.clone()), at(now), "t")
                .unwrap();
            assert_eq!(d.write, RoomWrite::Delete);
            assert_eq!(d.outcome(None), RoomOutcome::Released(true));
        }
        for (node, token) in [("a", "old"), ("b", "t")] {
            let d = release(node, token)
                .decide(Some(held.clone()), at(1_000), "t")
                .unwrap();
            assert_eq!(d.write, RoomWrite::Nothing);
        }
        let d = release("a", "t").decide(None, at(1_000), "t").unwrap();
        assert_eq!(d.outcome(None), RoomOutcome::Released(false));
    }

    fn granted(node: &str, ttl_ms: u64, now: StoreNow) -> LeaseRow {
        let d = ensure(node, ttl_ms).decide(None, now, "t").unwrap();
        let RoomWrite::Grant(grant) = d.write else {
            panic!("not a grant: {d:?}")
        };
        grant.row(1)
    }

    fn lease(d: RoomDecision) -> StoredLease {
        let RoomOutcome::Lease(Some(lease)) = d.outcome(Some(2)) else {
            panic!("no lease")
        };
        lease
    }

    #[test]
    fn after_a_step_back_a_row_keeps_at_most_its_ttl_and_moves_to_the_new_frame() {
        // Granted 1 500 ms at 200 000, then the clock went back two minutes.
        let held = granted("a", 1_500, at(200_000));
        let now = at(80_500);
        assert_eq!(held.left(&now), 1_500, "never more than the ttl granted");
        let d = ensure("b", 9_000)
            .decide(Some(held.clone()), now, "t")
            .unwrap();
        assert_eq!(
            d.write,
            RoomWrite::Extend {
                expires_ms: 82_000,
                ttl_ms: Some(1_500)
            },
            "moved to the new frame, the same promise"
        );
        let report = lease(d);
        assert_eq!((report.node_id.as_str(), report.ttl_left_ms), ("a", 1_500));
        // Once moved, the ttl runs out on the new frame and the room is free.
        let moved = LeaseRow {
            expires_ms: 82_000,
            ..held.clone()
        };
        let d = ensure("b", 9_000)
            .decide(Some(moved), at(82_000), "t")
            .unwrap();
        assert!(matches!(d.write, RoomWrite::Grant(_)));
        // The holder renewing after the step keeps token and epoch.
        let d = ensure("a", 1_000).decide(Some(held), now, "t").unwrap();
        assert_eq!(lease(d).ttl_left_ms, 1_500);
    }

    #[test]
    fn after_a_forward_step_a_row_written_before_it_is_held_for_its_ttl() {
        // Granted 10 s at 100 000; 200 ms later the clock jumped 120 s ahead.
        let held = granted("a", 10_000, at(100_000));
        let step = |elapsed_ms| StoreNow {
            ms: 220_200 + elapsed_ms,
            step: Some(crate::step::ForwardStep {
                wall_ms: 220_200,
                elapsed_ms,
            }),
        };
        assert_eq!(held.left(&at(220_200)), 0, "expired on the clock alone");
        assert_eq!(held.left(&step(0)), 10_000);
        let d = ensure("b", 10_000)
            .decide(Some(held.clone()), step(0), "t")
            .unwrap();
        assert_eq!(
            d.write,
            RoomWrite::Extend {
                expires_ms: 230_200,
                ttl_ms: Some(10_000)
            }
        );
        assert_eq!(lease(d).node_id, "a", "D3: held elsewhere");
        // The holder renews within the hold: same token and epoch (D2).
        let d = ensure("a", 10_000)
            .decide(Some(held.clone()), step(4_000), "t")
            .unwrap();
        assert_eq!(
            d.write,
            RoomWrite::Extend {
                expires_ms: 234_200,
                ttl_ms: Some(10_000)
            }
        );
        assert_eq!(lease(d).lease_token, held.lease_token);
        // The hold ends a ttl after the step; a row written after the step has none.
        let d = ensure("b", 10_000)
            .decide(Some(held), step(10_000), "t")
            .unwrap();
        assert!(matches!(d.write, RoomWrite::Grant(_)));
        let after = granted("a", 1_000, at(221_000));
        assert_eq!(after.left(&step(2_000)), 0);
    }

    #[test]
    fn rows_an_older_build_wrote_are_judged_on_their_expiry_alone() {
        let old = row("a", "t", 3, 200_000);
        assert_eq!(old.left(&at(80_000)), 120_000);
        let d = ensure("b", 5).decide(Some(old), at(80_000), "t").unwrap();
        assert_eq!(d.write, RoomWrite::Nothing);
    }

    #[test]
    fn rows_this_crate_never_writes_are_corrupt() {
        for bad in [row("", "t", 1, 9), row("a", "", 1, 9), row("a", "t", 0, 9)] {
            for op in [RoomOp::Read, ensure("a", 5)] {
                assert!(matches!(
                    op.decide(Some(bad.clone()), at(1), "test"),
                    Err(LeaseError::Corrupt(_))
                ));
            }
        }
    }

    #[test]
    fn a_row_is_sweepable_only_past_its_grace_and_never_while_a_step_holds_it() {
        let held = granted("a", 10_000, at(100_000));
        assert!(!held.sweepable(&at(105_000), 0), "in force");
        assert!(held.sweepable(&at(110_000), 0));
        assert!(!held.sweepable(&at(169_999), 60_000), "within the grace");
        assert!(held.sweepable(&at(170_000), 60_000));
        // Written before a forward step the directory saw: held for its ttl, not swept.
        let after_step = StoreNow {
            ms: 3_700_000,
            step: Some(crate::step::ForwardStep {
                wall_ms: 3_600_000,
                elapsed_ms: 4_000,
            }),
        };
        assert!(held.in_force(&after_step));
        assert!(!held.sweepable(&after_step, 60_000));
        // Written before the clock went back: its expiry is ahead of the clock.
        assert!(!held.sweepable(&at(50_000), 0));
        let node = NodeRow {
            grpc_addr: "a:1".into(),
            updated_ms: 1_000,
            expires_ms: 2_000,
        };
        assert!(!node.sweepable(1_999, 0));
        assert!(!node.sweepable(2_500, 1_000));
        assert!(node.sweepable(3_000, 1_000));
    }

    #[test]
    fn registrations_expire_and_are_swept_on_read() {
        let written = NodeOp::Write {
            grpc_addr: "10.0.0.1:7".into(),
            ttl_ms: 100,
        }
        .decide(None, 1_000);
        let NodeWrite::Put(stored) = written.write else {
            panic!("not written")
        };
        let read = NodeOp::Read.decide(Some(stored.clone()), 1_050);
        assert_eq!(read.write, NodeWrite::Nothing);
        assert_eq!(
            read.answer.map(|n| (n.age_ms, n.ttl_left_ms)),
            Some((50, 50))
        );
        let read = NodeOp::Read.decide(Some(stored), 1_100);
        assert_eq!((read.write, read.answer), (NodeWrite::Delete, None));
    }
}
