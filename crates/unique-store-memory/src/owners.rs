//! The owners records share: one [`Held::Session`] per node instead of one
//! copy of its region, cluster and endpoint per session.
//!
//! An owner stays in the pool after its last record lets go of it, until its
//! part of the pool is next swept: a sweep drops every owner no record holds,
//! and runs when the part has grown to twice the entries it kept at its last
//! sweep. The pool therefore holds at most about twice the owners that were in
//! use at the last sweep, however many nodes a long-lived process has seen come
//! and go. Keeping an unused owner until then, rather than dropping it with its
//! last record, spares a node that logs in again (one key taken back and forth
//! between two nodes, each claim replacing the other's only record) a new copy
//! per claim.
//!
//! Interning happens before the claim takes its shard lock, so the record's
//! critical section stays one lookup and one write, and the pool's own locks
//! (a few, picked by the owner's hash) are never held together with a shard's.

use std::collections::HashMap;
#[cfg(not(loom))]
use std::hash::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::Arc;

use unique_core::Owner;

use crate::record::Held;
use crate::sync::{Mutex, lock};

/// Independently locked parts of the pool, a power of two. Claims of one node
/// all meet in one part, each holding it for a hash lookup.
const PARTS: usize = 16;

/// A part is not swept before it holds this many entries.
const FIRST_SWEEP: usize = 32;

/// The shared owners of one table.
pub(crate) struct Owners {
    parts: Box<[Mutex<Part>]>,
    /// SipHash keyed per table, so which owners share a slot is not predictable.
    hasher: OwnerHasher,
}

/// Keyed at random; under loom with fixed keys, since a model must make the same
/// lock operations each time it runs, and the part an owner's lock is in comes
/// from its hash.
#[cfg(not(loom))]
type OwnerHasher = RandomState;
#[cfg(loom)]
type OwnerHasher = BuildHasherDefault<std::hash::DefaultHasher>;

/// Owners by the 64-bit hash of their value. Two owners with one hash (about
/// one chance in 2^64 per pair) cannot both be interned: the second keeps a
/// copy of its own, which costs memory and never correctness.
#[derive(Default)]
struct Part {
    by_hash: HashMap<u64, Arc<Held>, BuildHasherDefault<Prehashed>>,
    /// Entries at which the next sweep of unused ones runs.
    sweep_at: usize,
}

impl Owners {
    pub(crate) fn new() -> Self {
        Self {
            parts: (0..PARTS).map(|_| Mutex::new(Part::default())).collect(),
            hasher: OwnerHasher::default(),
        }
    }

    /// The shared session of `owner`: the one every record of this owner holds,
    /// or a new one when the pool has none.
    pub(crate) fn session(&self, owner: &Owner) -> Arc<Held> {
        let (hash, part) = self.part(owner);
        lock(part).session(hash, owner)
    }

    /// The hash of `owner` and the part of the pool that holds it.
    fn part(&self, owner: &Owner) -> (u64, &Mutex<Part>) {
        let hash = self.hasher.hash_one(owner);
        // The map's buckets come from the hash's low bits and its tags from the
        // top seven; the part comes from bits between, so neither is skewed.
        #[allow(clippy::cast_possible_truncation)]
        let part = (hash >> 32) as usize & (PARTS - 1);
        (hash, &self.parts[part])
    }

    /// **Broken on purpose**, for the loom model that must reject it: looks the
    /// owner up and adds it in two critical sections, so two first sessions of
    /// one owner can each add a copy.
    #[cfg(all(test, loom))]
    pub(crate) fn session_looked_up_then_added(&self, owner: &Owner) -> Arc<Held> {
        let (hash, part) = self.part(owner);
        if let Some(held) = lock(part).by_hash.get(&hash) {
            return Arc::clone(held);
        }
        let held = Arc::new(Held::Session(owner.clone()));
        lock(part).by_hash.insert(hash, Arc::clone(&held));
        held
    }

    /// How many owners the pool holds, used or not (for tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn entries(&self) -> usize {
        self.parts.iter().map(|part| lock(part).by_hash.len()).sum()
    }
}

impl Part {
    fn session(&mut self, hash: u64, owner: &Owner) -> Arc<Held> {
        if let Some(held) = self.by_hash.get(&hash) {
            if matches!(&**held, Held::Session(shared) if shared == owner) {
                return Arc::clone(held);
            }
            return Arc::new(Held::Session(owner.clone()));
        }
        if self.by_hash.len() >= self.sweep_at {
            // Under this part's lock, an owner only the pool holds cannot be
            // taken by anyone else meanwhile: records get theirs from here.
            self.by_hash.retain(|_, held| Arc::strong_count(held) > 1);
            self.sweep_at = (2 * self.by_hash.len()).max(FIRST_SWEEP);
        }
        let held = Arc::new(Held::Session(owner.clone()));
        self.by_hash.insert(hash, Arc::clone(&held));
        held
    }
}

/// The hasher of a map keyed by hashes already computed: a `u64` key is its own hash.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else rather than lose it.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn node(n: usize) -> Owner {
        Owner::new("eu", "a", format!("http://10.0.0.{n}:7000/kick"))
    }

    #[test]
    fn one_owner_is_shared() {
        let owners = Owners::new();
        let first = owners.session(&node(1));
        let second = owners.session(&node(1));
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(*first, Held::Session(node(1)));
        assert!(!Arc::ptr_eq(&first, &owners.session(&node(2))));
        // Unused, it is kept until a sweep, so a node logging in again finds it.
        drop(second);
        let pooled = Arc::as_ptr(&first);
        drop(first);
        assert_eq!(Arc::as_ptr(&owners.session(&node(1))), pooled);
    }

    #[test]
    fn a_hash_shared_by_two_owners_gives_the_second_its_own_copy() {
        let mut part = Part::default();
        let first = part.session(7, &node(1));
        let other = part.session(7, &node(2));
        assert_eq!(*other, Held::Session(node(2)));
        assert!(Arc::ptr_eq(&first, &part.session(7, &node(1))));
        assert_eq!(Arc::strong_count(&other), 1, "the copy is not in the pool");
    }

    #[test]
    fn unused_owners_are_swept_as_new_ones_come() {
        let owners = Owners::new();
        let live: Vec<_> = (0..100).map(|n| owners.session(&node(n))).collect();
        // Ten thousand nodes come and go, one at a time.
        for n in 100..10_100 {
            drop(owners.session(&node(n)));
        }
        let entries = owners.entries();
        assert!(
            entries <= 2 * (live.len() + PARTS) + PARTS * FIRST_SWEEP,
            "{entries} entries for {} owners in use",
            live.len()
        );
        for (n, session) in live.iter().enumerate() {
            assert!(Arc::ptr_eq(session, &owners.session(&node(n))));
        }
    }
}
