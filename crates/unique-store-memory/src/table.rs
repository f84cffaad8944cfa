//! The sharded record table and its fenced-write primitive.
//!
//! Everything here is synchronous and takes one shard lock per operation, so the
//! condition check and the write of a claim (C3, C4) or a release (C5) happen at
//! one linearization point. (A claim first finds its shared owner in `owners.rs`,
//! under that pool's own lock, released before the shard's is taken; a write-first
//! claim finds it under the shard's lock, once it knows the record vacant. The pool
//! never takes a shard's lock, so the two never wait on each other in a cycle.) The loom models in `loom_models.rs` check this code
//! through the [`crate::sync`] shim.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};

use unique_core::{
    CasOutcome, Error, Fence, Key, Owner, RecentClaims, UserKey, UserSession, VacantClaim,
};

use crate::owners::Owners;
use crate::record::{Record, state_of};
use crate::sync::{Mutex, lock};
use crate::won::Won;

type Shard = Mutex<ShardMap>;

/// Where a record lives in its shard: its uid, and the ids the shard gave its
/// tenant (`project` and `env`) and its slot. Sixteen bytes instead of a [`Key`]'s
/// three strings; the names are kept once per shard. Records live forever, so
/// an id, once given, is never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    uid: i64,
    tenant: u32,
    /// 0 is the default slot.
    slot: u32,
}

impl Hash for Place {
    // Two words for SipHash instead of three writes.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_i64(self.uid);
        state.write_u64(u64::from(self.tenant) << 32 | u64::from(self.slot));
    }
}

/// A user in its shard: the key of the index of slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Resident {
    uid: i64,
    tenant: u32,
}

/// One shard's records, the names their [`Place`]s stand for, and the index that
/// lets a listing (C10) find every record of a user without scanning the shard.
/// The shard is picked by uid alone, so all of a user's slots live in one shard,
/// under one lock.
#[derive(Default)]
struct ShardMap {
    records: HashMap<Place, Record>,
    tenants: Tenants,
    /// Ids of the non-default slots, from 1, and their names (id 1 first).
    slot_ids: HashMap<Box<str>, u32>,
    slot_names: Vec<Box<str>>,
    /// The non-default slots of each user that has one, in order of creation. Records live
    /// forever, so a slot is added when its record is created and never removed. A user
    /// with only the default slot has no entry: the index costs such users nothing.
    slots: HashMap<Resident, Box<[u32]>>,
}

/// Up to this many tenants, a shard finds a tenant's id by comparing names, which
/// costs less than hashing them; past it, by a hash map.
const FEW_TENANTS: usize = 8;

/// The tenants (`project`, `env`) of one shard's records, by id.
#[derive(Default)]
struct Tenants {
    names: Vec<(Box<str>, Box<str>)>,
    /// Ids by [`tenant_name`], filled once there are more than [`FEW_TENANTS`].
    ids: HashMap<Box<[u8]>, u32>,
    /// Where [`tenant_name`] builds the name it looks up, so a lookup allocates nothing.
    scratch: Vec<u8>,
}

/// The name a tenant is hashed by: `project`'s length, then `project` and `env`.
/// The length keeps any two pairs apart, whatever bytes the strings hold.
fn tenant_name<'a>(scratch: &'a mut Vec<u8>, project: &str, env: &str) -> &'a [u8] {
    scratch.clear();
    scratch.extend_from_slice(&(project.len() as u64).to_le_bytes());
    scratch.extend_from_slice(project.as_bytes());
    scratch.extend_from_slice(env.as_bytes());
    scratch
}

impl Tenants {
    fn get(&mut self, project: &str, env: &str) -> Option<u32> {
        if self.names.len() <= FEW_TENANTS {
            let found = self
                .names
                .iter()
                .position(|(p, e)| **p == *project && **e == *env)?;
            return Some(next_id(found));
        }
        let name = tenant_name(&mut self.scratch, project, env);
        self.ids.get(name).copied()
    }

    fn get_or_insert(&mut self, project: &str, env: &str) -> u32 {
        if let Some(tenant) = self.get(project, env) {
            return tenant;
        }
        let tenant = next_id(self.names.len());
        self.names.push((project.into(), env.into()));
        if self.names.len() > FEW_TENANTS {
            // Past the few, every tenant is in the map: the first to pass adds them all.
            let from = if self.ids.is_empty() {
                0
            } else {
                self.names.len() - 1
            };
            for (id, (project, env)) in self.names.iter().enumerate().skip(from) {
                let name = tenant_name(&mut self.scratch, project, env);
                self.ids.insert(name.into(), next_id(id));
            }
        }
        tenant
    }
}

