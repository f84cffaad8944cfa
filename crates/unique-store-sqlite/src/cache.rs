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
//!    the writer sets each written key to the state it knows the row has (see
//!    [`RecordCache::record_batch`]), or removes it when it does not know;
//! 4. this store is the only writer of the file, which the store enforces with
//!    an exclusive lock on the file while the cache is on (see `crate::exclusive`).
//!
//! Between 2 and 3 every read of a written key reads SQLite, so no read can see
//! the old state after another read saw the new one. The cache is bounded:
//! a full shard drops an arbitrary entry, which is always safe since a miss
//! reads SQLite.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard, PoisonError};

use unique_core::{CasOutcome, Error, OwnerState};

use crate::records::{Write, Written};

/// Shards of the map, each behind its own lock (at most this many).
const SHARDS: usize = 16;

/// What the cache knows about one key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// The committed row of the key, exactly as a read of the file returns it.
    Committed(OwnerState),
    /// A batch writing the key is in progress: reads go to SQLite.
    Pending,
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
            Some(Entry::Pending) | None => None,
        }
    }

    /// Writer only, before a batch begins: a cached `pk` becomes `Pending`
    /// (an absent one stays absent).
    pub(crate) fn mark_pending(&self, pk: &str) {
        if let Some(entry) = self.shard(pk).get_mut(pk) {
            *entry = Entry::Pending;
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
    /// has, in batch order so the last write of a key wins, or forgets the key
    /// when the result does not say exactly what the row is.
    pub(crate) fn record_batch(&self, writes: &[Write], results: &[Result<Written, Error>]) {
        for (write, result) in writes.iter().zip(results) {
            match committed_state(write, result) {
                Some(state) => self.set_committed(write.pk(), state),
                None => self.forget(write.pk()),
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
/// says exactly what it is (the same state a read of the row returns, see
/// `OwnerState::from_record`). `None`: forget the key.
fn committed_state(write: &Write, result: &Result<Written, Error>) -> Option<OwnerState> {
    match (write, result.as_ref().ok()?) {
        (
            Write::Claim {
                decoded: Some(decoded),
                claim_id,
                ..
            },
            Written::Claim(CasOutcome::Written { generation }),
        ) => Some(OwnerState {
            exists: true,
            generation: *generation,
            owner: Some(decoded.clone()),
            owner_corrupt: false,
            claim_id: Some(claim_id.clone()),
            ..OwnerState::default()
        }),
        // Read inside the transaction, after the batch's earlier writes.
        (
            Write::Claim { .. },
            Written::Claim(CasOutcome::LostRace {
                current: Some(state),
            }),
        ) => Some(state.clone()),
        // RELEASE keeps gen, empties owner and sets cid NULL.
        (Write::Release { generation, .. }, Written::Released(true)) => Some(OwnerState {
            exists: true,
            generation: *generation,
            owner: None,
            owner_corrupt: false,
            claim_id: None,
            ..OwnerState::default()
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unique_core::{Fence, Owner};

    fn state(generation: i64, cid: &str) -> OwnerState {
        OwnerState {
            exists: true,
            generation,
            owner: Some(Owner::new("r", "c", "http://h/k")),
            owner_corrupt: false,
            claim_id: Some(cid.into()),
            ..OwnerState::default()
        }
    }

    fn claim(pk: &str, cid: &str) -> Write {
        Write::claim(
            pk.into(),
            &Owner::new("r", "c", "http://h/k"),
            cid.into(),
            Fence::FirstLogin.into(),
        )
        .expect("a valid owner")
    }

    #[test]
    fn pending_and_absent_keys_are_misses() {
        let cache = RecordCache::new(8);
        assert_eq!(cache.get("a"), None);
        cache.set_committed("a", state(1, "c1"));
        assert_eq!(cache.get("a"), Some(state(1, "c1")));
        cache.mark_pending("a");
        assert_eq!(cache.get("a"), None, "a pending key reads SQLite");
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
        let writes = [claim("a", "c4"), Write::release("a".into(), 2)];
        let results = [
            Ok(Written::Claim(CasOutcome::Written { generation: 2 })),
            Err(Error::unavailable("injected")),
        ];
        cache.begin_batch(&writes);
        cache.record_batch(&writes, &results);
        assert_eq!(cache.get("a"), None);

        // A held release after a claim leaves the tombstone.
        let writes = [claim("a", "c5"), Write::release("a".into(), 3)];
        let results = [
            Ok(Written::Claim(CasOutcome::Written { generation: 3 })),
            Ok(Written::Released(true)),
        ];
        cache.record_batch(&writes, &results);
        let tombstone = OwnerState {
            exists: true,
            generation: 3,
            owner: None,
            owner_corrupt: false,
            claim_id: None,
            ..OwnerState::default()
        };
        assert_eq!(cache.get("a"), Some(tombstone));
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
