//! The record cache: recently written records kept in memory, so that a read of
//! a key this store wrote is answered without a SQLite read transaction.
//!
//! Invariant: a [`Entry::Committed`] state is the committed row of its key in
//! the file. It holds because
//!
//! 1. only the writer thread puts states in (a reader that inserted what it read
//!    could race with a commit and put an older state back);
//! 2. before a batch begins, the writer marks every key of the batch that is
//!    cached as [`Entry::Pending`], and a read that finds `Pending` (or nothing)
//!    reads SQLite, which is always the truth;
//! 3. after the batch's `COMMIT` returned, and before any caller is answered,
//!    the writer sets each written key, once, to the state it knows the row has
//!    after the whole batch (see [`RecordCache::record_batch`]), or removes it
//!    when it does not know;
//! 4. this store is the only writer of the file, which every store enforces
//!    with an exclusive lock for its life, cache on or off (see
//!    `crate::exclusive`); only tools that bypass the store (the `sqlite3` CLI)
//!    can write behind its back, and must be followed by `forget_cached`.
//!
//! Between 2 and 3 every read of a written key reads SQLite, so no read can see
//! the old state after another read saw the new one. The cache is bounded:
//! a full shard drops an arbitrary entry, which is always safe since a miss
//! reads SQLite.

use std::collections::HashMap;
use std::collections::hash_map::Entry as Slot;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard, PoisonError};

use unique_core::{CasOutcome, Error, OwnerState};

use crate::records::{Decoded, Write, Written};

/// Shards of the map, each behind its own lock (at most this many).
const SHARDS: usize = 16;

/// What the cache knows about one key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// The committed row of the key, exactly as a read of the file returns it.
    Committed(OwnerState),
    /// A batch writing the key is in progress: reads go to SQLite. `before` is
    /// the committed row from before the batch, for the writer only: a release
    /// keeps the recent claims (`won`) of the row it releases, which its result
    /// does not carry.
    Pending { before: OwnerState },
}

/// A bounded, sharded map from partition key to its committed record.
#[derive(Debug)]
pub(crate) struct RecordCache {
    shards: Box<[Mutex<HashMap<String, Entry>>]>,
    per_shard: usize,
    hasher: RandomState,
}

impl RecordCache {
    /// A cache of at most `capacity` records (`capacity` > 0).
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let shards = capacity.min(SHARDS);
        Self {
            shards: (0..shards).map(|_| Mutex::new(HashMap::new())).collect(),
            // Rounded down: the total never exceeds `capacity`.
            per_shard: capacity / shards,
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, pk: &str) -> MutexGuard<'_, HashMap<String, Entry>> {
        // The modulo keeps the index below the shard count, so it fits usize.
        #[allow(clippy::cast_possible_truncation)]
        let index = (self.hasher.hash_one(pk) % self.shards.len() as u64) as usize;
        // A panic while holding a shard cannot leave a HashMap half-updated.
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The committed record of `pk`, when cached and not being written.
    pub(crate) fn get(&self, pk: &str) -> Option<OwnerState> {
        match self.shard(pk).get(pk) {
            Some(Entry::Committed(state)) => Some(state.clone()),
            Some(Entry::Pending { .. }) | None => None,
        }
    }

    /// Writer only, before a batch begins: a cached `pk` becomes `Pending`,
    /// keeping its committed row (an absent one stays absent).
    pub(crate) fn mark_pending(&self, pk: &str) {
        if let Some(entry) = self.shard(pk).get_mut(pk)
            && let Entry::Committed(state) = entry
        {
            let before = std::mem::take(state);
            *entry = Entry::Pending { before };
        }
    }

    /// Writer only: the committed row of `pk` the cache knows from before the
    /// current batch (pending or not).
    fn before_batch(&self, pk: &str) -> Option<OwnerState> {
        match self.shard(pk).get(pk)? {
            Entry::Committed(state) | Entry::Pending { before: state } => Some(state.clone()),
        }
    }

    /// Writer only, after a commit: `pk`'s committed row is `state`.
    fn set_committed(&self, pk: &str, state: OwnerState) {
        let mut shard = self.shard(pk);
        if let Some(entry) = shard.get_mut(pk) {
            *entry = Entry::Committed(state);
            return;
        }
        if shard.len() >= self.per_shard {
            // Any entry will do: a miss reads SQLite.
            if let Some(victim) = shard.keys().next().cloned() {
                shard.remove(&victim);
            }
        }
        shard.insert(pk.to_owned(), Entry::Committed(state));
    }

    /// Drops what is cached for `pk`; its next read goes to SQLite.
    pub(crate) fn forget(&self, pk: &str) {
        self.shard(pk).remove(pk);
    }

    /// Writer only: before `writes` begin, every cached key of theirs is `Pending`.
    pub(crate) fn begin_batch(&self, writes: &[Write]) {
        for write in writes {
            self.mark_pending(write.pk());
        }
    }