/// An id for the next name of a shard. A shard holds a record per name it has
/// given an id, so memory runs out long before the ids.
fn next_id(count: usize) -> u32 {
    u32::try_from(count).expect("fewer than 2^32 names in a shard")
}

impl ShardMap {
    fn slot(&self, slot: &str) -> Option<u32> {
        if slot.is_empty() {
            return Some(0);
        }
        self.slot_ids.get(slot).copied()
    }

    fn slot_or_insert(&mut self, slot: &str) -> u32 {
        if let Some(id) = self.slot(slot) {
            return id;
        }
        let id = next_id(self.slot_names.len() + 1);
        self.slot_ids.insert(slot.into(), id);
        self.slot_names.push(slot.into());
        id
    }

    fn slot_name(&self, id: u32) -> &str {
        match id {
            0 => "",
            id => &self.slot_names[id as usize - 1],
        }
    }

    /// The place of `key`, when the shard knows its names (else it has no record).
    fn place(&mut self, key: &Key) -> Option<Place> {
        Some(Place {
            uid: key.uid,
            tenant: self.tenants.get(&key.project, &key.env)?,
            slot: self.slot(&key.slot)?,
        })
    }

    fn get(&mut self, key: &Key) -> Option<&Record> {
        let place = self.place(key)?;
        self.records.get(&place)
    }

    fn get_mut(&mut self, key: &Key) -> Option<&mut Record> {
        let place = self.place(key)?;
        self.records.get_mut(&place)
    }

    /// Stores `record` for `key`, indexing the slot when this creates the key's record.
    /// Returns the record it replaced.
    fn insert(&mut self, key: &Key, record: Record) -> Option<Record> {
        let place = Place {
            uid: key.uid,
            tenant: self.tenants.get_or_insert(&key.project, &key.env),
            slot: self.slot_or_insert(&key.slot),
        };
        let replaced = self.records.insert(place, record);
        if replaced.is_none() && place.slot != 0 {
            let user = Resident {
                uid: place.uid,
                tenant: place.tenant,
            };
            let slots = self.slots.entry(user).or_default();
            *slots = slots.iter().copied().chain([place.slot]).collect();
        }
        replaced
    }

    /// The user's sessions: the default slot's record and each indexed slot's, decided
    /// by [`unique_core::listed_session`] as in every store.
    fn sessions(&mut self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let Some(tenant) = self.tenants.get(&user.project, &user.env) else {
            // No record of this tenant is in the shard.
            return Ok(Vec::new());
        };
        let resident = Resident {
            uid: user.uid,
            tenant,
        };
        let slots = self
            .slots
            .get(&resident)
            .map_or(&[][..], |slots| &slots[..]);
        let mut sessions = Vec::new();
        for slot in std::iter::once(0).chain(slots.iter().copied()) {
            let record = self.records.get(&Place {
                uid: user.uid,
                tenant,
                slot,
            });
            sessions.extend(unique_core::listed_session(
                self.slot_name(slot),
                state_of(record),
            )?);
        }
        Ok(sessions)
    }
}

/// 2^64 / φ, the multiplier of Fibonacci hashing.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

