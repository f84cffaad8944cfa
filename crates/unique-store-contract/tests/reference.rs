//! The suite checked against itself: a reference store built on the public
//! model passes every case (through `store_contract_tests!`), and stores with one
//! deliberate bug each (the traps of `docs/design.md#traps`) fail the case written for that bug.
//! The forwarding cases (C12) pass on wrappers around it written as a `StoreLayer` and fail on
//! one that leaves methods to the trait's defaults.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use unique_core::{
    CasOutcome, CurrentView, Error, Key, Owner, OwnerState, RecentClaims, Store, StoreAnswer,
    StoreCall, StoreLayer, StoreOperation, UserKey, UserSession, VacantClaim, VacantClaims,
    async_trait, encode_owner,
};
use unique_store_contract::model::{ClaimVerdict, RecordModel};
use unique_store_contract::{RawRecord, RawWriter, Subject, store_contract_tests};

/// One deliberate bug per variant; `None` is the correct store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Writes no recent claims: every claim leaves an empty list.
    ForgetsWins,
    /// Ignores the slot: every slot of a user shares the default slot's record.
    SharedSlots,
    /// Lists tombstones too (every record with a gen, owner or not).
    ListsTombstones,
    /// Lists every key whose text starts with the user's (uid 4 lists uid 40).
    ListsByPrefix,
    /// Leaves records with a corrupt owner out of the listing instead of failing it.
    ListSkipsCorrupt,
    /// `claim_vacant` writes over an online session too.
    VacantOverSession,
    /// `claim_vacant` ignores the recent claims: a superseded claim_id takes a tombstone.
    VacantIgnoresWins,
    /// `count_online` counts every record with a gen, tombstones included.
    CountsTombstones,
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
        let shared;
        let key = if self.bug == Bug::SharedSlots {
            shared = key.user().key("");
            &shared
        } else {
            key
        };
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
        let verdict = self.with(key, |m| {
            let verdict = m.claim(owner, claim_id, &snap);
            if self.bug == Bug::ForgetsWins && matches!(verdict, ClaimVerdict::Won(_)) {
                *m = RecordModel::from_state(OwnerState {
                    recent_claims: RecentClaims::new(),
                    ..m.state().clone()
                });
            }
            verdict
        });
        match verdict {
            ClaimVerdict::Won(generation) => Ok(CasOutcome::Written { generation }),
            ClaimVerdict::ConditionFailed => Ok(CasOutcome::LostRace {
                current: Some(self.with(key, |m| m.state().clone())),
            }),
            ClaimVerdict::GenExhausted => Err(Error::unavailable("gen exhausted for this key")),
        }
    }

    fn vacant_claims(&self) -> VacantClaims {
        VacantClaims::AbsentAndTombstones
    }

    async fn claim_vacant(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
    ) -> Result<VacantClaim, Error> {
        encode_owner(owner)?;
        Ok(self.with(key, |m| {
            let written = match self.bug {
                Bug::VacantOverSession => {
                    let snap = m.state().clone();
                    match m.claim(owner, claim_id, &snap) {
                        ClaimVerdict::Won(generation) => Some(generation),
                        _ => None,
                    }
                }
                Bug::VacantIgnoresWins => {
                    let snap = m.state().clone();
                    let blind = RecordModel::from_state(OwnerState {
                        recent_claims: RecentClaims::new(),
                        ..snap.clone()
                    });
                    if blind.is_vacant_for(claim_id) {
                        match m.claim(owner, claim_id, &snap) {
                            ClaimVerdict::Won(generation) => Some(generation),
                            _ => None,
                        }
                    } else {
                        None
                    }
                }
                _ => m.claim_vacant(owner, claim_id),
            };
            match written {
                Some(generation) => VacantClaim::Written { generation },
                None => VacantClaim::Occupied(m.state().clone()),
            }
        }))
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

    /// Every record holding an owner, read under one lock (C13).
    async fn count_online(&self) -> Result<Option<u64>, Error> {
        let records = self.records.lock().unwrap();
        let online = records
            .values()
            .map(|entry| entry.model.state())
            .filter(|state| {
                state.exists
                    && (state.owner.is_some()
                        || state.owner_corrupt
                        || self.bug == Bug::CountsTombstones)
            })
            .count();
        Ok(Some(online as u64))
    }

    /// Every record of `user`, read under one lock (one linearizable read).
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let records = self.records.lock().unwrap();
        let mut sessions = Vec::new();
        for (key, entry) in records.iter() {
            let mine = if self.bug == Bug::ListsByPrefix {
                key.to_string().starts_with(&user.to_string())
            } else {
                key.user() == *user
            };
            let state = entry.model.state();
            if !mine || !state.exists {
                continue;
            }
            if state.owner_corrupt && self.bug != Bug::ListSkipsCorrupt {
                return Err(Error::unavailable("stored owner is corrupt"));
            }
            let owner = match &state.owner {
                Some(owner) => owner.clone(),
                None if self.bug == Bug::ListsTombstones => Owner::default(),
                None => continue,
            };
            sessions.push(UserSession {
                slot: key.slot.clone(),
                generation: state.generation,
                owner,
            });
        }
        Ok(sessions)
    }
}