    /// Writer only, once the batch's transaction is over (committed or not) and
    /// before its callers are answered: sets each written key to the row it now
    /// has, or forgets the key when the results do not say exactly what the row
    /// is.
    ///
    /// The rows are worked out in batch order first (the last write of a key
    /// wins; a release keeps the recent claims of the row before it) and each key
    /// is set once, after: setting them write by write would let a read see the
    /// row of an earlier write of the batch after another read had seen, in the
    /// file, the row of a later one.
    pub(crate) fn record_batch(&self, writes: &[Write], results: &[Result<Written, Error>]) {
        let mut rows: HashMap<&str, Option<OwnerState>> = HashMap::with_capacity(writes.len());
        for (write, result) in writes.iter().zip(results) {
            let pk = write.pk();
            match rows.entry(pk) {
                Slot::Occupied(mut row) => {
                    let before = row.get_mut().take();
                    *row.get_mut() = committed_state(write, result, || before);
                }
                Slot::Vacant(row) => {
                    row.insert(committed_state(write, result, || self.before_batch(pk)));
                }
            }
        }
        for (pk, row) in rows {
            match row {
                Some(state) => self.set_committed(pk, state),
                None => self.forget(pk),
            }
        }
    }

    /// Number of entries (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

/// The row `write` left when its batch committed with `result`, when the result
/// (and, for a release, `before`: the row before this write, when known) says
/// exactly what it is: the same state a read of the row returns, see
/// `OwnerState::from_record`. `None`: forget the key.
fn committed_state(
    write: &Write,
    result: &Result<Written, Error>,
    before: impl FnOnce() -> Option<OwnerState>,
) -> Option<OwnerState> {
    match (write, result.as_ref().ok()?) {
        (
            Write::Claim {
                decoded:
                    Some(Decoded {
                        owner,
                        recent_claims,
                    }),
                claim_id,
                ..
            },
            Written::Claim(CasOutcome::Written { generation }),
        ) => Some(OwnerState {
            exists: true,
            generation: *generation,
            owner: Some(owner.clone()),
            owner_corrupt: false,
            claim_id: Some(claim_id.clone()),
            recent_claims: recent_claims.clone(),
        }),
        // Read inside the transaction, after the batch's earlier writes.
        (
            Write::Claim { .. },
            Written::Claim(CasOutcome::LostRace {
                current: Some(state),
            }),
        ) => Some(state.clone()),
        // RELEASE keeps gen and won, empties owner and sets cid NULL. Its
        // condition held, so the row before it was at its gen: a known row that
        // is not is no row this store wrote, and is forgotten.
        (Write::Release { generation, .. }, Written::Released(true)) => before()
            .filter(|row| row.exists && row.generation == *generation)
            .map(|row| OwnerState {
                exists: true,
                generation: *generation,
                owner: None,
                owner_corrupt: false,
                claim_id: None,
                recent_claims: row.recent_claims,
            }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unique_core::{Fence, Owner, RecentClaims};

    /// The row a claim `cid` at `generation` from a snapshot without recent
    /// claims writes.
    fn state(generation: i64, cid: &str) -> OwnerState {
        OwnerState {
            exists: true,
            generation,
            owner: Some(Owner::new("r", "c", "http://h/k")),
            owner_corrupt: false,
            claim_id: Some(cid.into()),
            recent_claims: RecentClaims::from_wins([(cid, generation)]),
        }
    }

    /// A claim `cid` of `pk` at `generation` from a snapshot without recent claims.
    fn claim_at(pk: &str, cid: &str, generation: i64) -> Write {
        let fence = match generation {
            1 => Fence::FirstLogin,
            _ => Fence::Tombstone {
                generation: generation - 1,
            },
        };
        Write::claim(
            pk.into(),
            &Owner::new("r", "c", "http://h/k"),
            cid.into(),
            fence.into(),
        )
        .expect("a valid owner")
    }

    fn claim(pk: &str, cid: &str) -> Write {
        claim_at(pk, cid, 1)
    }

    fn tombstone(generation: i64, recent_claims: RecentClaims) -> OwnerState {
        OwnerState {
            exists: true,
            generation,
            owner: None,
            owner_corrupt: false,
            claim_id: None,
            recent_claims,
        }
    }

    #[test]
    fn pending_and_absent_keys_are_misses() {
        let cache = RecordCache::new(8);
        assert_eq!(cache.get("a"), None);
        cache.set_committed("a", state(1, "c1"));
        assert_eq!(cache.get("a"), Some(state(1, "c1")));
        cache.mark_pending("a");
        assert_eq!(cache.get("a"), None, "a pending key reads SQLite");
        cache.mark_pending("a");
        assert_eq!(
            cache.before_batch("a"),
            Some(state(1, "c1")),
            "a pending key keeps its row for the writer, marked twice too"
        );
        cache.mark_pending("b");
        assert_eq!(cache.get("b"), None);
        assert_eq!(cache.len(), 1, "marking never inserts an absent key");
    }

    #[test]
    fn the_last_write_of_a_key_in_a_batch_wins() {
        // Room for both keys in any shard (with 8, one per shard, "a" and "b"
        // evicted each other whenever they hashed to the same shard).
        let cache = RecordCache::new(64);
        let writes = [claim("a", "c1"), claim("a", "c2"), claim("b", "c3")];
        let lost = state(1, "c1");
        let results = [
            Ok(Written::Claim(CasOutcome::Written { generation: 1 })),
            Ok(Written::Claim(CasOutcome::LostRace {
                current: Some(lost.clone()),
            })),
            Ok(Written::Claim(CasOutcome::Written { generation: 1 })),
        ];
        cache.begin_batch(&writes);
        cache.record_batch(&writes, &results);
        assert_eq!(cache.get("a"), Some(lost));
        assert_eq!(cache.get("b"), Some(state(1, "c3")));

        // A failed write after a successful one forgets the key.
        let writes = [claim_at("a", "c4", 2), Write::release("a".into(), 2)];
        let results = [
            Ok(Written::Claim(CasOutcome::Written { generation: 2 })),
            Err(Error::unavailable("injected")),
        ];
        cache.begin_batch(&writes);
        cache.record_batch(&writes, &results);
        assert_eq!(cache.get("a"), None);

        // A held release after a claim leaves the tombstone, with the claim's
        // recent claims.
        let writes = [claim_at("a", "c5", 3), Write::release("a".into(), 3)];
        let results = [
            Ok(Written::Claim(CasOutcome::Written { generation: 3 })),
            Ok(Written::Released(true)),
        ];
        cache.record_batch(&writes, &results);
        assert_eq!(
            cache.get("a"),
            Some(tombstone(3, RecentClaims::from_wins([("c5", 3)])))
        );
    }

    /// C9: a release keeps the recent claims of the row it releases, known from
    /// the cache before the batch (pending meanwhile) or from an earlier write
    /// of the batch; without that row the key is forgotten.
    #[test]
    fn a_release_keeps_the_recent_claims_of_the_row_before_it() {
        let cache = RecordCache::new(64);
        let wins = RecentClaims::from_wins([("c1", 1), ("c2", 2)]);
        cache.set_committed(
            "a",
            OwnerState {
                recent_claims: wins.clone(),
                ..state(2, "c2")
            },
        );
        let writes = [Write::release("a".into(), 2)];
        cache.begin_batch(&writes);
        cache.record_batch(&writes, &[Ok(Written::Released(true))]);
        assert_eq!(cache.get("a"), Some(tombstone(2, wins.clone())));

        // Released again (a release of a tombstone holds too): still the list.
        cache.begin_batch(&writes);
        cache.record_batch(&writes, &[Ok(Written::Released(true))]);
        assert_eq!(cache.get("a"), Some(tombstone(2, wins)));

        // Nothing known of the row before: forgotten.
        let writes = [Write::release("b".into(), 4)];
        cache.begin_batch(&writes);
        cache.record_batch(&writes, &[Ok(Written::Released(true))]);
        assert_eq!(cache.get("b"), None);
        assert_eq!(cache.len(), 1);

        // A known row at another gen is no row this store wrote: forgotten.
        cache.set_committed("c", state(5, "c5"));
        let writes = [Write::release("c".into(), 4)];
        cache.record_batch(&writes, &[Ok(Written::Released(true))]);
        assert_eq!(cache.get("c"), None);

        // An earlier write of the batch whose row is unknown: forgotten.
        cache.set_committed("d", state(1, "c1"));
        let writes = [claim_at("d", "c2", 2), Write::release("d".into(), 2)];
        let results = [
            Ok(Written::Claim(CasOutcome::LostRace { current: None })),
            Ok(Written::Released(true)),
        ];
        cache.begin_batch(&writes);
        cache.record_batch(&writes, &results);
        assert_eq!(cache.get("d"), None);
    }

    #[test]
    fn unknown_outcomes_forget_the_key() {
        let cache = RecordCache::new(8);
        let outcomes: [fn() -> Result<Written, Error>; 3] = [
            || Ok(Written::Released(false)),
            || Ok(Written::Claim(CasOutcome::LostRace { current: None })),
            || Err(Error::unavailable("commit failed")),
        ];
        for outcome in outcomes {
            cache.set_committed("a", state(1, "c1"));
            cache.record_batch(&[Write::release("a".into(), 1)], &[outcome()]);
            assert_eq!(cache.get("a"), None, "{:?}", outcome());
        }
    }

    #[test]
    fn eviction_keeps_the_capacity() {
        for capacity in [1, 5, 16, 17, 100] {
            let cache = RecordCache::new(capacity);
            for i in 0..1000 {
                cache.set_committed(&format!("k{i}"), state(1, "c"));
                assert!(cache.len() <= capacity, "{capacity}: {}", cache.len());
            }
            // The most recent write of each key is there.
            assert_eq!(cache.get("k999"), Some(state(1, "c")));
            assert!(cache.len() >= capacity.min(SHARDS) / 2, "{capacity}");
        }
    }
}