/// Records by key, spread over a power-of-two number of independently locked shards.
pub(crate) struct Table {
    shards: Box<[Shard]>,
    /// The owners the records share.
    owners: Owners,
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
            owners: Owners::new(),
            seed: RandomState::new().hash_one(0_u8),
            shift: 64 - count.trailing_zeros(),
        }
    }

    /// How many shards the table has.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard of `key`, picked from its uid alone. The shard hashes the key
    /// again (SipHash, keyed per table), so a second SipHash here would add to
    /// the hashing of every operation. Keys that share a uid across
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
            let mut shard = lock(&self.shards[group[0].0]);
            for &(_, i) in group {
                answers[i] = Some(f(shard.get(&keys[i])));
            }
        }
        answers
            .into_iter()
            .map(|a| a.expect("every position is read once"))
            .collect()
    }

    /// Runs `f` on the key's record (or `None`) under the shard lock.
    pub(crate) fn read_with<R>(&self, key: &Key, f: impl FnOnce(Option<&Record>) -> R) -> R {
        f(lock(self.shard(key)).get(key))
    }

    /// The user's sessions (C10), read under its shard's one lock: each record as it
    /// stands at that linearization point. `Unavailable` when a stored owner is corrupt.
    pub(crate) fn sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        lock(&self.shards[self.shard_index(user.uid)]).sessions(user)
    }

    /// How many records hold a session (C13), each shard counted under its lock in turn.
    pub(crate) fn count_online(&self) -> u64 {
        self.shards
            .iter()
            .map(|shard| {
                let shard = lock(shard);
                let online = shard.records.values().filter(|r| r.holds_session()).count();
                u64::try_from(online).unwrap_or(u64::MAX)
            })
            .sum()
    }

    /// The fenced claim: checks `fence` against the stored record and, when it
    /// holds, writes `gen`, `owner`, `cid` and `won` together, all under one lock.
    /// `won` is `previous`, the snapshot's list, followed by this win: whenever
    /// the fence holds, the stored list equals the snapshot's (only claims change
    /// it, and every claim changes the gen), so this is the list after the win (C9).
    ///
    /// Returns the written gen, or the lost race carrying the record as it
    /// stands when the condition failed (nothing written).
    pub(crate) fn claim(
        &self,
        key: &Key,
        fence: Fence<'_>,
        owner: &Owner,
        claim_id: &str,
        previous: &RecentClaims,
    ) -> CasOutcome {
        let generation = fence.next_generation();
        // Built before the lock, so the critical section is a lookup and a write.
        let claimed = Record::claimed(
            generation,
            self.owners.session(owner),
            Won::after_win(previous, claim_id, generation),
        );
        let mut map = lock(self.shard(key));
        let replaced = match map.get_mut(key) {
            Some(record) if fence.holds(Some(record.pins())) => {
                Some(std::mem::replace(record, claimed))
            }
            None if fence.holds(None) => map.insert(key, claimed),
            current => {
                return CasOutcome::LostRace {
                    current: Some(state_of(current.as_deref())),
                };
            }
        };
        // The replaced record is freed after the lock is released.
        drop(map);
        drop(replaced);
        CasOutcome::Written { generation }
    }

    /// The write-first claim (C11): when the key's record is vacant for `claim_id`
    /// ([`VacantClaim::is_vacant`]: absent, or a tombstone whose recent claims do not hold
    /// `claim_id`), writes what [`claim`](Self::claim) from that record writes, in the
    /// critical section that checked it; otherwise writes nothing and hands back the record
    /// as it stands.
    pub(crate) fn claim_vacant(&self, key: &Key, owner: &Owner, claim_id: &str) -> VacantClaim {
        // The shared owner is found only once the record is known vacant, under the shard's
        // lock (the pool's lock nests inside it; nothing takes them the other way round), so
        // a takeover, which finds the key occupied, does not look it up twice.
        let mut map = lock(self.shard(key));
        let (generation, replaced) = if let Some(record) = map.get_mut(key) {
            let snap = state_of(Some(record));
            if !VacantClaim::is_vacant(&snap, claim_id) {
                return VacantClaim::Occupied(snap);
            }
            // A vacant record's gen is below i64::MAX - 1: the fence exists.
            let Ok(fence) = Fence::for_snapshot(&snap) else {
                return VacantClaim::Occupied(snap);
            };
            let generation = fence.next_generation();
            let won = Won::after_win(&snap.recent_claims, claim_id, generation);
            let claimed = Record::claimed(generation, self.owners.session(owner), won);
            (generation, Some(std::mem::replace(record, claimed)))
        } else {
            // The first login of a key, the case write-first exists for: one lookup.
            let won = Won::after_win(&RecentClaims::default(), claim_id, 1);
            map.insert(key, Record::claimed(1, self.owners.session(owner), won));
            (1, None)
        };
        // The replaced record is freed after the lock is released.
        drop(map);
        drop(replaced);
        VacantClaim::Written { generation }
    }

    /// The fenced tombstone: when the stored gen equals `generation`, empties the
    /// owner and removes the cid, keeping the gen. Returns whether the condition held.
    pub(crate) fn release(&self, key: &Key, generation: i64) -> bool {
        if generation <= 0 {
            return false;
        }
        let mut map = lock(self.shard(key));
        let held = match map.get_mut(key) {
            Some(record) if record.generation == generation => record.held.take(),
            _ => return false,
        };
        drop(map);
        drop(held);
        true
    }

    /// Unconditional write (test hook; bypasses every fence).
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn put(&self, key: &Key, record: Record) {
        lock(self.shard(key)).insert(key, record);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;

    use unique_core::OwnerState;

    use super::*;
    use crate::record::OwnerAttr;

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
            &RecentClaims::new(),
        );
        assert_eq!(outcome, CasOutcome::Written { generation: 1 });
    }

    fn tombstone(generation: i64) -> Record {
        Record::raw(generation, OwnerAttr::Empty, None, &RecentClaims::new())
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
                    .map(|(user, slots)| {
                        let (project, env) = &shard.tenants.names[user.tenant as usize];
                        let slots = slots.iter().map(|&id| shard.slot_name(id).to_owned());
                        let user = UserKey::new(&**project, &**env, user.uid);
                        (user, slots.collect())
                    })
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
        table.put(&user.key("pc"), tombstone(3));
        claim_first(&table, &user.key(""));
        table.put(&user.key("mobile"), tombstone(0));
        // Another tenant's user with the same uid, in the same shard.
        claim_first(&table, &Key::new("p", "e2", 7).with_slot("pc"));
        assert_eq!(
            indexed(&table),
            vec![
                (user, vec!["pc".to_owned(), "mobile".to_owned()]),
                (UserKey::new("p", "e2", 7), vec!["pc".to_owned()]),
            ]
        );
    }

    #[test]
    fn names_keep_keys_apart() {
        let table = Table::with_shards(1);
        // Pairs that would meet if the names were joined with a separator, or not at all.
        let keys = [
            Key::new("a#b", "c", 1),
            Key::new("a", "b#c", 1),
            Key::new("ab", "c", 1),
            Key::new("a", "bc", 1),
            Key::new("a", "bc", 2),
            Key::new("a", "bc", 1).with_slot("x"),
            Key::new("a", "bc", 2).with_slot("y"),
            Key::new("", "", 1),
        ];
        for (i, key) in keys.iter().enumerate() {
            table.put(key, tombstone(i64::try_from(i).unwrap() + 1));
        }
        for (i, key) in keys.iter().enumerate() {
            let stored = table.read_with(key, state_of);
            assert_eq!(stored.generation, i64::try_from(i).unwrap() + 1, "{key:?}");
        }
        // Names the shard knows, in a combination it holds no record for.
        for key in [
            Key::new("a", "bc", 1).with_slot("y"),
            Key::new("a", "c", 1),
            Key::new("a#b", "c", 2),
            Key::new("a#b", "c", 1).with_slot("x"),
        ] {
            assert_eq!(table.read_with(&key, state_of), OwnerState::absent());
        }
    }

    #[test]
    fn many_tenants_are_found_by_hash() {
        let table = Table::with_shards(1);
        let key = |n: usize| Key::new(format!("p{}", n % 5), format!("e{n}"), 1);
        for n in 0..3 * FEW_TENANTS {
            table.put(&key(n), tombstone(i64::try_from(n).unwrap() + 1));
            // Every tenant so far, whether found by name or by hash.
            for m in 0..=n {
                let stored = table.read_with(&key(m), state_of);
                assert_eq!(stored.generation, i64::try_from(m).unwrap() + 1);
            }
            let shard = lock(&table.shards[0]);
            let hashed = if n < FEW_TENANTS { 0 } else { n + 1 };
            assert_eq!(shard.tenants.ids.len(), hashed);
        }
        let absent = Key::new("p0", "e1", 1);
        assert_eq!(table.read_with(&absent, state_of), OwnerState::absent());
    }

    #[test]
    fn reads_intern_nothing() {
        let table = Table::with_shards(1);
        let key = Key::new("p", "e", 1).with_slot("pc");
        assert_eq!(table.read_with(&key, state_of), OwnerState::absent());
        assert_eq!(table.sessions(&key.user()).unwrap(), Vec::new());
        assert!(!table.release(&key, 1));
        let lost = table.claim(
            &key,
            Fence::Tombstone { generation: 1 },
            &Owner::new("", "", "http://h"),
            "c",
            &RecentClaims::new(),
        );
        assert_eq!(
            lost,
            CasOutcome::LostRace {
                current: Some(OwnerState::absent())
            }
        );
        let shard = lock(&table.shards[0]);
        assert!(shard.tenants.names.is_empty() && shard.slot_ids.is_empty());
        assert!(shard.records.is_empty());
    }

    #[test]
    fn records_of_one_owner_share_it() {
        let table = Table::with_shards(4);
        for uid in 1..=10 {
            claim_first(&table, &Key::new("p", "e", uid));
        }
        let held = |uid| {
            let shard = lock(table.shard(&Key::new("p", "e", uid)));
            let place = Place {
                uid,
                tenant: 0,
                slot: 0,
            };
            shard.records[&place].held.clone()
        };
        let first = held(1).expect("a session");
        assert!((2..=10).all(|uid| Arc::ptr_eq(&first, &held(uid).unwrap())));
        assert_eq!(table.owners.entries(), 1);
        drop(first);
        for uid in 1..=10 {
            assert!(table.release(&Key::new("p", "e", uid), 1));
        }
        assert!(held(1).is_none());
        // No record holds the owner any more; only the pool does, until its next sweep.
        let session = table.owners.session(&Owner::new("", "", "http://h"));
        assert_eq!(Arc::strong_count(&session), 2);
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
