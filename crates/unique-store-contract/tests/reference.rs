//! The suite checked against itself: a reference store built on the public
//! model passes every case (through `store_contract_tests!`), and stores with one
//! deliberate bug each (the traps of `docs/design.md#traps`) fail the case written for that bug.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use unique_core::{
    CasOutcome, CurrentView, Error, Key, Owner, OwnerState, Store, async_trait, encode_owner,
};
use unique_store_contract::model::{ClaimVerdict, RecordModel};
use unique_store_contract::{
    RawRecord, RawWriter, Subject, cid_presence, error_classification, fence_forms, fenced_release,
    linearizability, store_contract_tests, strong_reads, traps,
};

/// One deliberate bug per variant; `None` is the correct store.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    /// Picks the CAS form from `snap.owner` instead of `snap.claim_id`.
    FormByOwner,
    /// Writes without checking the condition.
    UnconditionalPut,
    /// Reads an empty cid as absent.
    EmptyCidAsAbsent,
    /// Resets the gen to 0 on release.
    ResetGenOnRelease,
    /// Reports every fifth claim as a lost race (as a throttle mapped wrongly would).
    ThrottleAsLostRace,
    /// `read_owner` answers from a cache filled on the first read of a key.
    CachedReads,
    /// Records expire one second after their last write.
    Ttl,
}

struct Entry {
    model: RecordModel,
    written: Instant,
}

struct RefStore {
    bug: Bug,
    records: Mutex<HashMap<Key, Entry>>,
    cache: Mutex<HashMap<Key, OwnerState>>,
    claims: AtomicU32,
}

impl RefStore {
    fn with<R>(&self, key: &Key, f: impl FnOnce(&mut RecordModel) -> R) -> R {
        let mut records = self.records.lock().unwrap();
        if self.bug == Bug::Ttl
            && records
                .get(key)
                .is_some_and(|e| e.written.elapsed() > Duration::from_secs(1))
        {
            records.remove(key);
        }
        let entry = records.entry(key.clone()).or_insert_with(|| Entry {
            model: RecordModel::new(),
            written: Instant::now(),
        });
        let before = entry.model.clone();
        let result = f(&mut entry.model);
        if entry.model != before {
            entry.written = Instant::now();
        }
        result
    }
}

#[async_trait]
impl Store for RefStore {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        if self.bug == Bug::CachedReads
            && let Some(cached) = self.cache.lock().unwrap().get(key)
        {
            return Ok(cached.clone());
        }
        let mut state = self.with(key, |m| m.state().clone());
        if self.bug == Bug::EmptyCidAsAbsent && state.claim_id.as_deref() == Some("") {
            state.claim_id = None;
        }
        if self.bug == Bug::CachedReads {
            self.cache
                .lock()
                .unwrap()
                .insert(key.clone(), state.clone());
        }
        Ok(state)
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        encode_owner(owner)?;
        if self.bug == Bug::ThrottleAsLostRace
            && self.claims.fetch_add(1, Ordering::Relaxed) % 5 == 4
        {
            return Ok(CasOutcome::lost());
        }
        let mut snap = snap.clone();
        match self.bug {
            Bug::FormByOwner if snap.owner.is_none() => snap.claim_id = None,
            Bug::UnconditionalPut => snap = self.with(key, |m| m.state().clone()),
            _ => {}
        }
        let verdict = self.with(key, |m| m.claim(owner, claim_id, &snap));
        match verdict {
            ClaimVerdict::Won(generation) => Ok(CasOutcome::Written { generation }),
            ClaimVerdict::ConditionFailed => Ok(CasOutcome::LostRace {
                current: Some(self.with(key, |m| m.state().clone())),
            }),
            ClaimVerdict::GenExhausted => Err(Error::unavailable("gen exhausted for this key")),
        }
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.with(key, |m| m.current())
            .ok_or_else(|| Error::unavailable("stored owner is corrupt"))
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        Ok(self.with(key, |m| {
            let released = m.release(generation);
            if released && self.bug == Bug::ResetGenOnRelease {
                *m = RecordModel::from_state(OwnerState {
                    exists: true,
                    ..OwnerState::default()
                });
            }
            released
        }))
    }
}

#[async_trait]
impl RawWriter for RefStore {
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error> {
        let state = OwnerState::from_record(
            record.generation,
            record.owner.as_deref().into(),
            record.claim_id,
        );
        self.with(key, |m| *m = RecordModel::from_state(state));
        Ok(())
    }
}

fn subject_with(bug: Bug) -> Subject {
    let store = Arc::new(RefStore {
        bug,
        records: Mutex::new(HashMap::new()),
        cache: Mutex::new(HashMap::new()),
        claims: AtomicU32::new(0),
    });
    Subject {
        store: store.clone(),
        raw: store,
    }
}

async fn correct() -> Subject {
    subject_with(Bug::None)
}

store_contract_tests!(correct);

/// Runs `case` on its own task and asserts it panicked: the suite caught the bug.
async fn assert_caught<F>(case: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let outcome = tokio::spawn(case).await;
    assert!(
        outcome
            .as_ref()
            .is_err_and(tokio::task::JoinError::is_panic),
        "the case passed against a store with the bug it exists to catch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn catches_form_chosen_by_owner() {
    assert_caught(fence_forms::corrupt_record_replaceable(subject_with(
        Bug::FormByOwner,
    )))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn catches_unconditional_put() {
    assert_caught(traps::stale_snapshot_loses(subject_with(
        Bug::UnconditionalPut,
    )))
    .await;
    assert_caught(linearizability::race_first_login_one_winner(subject_with(
        Bug::UnconditionalPut,
    )))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn catches_empty_cid_read_as_absent() {
    assert_caught(cid_presence::empty_cid_reads_as_empty(subject_with(
        Bug::EmptyCidAsAbsent,
    )))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn catches_gen_reset_on_release() {
    assert_caught(fenced_release::release_never_resets_gen(subject_with(
        Bug::ResetGenOnRelease,
    )))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn catches_throttle_reported_as_lost_race() {
    assert_caught(error_classification::lost_race_only_on_condition(
        subject_with(Bug::ThrottleAsLostRace),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn catches_cached_reads() {
    assert_caught(strong_reads::read_sees_committed_claim(subject_with(
        Bug::CachedReads,
    )))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn catches_ttl_on_records() {
    assert_caught(traps::records_have_no_ttl(subject_with(Bug::Ttl))).await;
}

/// The single entry point runs every case and passes on the correct store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_passes_on_reference_store() {
    unique_store_contract::run_all(correct).await;
}