#[async_trait]
impl RawWriter for RefStore {
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error> {
        let state = OwnerState::from_record(
            record.generation,
            record.owner.as_deref().into(),
            record.claim_id,
            record.won.as_deref(),
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
unique_store_contract::online_count_tests!(correct);

/// The count cases fail on a store that counts tombstones, naming C13.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_count_of_tombstones_fails_the_count_cases() {
    let report =
        unique_store_contract::check_online_count(|| async { subject_with(Bug::CountsTombstones) })
            .await;
    println!("{report}");
    for case in unique_store_contract::ONLINE_COUNT_CASES {
        let failure = report
            .failures
            .iter()
            .find(|f| f.case == *case)
            .unwrap_or_else(|| panic!("{case} passed on a store counting tombstones"));
        assert_eq!(failure.clause(), "C13", "{failure}");
    }
}

/// Each deliberate bug, with the clause its failures must name. The bug's own
/// trap case must fail, and every failure it causes must name that clause:
/// a failure is only useful when it points at the rule that was broken.
const MUTANTS: &[(Bug, &str, &str)] = &[
    (
        Bug::FormByOwner,
        "fence_forms::corrupt_record_replaceable",
        "C3",
    ),
    (Bug::UnconditionalPut, "traps::stale_snapshot_loses", "C3"),
    (
        Bug::EmptyCidAsAbsent,
        "cid_presence::empty_cid_reads_as_empty",
        "C6",
    ),
    (
        Bug::ResetGenOnRelease,
        "fenced_release::release_never_resets_gen",
        "C5",
    ),
    (
        Bug::ThrottleAsLostRace,
        "error_classification::lost_race_only_on_condition",
        "C8",
    ),
    (
        Bug::CachedReads,
        "strong_reads::read_sees_committed_claim",
        "C2",
    ),
    (Bug::Ttl, "traps::records_outlive_an_idle_second", "Records"),
    (
        Bug::ForgetsWins,
        "recent_claims::claims_append_their_wins",
        "C9",
    ),
    (Bug::SharedSlots, "slots::slots_are_independent", "C1"),
    (
        Bug::ListsTombstones,
        "listing::release_drops_a_slot_until_the_next_claim",
        "C10",
    ),
    (
        Bug::ListsByPrefix,
        "listing::never_lists_another_users_records",
        "C10",
    ),
    (
        Bug::ListSkipsCorrupt,
        "listing::corrupt_owner_fails_the_listing",
        "C10",
    ),
    (
        Bug::VacantOverSession,
        "vacant_claims::online_session_not_written",
        "C11",
    ),
    (
        Bug::VacantIgnoresWins,
        "vacant_claims::superseded_claim_id_not_written",
        "C11",
    ),
];

/// The clauses a failure may name: the headings of `docs/design.md` the
/// store contract covers.
const CLAUSES: &[&str] = &[
    "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "C11", "I2", "I3", "I4", "I6",
    "Records",
];

/// Feeds every mutant to the whole suite (`check_all`): the case written for
/// its trap fails naming the expected clause, that clause names more of its
/// failures than any other, and every failure names a clause of the design.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_mutant_fails_naming_its_clause() {
    for &(bug, trap_case, clause) in MUTANTS {
        let report = unique_store_contract::check_all(|| async move { subject_with(bug) }).await;
        // Shown with the test's output when it fails, to see every message.
        println!("{bug:?}: {report}");
        let trap = report
            .failures
            .iter()
            .find(|f| f.case == trap_case)
            .unwrap_or_else(|| panic!("{bug:?}: {trap_case} passed"));
        assert_eq!(trap.clause(), clause, "{bug:?}: {trap}");
        for failure in &report.failures {
            assert!(
                CLAUSES.contains(&failure.clause()),
                "{bug:?}: a failure names no clause: {failure}"
            );
        }
        let named = |c: &str| report.failures.iter().filter(|f| f.clause() == c).count();
        for other in report.clauses() {
            assert!(
                other == clause || named(other) < named(clause),
                "{bug:?}: {other} is named {} times, {clause} {} times",
                named(other),
                named(clause)
            );
        }
    }
}

/// `run_all` reports every failing case, not only the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_reports_every_failure() {
    let outcome = tokio::spawn(unique_store_contract::run_all(|| async {
        subject_with(Bug::ResetGenOnRelease)
    }))
    .await;
    let message = outcome
        .expect_err("run_all passed on a broken store")
        .into_panic();
    let message = message
        .downcast_ref::<String>()
        .expect("run_all panics with its report");
    for case in [
        "fenced_release::release_tombstones_and_keeps_gen",
        "fenced_release::release_never_resets_gen",
        "arbiter::release_then_next_login",
    ] {
        assert!(
            message.contains(&format!("{case}: C5 release must keep gen")),
            "{case} missing from {message}"
        );
    }
}

