//! The per-key claim queue: claims on one key through one [`Arbiter`](crate::Arbiter)
//! take turns instead of racing each other at the store.
//!
//! Claims inside one process would otherwise lose compare-and-sets to each other
//! and spend their attempt budget on it (`Unavailable` after three lost races).
//! The store's fenced CAS still decides between processes; the queue only keeps a
//! process from racing itself.
//!
//! Shape: a fixed array of shards, each a `std` mutex over a short list of
//! slots, one per key, picked by a hash of the key seeded per queue (so callers
//! cannot choose uids that crowd one shard). A slot exists only while a claim on
//! its key holds or waits for the turn, and counts those claims. The first claim
//! on an idle key inserts the slot and holds the turn at once: no semaphore, no
//! `Arc`, and (after warm-up) no heap allocation, since the list keeps its
//! capacity and the removed slots' keys are kept as spare buffers. A list, not a
//! hash map: a shard holds only the keys with a claim in flight (a handful),
//! where a scan comparing uids first is cheap. A second claim creates the slot's semaphore (zero
//! permits) and waits on it; a holder that leaves while others are counted adds
//! one permit, which tokio hands on first in, first out. A turn therefore exists
//! at most once per slot: held by one claim, or as one permit in flight.
//!
//! Different keys never share a slot (whole keys are compared); they share
//! only a shard's mutex, held for a lookup and never across an `.await`.
//!
//! The loom models in `queue/loom_models.rs` check this code (the shard mutex and the
//! semaphore come from `sync.rs`, loom's under `--cfg loom`): the turn goes to
//! the waiters in line order, a waiter dropped before or while its turn comes
//! neither keeps nor loses it, and a newcomer racing the removal of its key's
//! slot still gets its turn. Each is shown able to fail on a broken copy. The
//! same orders on tokio's own semaphore are tests in `tests/claim_queue.rs`.

use std::hash::{BuildHasher, RandomState};

use crate::error::Error;
use crate::sync::{Arc, Mutex, Semaphore, lock};
use crate::types::Key;

/// Shards of the map; a power of two. Enough that two cores rarely meet on one.
const SHARDS: usize = 32;
/// Spare key buffers kept per shard for the next new slot.
const SPARE_KEYS: usize = 8;
/// A shard's list shrinks back when it empties with more capacity than this.
const KEEP_CAPACITY: usize = 64;

/// The claims in flight on each key through one arbiter.
pub(crate) struct ClaimQueue {
    shards: Box<[Mutex<Shard>]>,
    /// Most claims that may wait behind the one holding a key's turn.
    max_waiters: usize,
    /// Seeded per queue, so the shard of a key cannot be chosen by its caller.
    hasher: RandomState,
}

#[derive(Default)]
struct Shard {
    slots: Vec<(Key, Slot)>,
    /// Keys of removed slots, reused (capacity and all) for new ones.
    spare: Vec<Key>,
}

struct Slot {
    /// Claims holding or waiting for this key's turn; at least 1.
    claims: usize,
    /// Hands the turn on; created by the first claim that has to wait.
    turn: Option<Arc<Semaphore>>,
}

impl ClaimQueue {
    pub(crate) fn new(max_waiters: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            max_waiters,
            hasher: RandomState::new(),
        }
    }

    /// Waits for `key`'s turn. The returned [`Turn`] holds it until dropped;
    /// dropping this future while it waits gives up its place in line.
    ///
    /// # Errors
    ///
    /// `Throttled` when `max_waiters` claims already wait on `key`.
    pub(crate) async fn enter<'a>(&'a self, key: &'a Key) -> Result<Turn<'a>, Error> {
        // Hashed once per claim: the turn keeps its shard for its drop.
        let shard_index = self.shard_of(key);
        let semaphore = {
            let mut shard = lock(&self.shards[shard_index]);
            let Some(index) = shard.find(key) else {
                let owned = shard.owned(key);
                shard.slots.push((
                    owned,
                    Slot {
                        claims: 1,
                        turn: None,
                    },
                ));
                return Ok(Turn {
                    queue: self,
                    key,
                    shard: shard_index,
                    holding: true,
                });
            };
            let slot = &mut shard.slots[index].1;
            if slot.claims > self.max_waiters {
                return Err(Error::Throttled);
            }
            slot.claims += 1;
            Arc::clone(slot.turn.get_or_insert_with(|| Arc::new(Semaphore::new(0))))
        };
        // Counted in the slot from here: dropping `turn` while waiting uncounts it.
        let mut turn = Turn {
            queue: self,
            key,
            shard: shard_index,
            holding: false,
        };
        // Never closed, so `acquire` cannot fail; the permit is the turn itself,
        // given back by `Turn::drop` as a new permit.
        if let Ok(permit) = semaphore.acquire().await {
            permit.forget();
        }
        turn.holding = true;
        Ok(turn)
    }

    /// Keys with a claim holding or waiting for their turn.
    pub(crate) fn keys(&self) -> usize {
        self.shards.iter().map(|s| lock(s).slots.len()).sum()
    }

    /// The shard of `key`'s slot.
    // 32 shards: the top five bits of the hash; usize holds them on every target.
    #[allow(clippy::cast_possible_truncation)]
    fn shard_of(&self, key: &Key) -> usize {
        // A seeded hash of the whole key: uids a caller picks to share a shard
        // (as they could under a fixed hash) land in shards it cannot predict.
        (self.hasher.hash_one(key) >> 59) as usize
    }
}

impl Shard {
    /// The index of `key`'s slot; the uid, compared first, tells most keys apart.
    fn find(&self, key: &Key) -> Option<usize> {
        self.slots.iter().position(|(k, _)| {
            k.uid == key.uid && k.slot == key.slot && k.project == key.project && k.env == key.env
        })
    }

    /// An owned copy of `key`, in a spare key's buffers when there is one.
    fn owned(&mut self, key: &Key) -> Key {
        match self.spare.pop() {
            Some(mut spare) => {
                spare.project.clear();
                spare.project.push_str(&key.project);
                spare.env.clear();
                spare.env.push_str(&key.env);
                spare.uid = key.uid;
                spare.slot.clear();
                spare.slot.push_str(&key.slot);
                spare
            }
            None => key.clone(),
        }
    }
}

/// One claim's place in its key's line: holding the turn, or (only while
/// [`ClaimQueue::enter`] waits) waiting for it. Dropping it leaves the line and,
/// when it held the turn and others wait, hands the turn to the next.
pub(crate) struct Turn<'a> {
    queue: &'a ClaimQueue,
    key: &'a Key,
    /// The index of `key`'s shard.
    shard: usize,
    holding: bool,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut shard = lock(&self.queue.shards[self.shard]);
        let Some(index) = shard.find(self.key) else {
            return;
        };
        let slot = &mut shard.slots[index].1;
        slot.claims -= 1;
        if slot.claims > 0 {
            // A waiter that leaves without the turn hands nothing on. A permit
            // already given to it returns to the semaphore when its `acquire`
            // future drops, and goes to the next in line.
            if self.holding
                && let Some(turn) = &slot.turn
            {
                turn.add_permits(1);
            }
            return;
        }
        let (key, _) = shard.slots.swap_remove(index);
        if shard.spare.len() < SPARE_KEYS {
            shard.spare.push(key);
        }
        if shard.slots.is_empty() && shard.slots.capacity() > KEEP_CAPACITY {
            shard.slots.shrink_to(KEEP_CAPACITY);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models;
