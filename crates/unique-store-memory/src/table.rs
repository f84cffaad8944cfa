//! The sharded record table and its fenced-write primitive.
//!
//! Everything here is synchronous and takes one shard lock per operation, so the
//! condition check and the write of a claim (C3, C4) or a release (C5) happen at
//! one linearization point. The loom models in `loom_models.rs` check this code
//! through the [`crate::sync`] shim.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use unique_core::{CasOutcome, Error, Fence, Key, Owner, RecentClaims, UserKey, UserSession};

use crate::record::{OwnerAttr, Record, state_of};
use crate::sync::{Mutex, lock};

type Shard = Mutex<ShardMap>;

/// One shard's records, and the index that lets a listing (C10) find every record of a
/// user without scanning the shard. The shard is picked by uid alone, so all of a user's
/// slots live in one shard, under one lock.
#[derive(Default)]
struct ShardMap {
    records: HashMap<Key, Record>,
    /// The non-default slots of each user that has one, in order of creation. Records live
    /// forever, so a slot is added when its record is created and never removed. A user
    /// with only the default slot has no entry: the index costs such users nothing.
    slots: HashMap<UserKey, Vec<String>>,
}

impl ShardMap {
    /// Stores `record` for `key`, indexing the slot when this creates the key's record.
    fn insert(&mut self, key: &Key, record: Record) {
        let created = self.records.insert(key.clone(), record).is_none();
        if created && !key.slot.is_empty() {
            self.slots
                .entry(key.user())
                .or_default()
                .push(key.slot.clone());
        }
    }

    /// The user's sessions: the default slot's record and each indexed slot's, decided
    /// by [`unique_core::listed_session`] as in every store.
    fn sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let slots = self.slots.get(user).map_or(&[][..], Vec::as_slice);
        let mut sessions = Vec::new();
        // One key, its slot rewritten in place, to look up every record of the user.
        let mut key = user.key("");
        for slot in std::iter::once("").chain(slots.iter().map(String::as_str)) {
            slot.clone_into(&mut key.slot);
            let state = state_of(self.records.get(&key));
            sessions.extend(unique_core::listed_session(slot, state)?);
        }
        Ok(sessions)
    }
}

/// 2^64 / φ, the multiplier of Fibonacci hashing.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

/// Records by key, spread over a power-of-two number of independently locked shards.
pub(crate) struct Table {
    shards: Box<[Shard]>,
    /// Random per table, so which uids share a shard is not predictable from outside.
    seed: u64,
    /// `64 - log2(shard count)`.
    shift: u32,
}

impl Table {
    /// A table with at least `shards` shards (rounded up to a power of two, at least 1).
    pub(crate) fn with_shards(shards: usize) -> Self {
        let count = shards.max(1).next_power_of_two();
        Self {
            shards: (0..count)
                .map(|_| Mutex::new(ShardMap::default()))
                .collect(),
            seed: RandomState::new().hash_one(0_u8),
            shift: 64 - count.trailing_zeros(),
        }
    }

    /// How many shards the table has.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard of `key`, picked from its uid alone. The shard's map hashes the
    /// whole key again (SipHash, keyed per table), so a second SipHash here would
    /// double the hashing of every operation. Keys that share a uid across
    /// tenants share a lock, never a record.
    /// Every slot of a user is in its uid's shard, which is what lets a listing
    /// read them all under one lock.
    fn shard(&self, key: &Key) -> &Shard {
        &self.shards[self.shard_index(key.uid)]
    }

    fn shard_index(&self, uid: i64) -> usize {
        // Fibonacci hashing: the top bits of the product are well mixed; `shift`
        // keeps exactly log2(shards) of them (none for a single shard, where the
        // shift is 64), so the cast cannot truncate.
        let mixed = (uid.cast_unsigned() ^ self.seed).wrapping_mul(FIBONACCI);
        #[allow(clippy::cast_possible_truncation)]
        let index = mixed.checked_shr(self.shift).unwrap_or(0) as usize;
        index
    }