/// The single entry point runs every case and passes on the correct store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_passes_on_reference_store() {
    unique_store_contract::run_all(correct).await;
}

/// A wrapper written as an `impl Store` of its own, spelling only the required methods:
/// the trait's defaults stand in for the other six, as they did twice in `MeteredStore`.
struct Forgetful(Arc<dyn Store>);

#[async_trait]
impl Store for Forgetful {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.0.read_owner(key).await
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        self.0.claim_cas(key, owner, claim_id, snap).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.0.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.0.release(key, generation).await
    }
}

/// A wrapper written as a `StoreLayer`: it counts calls and cannot leave a method out.
struct Counted {
    inner: Arc<dyn Store>,
    calls: AtomicU32,
}

impl StoreLayer for Counted {
    type Inner = dyn Store;

    fn inner(&self) -> &(dyn Store + 'static) {
        &*self.inner
    }

    async fn around<'a, T: StoreAnswer + 'a>(
        &'a self,
        _: StoreOperation,
        call: StoreCall<'a, T>,
    ) -> Result<T, Error> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        call.await
    }
}

/// The forwarding cases (C12) fail on a wrapper for exactly the methods it leaves to the
/// trait's defaults, each naming C12, and pass on a `StoreLayer` and on `Arc`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wrapper_that_drops_a_method_fails_its_forwarding_case() {
    let report = unique_store_contract::check_wrapper(correct, |store| {
        Arc::new(Forgetful(store)) as Arc<dyn Store>
    })
    .await;
    println!("{report}");
    let mut forwarding: Vec<(&str, &str)> = report
        .failures
        .iter()
        .filter(|f| f.case.starts_with("forwarding::"))
        .map(|f| (f.case, f.clause()))
        .collect();
    forwarding.sort_unstable();
    assert_eq!(
        forwarding,
        [
            ("forwarding::check_ready", "C12"),
            ("forwarding::claim_vacant", "C12"),
            ("forwarding::count_online", "C12"),
            ("forwarding::list_sessions", "C12"),
            ("forwarding::read_owners", "C12"),
            ("forwarding::vacant_claims", "C12"),
        ]
    );
    let layered = |store| {
        Arc::new(Counted {
            inner: store,
            calls: AtomicU32::new(0),
        }) as Arc<dyn Store>
    };
    let arc = |store| Arc::new(store) as Arc<dyn Store>;
    for report in [
        unique_store_contract::check_wrapper(correct, layered).await,
        unique_store_contract::check_wrapper(correct, arc).await,
    ] {
        assert!(report.failures.is_empty(), "{report}");
        assert_eq!(
            report.passed.len(),
            unique_store_contract::CASES.len() + unique_store_contract::WRAPPER_CASES.len()
        );
    }
}
