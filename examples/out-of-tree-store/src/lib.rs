//! A map-backed [`Store`]: the smallest complete backend, written from the
//! trait docs and the backend guide (`docs/backend-guide.md` of the unique
//! repository), and checked by the store contract suite (`tests/contract.rs`).
//!
//! It keeps each record's four attributes as a real backend stores them
//! (`gen`, the raw `owner` string, the `cid` string, the raw `won` string,
//! each possibly absent) and leaves every decision to `unique-core`'s helpers:
//!
//! - reads: [`OwnerState::from_record`] (gen 0 reads as absent, an absent or
//!   empty owner is a tombstone, a bad owner is corrupt, an absent or
//!   unreadable `won` is no recent claims) and
//!   [`OwnerState::into_current_view`] (a corrupt owner is `Unavailable` on
//!   `current`);
//! - claims: [`Fence::for_snapshot`] picks the conditional write and refuses
//!   an exhausted gen, [`Fence::holds`] checks it, [`Fence::next_generation`]
//!   is the gen to write, [`encode_owner`] refuses an owner with neither endpoint nor node,
//!   and [`OwnerState::won_after`] is the `won` to write with them (C9);
//! - releases: a tombstone at the stored gen, `won` kept, `false` for any
//!   other gen;
//! - batched reads: every key of a batch read under one lock, each as
//!   `read_owner` reads it;
//! - the count of sessions online: the records with a gen above 0 and a
//!   non-empty owner (C13);
//! - listings: [`UserKey::slot_range`] is the range of partition keys that
//!   holds the user's slots besides the default one, [`UserKey::slot_of`]
//!   names the slot of each, and [`listed_session`] decides each record's
//!   entry (C10).
//!
//! Records are kept by partition key (`key.to_string()`: `p#e#uid`, or
//! `p#e#uid#slot` off the default slot) in an ordered map, as an ordered store
//! keeps them, so a listing is one range read. The one lock makes every
//! operation atomic and linearizable (C1); a real backend gets the same from
//! its conditional write. It keeps the trait's defaults for `check_ready` (a
//! map is always ready) and for write-first claims (`claim_vacant`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use unique_core::{
    CasOutcome, CurrentView, Error, Fence, Key, Owner, OwnerState, Pins, Store, UserKey,
    UserSession, async_trait, encode_owner, listed_session,
};

/// One record's attributes as stored; `None` is an absent attribute.
#[derive(Debug, Clone, Default)]
struct Record {
    generation: i64,
    owner: Option<String>,
    claim_id: Option<String>,
    won: Option<String>,
}

impl Record {
    fn state(&self) -> OwnerState {
        OwnerState::from_record(
            self.generation,
            self.owner.as_deref().into(),
            self.claim_id.clone(),
            self.won.as_deref(),
        )
    }

    fn pins(&self) -> Pins<'_> {
        Pins {
            generation: self.generation,
            claim_id: self.claim_id.as_deref(),
        }
    }
}

/// A [`Store`] over a map in one process.
#[derive(Debug, Default)]
pub struct MapStore {
    /// Records by partition key, in byte order.
    records: Mutex<BTreeMap<String, Record>>,
}

impl MapStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes a record exactly as given, past every fence: the raw-record
    /// hook of the contract suite. Only with the `test-util` feature.
    #[cfg(feature = "test-util")]
    pub fn put_raw(
        &self,
        key: &Key,
        generation: i64,
        owner: Option<&str>,
        claim_id: Option<&str>,
        won: Option<&str>,
    ) {
        let record = Record {
            generation,
            owner: owner.map(str::to_owned),
            claim_id: claim_id.map(str::to_owned),
            won: won.map(str::to_owned),
        };
        self.lock().insert(key.to_string(), record);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Record>> {
        // A panic while holding the lock cannot leave a record half-written:
        // each write replaces or edits one record in one statement.
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl Store for MapStore {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        let records = self.lock();
        Ok(records
            .get(&key.to_string())
            .map_or_else(OwnerState::absent, Record::state))
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        let fence = Fence::for_snapshot(snap)?;
        let owner = encode_owner(owner)?;
        let pk = key.to_string();
        let mut records = self.lock();
        let stored = records.get(&pk);
        if !fence.holds(stored.map(Record::pins)) {
            return Ok(CasOutcome::LostRace {
                current: Some(stored.map_or_else(OwnerState::absent, Record::state)),
            });
        }
        let generation = fence.next_generation();
        // The snapshot's recent claims and this win (C9): the stored list is
        // the snapshot's whenever the fence holds, since only a claim changes
        // it and every claim changes the gen.
        let won = snap.won_after(claim_id, generation);
        records.insert(
            pk,
            Record {
                generation,
                owner: Some(owner),
                claim_id: Some(claim_id.to_owned()),
                won: Some(won),
            },
        );
        Ok(CasOutcome::Written { generation })
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.read_owner(key).await?.into_current_view()
    }

    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        // Every key under one lock (a real store: one round trip, a SQL `IN` or a
        // BatchGetItem), each answered as `read_owner` answers it, in order.
        let records = self.lock();
        Ok(keys
            .iter()
            .map(|key| {
                Ok(records
                    .get(&key.to_string())
                    .map_or_else(OwnerState::absent, Record::state))
            })
            .collect())
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        let mut records = self.lock();
        match records.get_mut(&key.to_string()) {
            Some(record) if generation > 0 && record.generation == generation => {
                // A tombstone; `won` stays as it is (C9).
                record.owner = Some(String::new());
                record.claim_id = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn count_online(&self) -> Result<Option<u64>, Error> {
        // Every record holding a session (C13): a gen above 0 and a non-empty
        // owner, corrupt or not (a count does not decode owners).
        let records = self.lock();
        let online = records
            .values()
            .filter(|r| r.generation > 0 && r.owner.as_deref().is_some_and(|o| !o.is_empty()))
            .count();
        Ok(Some(u64::try_from(online).unwrap_or(u64::MAX)))
    }

    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let records = self.lock();
        // Every record of the user: the default slot's key, then the range of its
        // other slots, read under one lock (a real store: one strongly consistent
        // read of the key and the range).
        let default = records.get_key_value(&user.to_string());
        let (start, end) = user.slot_range();
        let mut sessions = Vec::new();
        for (pk, record) in default.into_iter().chain(records.range(start..end)) {
            // Every key read is the user's, so each has a slot.
            let Some(slot) = user.slot_of(pk) else {
                continue;
            };
            sessions.extend(listed_session(slot, record.state())?);
        }
        Ok(sessions)
    }
}
