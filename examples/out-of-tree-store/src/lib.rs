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
//!   is the gen to write, [`encode_owner`] refuses an owner without endpoint,
//!   and [`OwnerState::won_after`] is the `won` to write with them (C9);
//! - releases: a tombstone at the stored gen, `won` kept, `false` for any
//!   other gen.
//!
//! The one lock makes every operation atomic and linearizable (C1); a real
//! backend gets the same from its conditional write.

use std::collections::HashMap;
use std::sync::Mutex;

use unique_core::{
    CasOutcome, CurrentView, Error, Fence, Key, Owner, OwnerState, Pins, Store, async_trait,
    encode_owner,
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
    records: Mutex<HashMap<Key, Record>>,
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
        self.lock().insert(key.clone(), record);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Record>> {
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
        Ok(self.lock().get(key).map_or_else(OwnerState::absent, Record::state))
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
        let mut records = self.lock();
        let stored = records.get(key);
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
            key.clone(),
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

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        let mut records = self.lock();
        match records.get_mut(key) {
            Some(record) if generation > 0 && record.generation == generation => {
                // A tombstone; `won` stays as it is (C9).
                record.owner = Some(String::new());
                record.claim_id = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