    /// Runs `f` on each key's record, answering in the order of `keys`, in one pass that
    /// takes each shard's lock once for all of that shard's keys. Each read is
    /// linearizable on its own; there is no snapshot across shards (C1 is per key).
    pub(crate) fn read_many<R>(&self, keys: &[Key], f: impl Fn(Option<&Record>) -> R) -> Vec<R> {
        let mut order: Vec<(usize, usize)> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| (self.shard_index(key.uid), i))
            .collect();
        order.sort_unstable();
        let mut answers: Vec<Option<R>> = keys.iter().map(|_| None).collect();
        for group in order.chunk_by(|a, b| a.0 == b.0) {
            let shard = lock(&self.shards[group[0].0]);
            for &(_, i) in group {
                answers[i] = Some(f(shard.records.get(&keys[i])));
            }
        }
        answers
            .into_iter()
            .map(|a| a.expect("every position is read once"))
            .collect()
    }

    /// Runs `f` on the key's record (or `None`) under the shard lock.
    pub(crate) fn read_with<R>(&self, key: &Key, f: impl FnOnce(Option<&Record>) -> R) -> R {
        f(lock(self.shard(key)).records.get(key))
    }

    /// The user's sessions (C10), read under its shard's one lock: each record as it
    /// stands at that linearization point. `Unavailable` when a stored owner is corrupt.
    pub(crate) fn sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        lock(&self.shards[self.shard_index(user.uid)]).sessions(user)
    }

    /// The fenced claim: checks `fence` against the stored record and, when it
    /// holds, writes `gen`, `owner` and `cid` together, all under one lock.
    ///
    /// Returns the written gen, or the lost race carrying the record as it
    /// stands when the condition failed (nothing written).
    pub(crate) fn claim(
        &self,
        key: &Key,
        fence: Fence<'_>,
        owner: &Owner,
        claim_id: &str,
        recent: RecentClaims,
    ) -> CasOutcome {
        let generation = fence.next_generation();
        let mut map = lock(self.shard(key));
        match map.records.get_mut(key) {
            Some(record) if fence.holds(Some(record.pins())) => {
                record.overwrite(generation, owner, claim_id, recent);
            }
            None if fence.holds(None) => {
                map.insert(
                    key,
                    Record {
                        generation,
                        owner: OwnerAttr::Valid(owner.clone()),
                        claim_id: Some(claim_id.to_owned()),
                        recent,
                    },
                );
            }
            current => {
                return CasOutcome::LostRace {
                    current: Some(state_of(current.as_deref())),
                };
            }
        }
        CasOutcome::Written { generation }
    }

    /// The fenced tombstone: when the stored gen equals `generation`, empties the
    /// owner and removes the cid, keeping the gen. Returns whether the condition held.
    pub(crate) fn release(&self, key: &Key, generation: i64) -> bool {
        if generation <= 0 {
            return false;
        }
        let mut map = lock(self.shard(key));
        match map.records.get_mut(key) {
            Some(record) if record.generation == generation => {
                record.owner = OwnerAttr::Empty;
                record.claim_id = None;
                true
            }
            _ => false,
        }
    }

    /// Unconditional write (test hook; bypasses every fence).
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn put(&self, key: &Key, record: Record) {
        lock(self.shard(key)).insert(key, record);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn shard_index(table: &Table, uid: i64) -> usize {
        let shard = table.shard(&Key::new("p", "e", uid));
        table
            .shards
            .iter()
            .position(|s| std::ptr::eq(s, shard))
            .expect("a shard of this table")
    }

    #[test]
    fn consecutive_uids_spread_over_every_shard() {
        let table = Table::with_shards(64);
        let mut hits = [0_u32; 64];
        for uid in 1..=64 * 100 {
            hits[shard_index(&table, uid)] += 1;
        }
        // Fibonacci hashing spreads a run of keys almost evenly.
        assert!(hits.iter().all(|n| (50..=150).contains(n)), "{hits:?}");
    }

    fn claim_first(table: &Table, key: &Key) {
        let outcome = table.claim(
            key,
            Fence::FirstLogin,
            &Owner::new("", "", "http://h"),
            "c",
            RecentClaims::new(),
        );
        assert_eq!(outcome, CasOutcome::Written { generation: 1 });
    }

    fn indexed(table: &Table) -> Vec<(UserKey, Vec<String>)> {
        let mut all: Vec<_> = table
            .shards
            .iter()
            .flat_map(|shard| {
                let shard = lock(shard);
                shard
                    .slots
                    .iter()
                    .map(|(user, slots)| (user.clone(), slots.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort();
        all
    }

    #[test]
    fn default_slot_users_are_not_indexed() {
        let table = Table::with_shards(4);
        for uid in 1..=100 {
            claim_first(&table, &Key::new("p", "e", uid));
        }
        table.release(&Key::new("p", "e", 1), 1);
        assert_eq!(indexed(&table), Vec::new());
    }

    #[test]
    fn a_slot_is_indexed_once_when_its_record_is_created() {
        let table = Table::with_shards(4);
        let user = UserKey::new("p", "e", 7);
        claim_first(&table, &user.key("pc"));
        table.release(&user.key("pc"), 1);
        table.put(
            &user.key("pc"),
            Record {
                generation: 3,
                owner: OwnerAttr::Empty,
                claim_id: None,
                recent: RecentClaims::new(),
            },
        );
        claim_first(&table, &user.key(""));
        table.put(
            &user.key("mobile"),
            Record {
                generation: 0,
                owner: OwnerAttr::Empty,
                claim_id: None,
                recent: RecentClaims::new(),
            },
        );
        assert_eq!(
            indexed(&table),
            vec![(user, vec!["pc".to_owned(), "mobile".to_owned()])]
        );
    }

    #[test]
    fn one_shard_takes_every_key() {
        let table = Table::with_shards(1);
        for uid in [1, 2, i64::MAX, -5] {
            assert_eq!(shard_index(&table, uid), 0);
        }
        assert_eq!(Table::with_shards(3).shard_count(), 4);
    }
}
