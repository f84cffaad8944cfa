//! Scripted fakes shared by the Arbiter integration tests.
//!
//! Every fake records each call it receives so a test can assert not only the
//! outcome but also exactly which store round trips and kicks happened. A fake
//! asked for an answer its script does not hold panics with the call's name: an
//! unexpected store call is a test failure, never a silently invented answer.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use unique_core::{
    Arbiter, ArbiterBuilder, CasOutcome, ClaimInput, ClaimOutcome, CurrentView, Error, Key,
    KickDetail, KickOutcome, KickPayload, Kicker, LogoutOutcome, Observer, Owner, OwnerState,
    RecentClaims, Store, async_trait,
};

/// The endpoint of the session being replaced in most tests.
pub(crate) const OLD_ENDPOINT: &str = "http://old.node:9000/kick";
/// The endpoint of the claiming session in most tests.
pub(crate) const NEW_ENDPOINT: &str = "http://new.node:9000/kick";
/// The claim_id of the claiming session in most tests.
pub(crate) const CLAIM_ID: &str = "claim-new";
/// The claim_id the replaced session wrote.
pub(crate) const OLD_CLAIM_ID: &str = "claim-old";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a fake already fails the test; keep later asserts readable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn key() -> Key {
    Key::new("game", "prod", 42)
}

pub(crate) fn new_owner() -> Owner {
    Owner::new("eu-west-1", "c2", NEW_ENDPOINT)
}

pub(crate) fn old_owner() -> Owner {
    Owner::new("us-east-1", "c1", OLD_ENDPOINT)
}

pub(crate) fn input() -> ClaimInput {
    ClaimInput {
        key: key(),
        owner: new_owner(),
        claim_id: CLAIM_ID.to_owned(),
    }
}

/// A record holding an online session of `owner` at `generation`.
pub(crate) fn online(generation: i64, owner: Owner, claim_id: &str) -> OwnerState {
    OwnerState {
        exists: true,
        generation,
        owner: Some(owner),
        owner_corrupt: false,
        claim_id: Some(claim_id.to_owned()),
        recent_claims: RecentClaims::from_wins([(claim_id, generation)]),
    }
}

/// The old session at `generation`, written by [`OLD_CLAIM_ID`].
pub(crate) fn old_session(generation: i64) -> OwnerState {
    online(generation, old_owner(), OLD_CLAIM_ID)
}

/// A released record (tombstone): gen kept, no owner, no cid.
pub(crate) fn tombstone(generation: i64) -> OwnerState {
    OwnerState {
        exists: true,
        generation,
        owner: None,
        owner_corrupt: false,
        claim_id: None,
        recent_claims: RecentClaims::new(),
    }
}

/// A record whose stored owner could not be parsed (C7 soft path).
pub(crate) fn corrupt(generation: i64) -> OwnerState {
    OwnerState {
        exists: true,
        generation,
        owner: None,
        owner_corrupt: true,
        claim_id: Some(OLD_CLAIM_ID.to_owned()),
        recent_claims: RecentClaims::new(),
    }
}

/// One call a [`ScriptedStore`] received, with its arguments.
// A test log compared whole: the size of its variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreCall {
    ReadOwner(Key),
    ClaimCas {
        key: Key,
        owner: Owner,
        claim_id: String,
        snap: OwnerState,
    },
    Current(Key),
    Release(Key, i64),
}

#[derive(Default)]
struct StoreScript {
    reads: VecDeque<Result<OwnerState, Error>>,
    cas: VecDeque<Result<CasOutcome, Error>>,
    currents: VecDeque<Result<CurrentView, Error>>,
    releases: VecDeque<Result<bool, Error>>,
    calls: Vec<StoreCall>,
}

/// A store that answers every method from its own FIFO script.
#[derive(Default)]
pub(crate) struct ScriptedStore {
    script: Mutex<StoreScript>,
}

impl ScriptedStore {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Queues the answer of the next `read_owner`.
    pub(crate) fn read(self, answer: Result<OwnerState, Error>) -> Self {
        lock(&self.script).reads.push_back(answer);
        self
    }

    /// Queues the answer of the next `claim_cas`: `Ok(gen)` is a write at that gen.
    pub(crate) fn cas(self, answer: Result<i64, Error>) -> Self {
        let answer = answer.map(|generation| CasOutcome::Written { generation });
        lock(&self.script).cas.push_back(answer);
        self
    }

    /// Queues a lost race without the record as the next `claim_cas` answer.
    pub(crate) fn lost(self) -> Self {
        lock(&self.script).cas.push_back(Ok(CasOutcome::lost()));
        self
    }

    /// Queues a lost race carrying `current` as the next `claim_cas` answer.
    pub(crate) fn lost_to(self, current: OwnerState) -> Self {
        let lost = CasOutcome::LostRace {
            current: Some(current),
        };
        lock(&self.script).cas.push_back(Ok(lost));
        self
    }

    /// Queues the answer of the next `current`.
    pub(crate) fn current(self, answer: Result<CurrentView, Error>) -> Self {
        lock(&self.script).currents.push_back(answer);
        self
    }

    /// Queues the answer of the next `release`.
    pub(crate) fn release(self, answer: Result<bool, Error>) -> Self {
        lock(&self.script).releases.push_back(answer);
        self
    }

    /// Every call received so far, in order.
    pub(crate) fn calls(&self) -> Vec<StoreCall> {
        lock(&self.script).calls.clone()
    }

    pub(crate) fn read_count(&self) -> usize {
        self.count(|c| matches!(c, StoreCall::ReadOwner(_)))
    }

    pub(crate) fn cas_count(&self) -> usize {
        self.count(|c| matches!(c, StoreCall::ClaimCas { .. }))
    }

    /// The snapshots `claim_cas` was called with, in order.
    pub(crate) fn cas_snapshots(&self) -> Vec<OwnerState> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                StoreCall::ClaimCas { snap, .. } => Some(snap),
                _ => None,
            })
            .collect()
    }

    fn count(&self, pred: impl Fn(&StoreCall) -> bool) -> usize {
        lock(&self.script).calls.iter().filter(|c| pred(c)).count()
    }

    fn answer<T>(
        &self,
        call: StoreCall,
        queue: impl FnOnce(&mut StoreScript) -> &mut VecDeque<Result<T, Error>>,
    ) -> Result<T, Error> {
        let mut script = lock(&self.script);
        let name = format!("{call:?}");
        script.calls.push(call);
        queue(&mut script)
            .pop_front()
            .unwrap_or_else(|| panic!("unscripted store call: {name}"))
    }
}

#[async_trait]
impl Store for ScriptedStore {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.answer(StoreCall::ReadOwner(key.clone()), |s| &mut s.reads)
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        let call = StoreCall::ClaimCas {
            key: key.clone(),
            owner: owner.clone(),
            claim_id: claim_id.to_owned(),
            snap: snap.clone(),
        };
        self.answer(call, |s| &mut s.cas)
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.answer(StoreCall::Current(key.clone()), |s| &mut s.currents)
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.answer(StoreCall::Release(key.clone(), generation), |s| {
            &mut s.releases
        })
    }
}

/// What a [`ScriptedKicker`] does with one kick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KickBehaviour {
    /// Answer `Confirmed` at once.
    Confirm,
    /// Answer `Failed(detail)` at once.
    Fail(KickDetail),
    /// Never answer, ignoring the timeout it was given.
    Hang,
}

/// One kick a [`ScriptedKicker`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KickCall {
    pub(crate) endpoint: String,
    pub(crate) payload: KickPayload,
    pub(crate) timeout: Duration,
}

#[derive(Default)]
struct KickerState {
    script: VecDeque<KickBehaviour>,
    calls: Vec<KickCall>,
    /// Endpoints `check_endpoint` refuses.
    refused: Vec<String>,
    /// Every endpoint `check_endpoint` was asked about, in order.
    checked: Vec<String>,
}

/// A kicker that plays its script in order, then repeats the last behaviour.
/// Clones share state, so a test keeps one clone to inspect after handing the
/// other to the Arbiter.
#[derive(Clone)]
pub(crate) struct ScriptedKicker {
    fallback: KickBehaviour,
    state: Arc<Mutex<KickerState>>,
}

impl ScriptedKicker {
    /// Every kick behaves as `behaviour`.
    pub(crate) fn always(behaviour: KickBehaviour) -> Self {
        Self::sequence(&[], behaviour)
    }

    /// Kicks follow `first` in order, then `then` forever.
    pub(crate) fn sequence(first: &[KickBehaviour], then: KickBehaviour) -> Self {
        Self {
            fallback: then,
            state: Arc::new(Mutex::new(KickerState {
                script: first.iter().copied().collect(),
                ..KickerState::default()
            })),
        }
    }

    pub(crate) fn calls(&self) -> Vec<KickCall> {
        lock(&self.state).calls.clone()
    }

    /// `check_endpoint` refuses `endpoint` (every other endpoint is accepted).
    pub(crate) fn refusing(self, endpoint: &str) -> Self {
        lock(&self.state).refused.push(endpoint.to_owned());
        self
    }

    /// Every endpoint `check_endpoint` was asked about.
    pub(crate) fn checked(&self) -> Vec<String> {
        lock(&self.state).checked.clone()
    }
}

#[async_trait]
impl Kicker for ScriptedKicker {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        let behaviour = {
            let mut state = lock(&self.state);
            state.calls.push(KickCall {
                endpoint: endpoint.to_owned(),
                payload: payload.clone(),
                timeout,
            });
            state.script.pop_front().unwrap_or(self.fallback)
        };
        match behaviour {
            KickBehaviour::Confirm => KickOutcome::Confirmed,
            KickBehaviour::Fail(detail) => KickOutcome::Failed(detail),
            KickBehaviour::Hang => std::future::pending().await,
        }
    }

    fn check_endpoint(&self, endpoint: &str) -> Result<(), String> {
        let mut state = lock(&self.state);
        state.checked.push(endpoint.to_owned());
        if state.refused.iter().any(|r| r == endpoint) {
            Err("refused by the script".to_owned())
        } else {
            Ok(())
        }
    }
}

/// One `on_claim` call: the result reduced to something comparable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimEvent {
    /// The outcome, or the error's wire code.
    pub(crate) result: Result<ClaimOutcome, &'static str>,
    pub(crate) attempts: u32,
}

#[derive(Default)]
struct Observed {
    claims: Vec<ClaimEvent>,
    kicks: Vec<(Option<KickDetail>, bool)>,
    releases: Vec<(Key, bool)>,
    logouts: Vec<(Key, LogoutOutcome)>,
}

/// An observer that records every call. Clones share state.
#[derive(Clone, Default)]
pub(crate) struct RecordingObserver {
    seen: Arc<Mutex<Observed>>,
}

impl RecordingObserver {
    pub(crate) fn claims(&self) -> Vec<ClaimEvent> {
        lock(&self.seen).claims.clone()
    }

    pub(crate) fn kicks(&self) -> Vec<(Option<KickDetail>, bool)> {
        lock(&self.seen).kicks.clone()
    }

    pub(crate) fn releases(&self) -> Vec<(Key, bool)> {
        lock(&self.seen).releases.clone()
    }

    pub(crate) fn logouts(&self) -> Vec<(Key, LogoutOutcome)> {
        lock(&self.seen).logouts.clone()
    }
}

impl Observer for RecordingObserver {
    fn on_claim(&self, result: &Result<ClaimOutcome, Error>, attempts: u32, _took: Duration) {
        // `Error` is not `Clone`; keep its wire code.
        let result = match result {
            Ok(outcome) => Ok(outcome.clone()),
            Err(e) => Err(e.code()),
        };
        lock(&self.seen)
            .claims
            .push(ClaimEvent { result, attempts });
    }

    fn on_kick(&self, detail: Option<KickDetail>, success: bool) {
        lock(&self.seen).kicks.push((detail, success));
    }

    fn on_release(&self, key: &Key, released: bool) {
        lock(&self.seen).releases.push((key.clone(), released));
    }

    fn on_logout(&self, key: &Key, outcome: &LogoutOutcome) {
        lock(&self.seen)
            .logouts
            .push((key.clone(), outcome.clone()));
    }
}

/// A store, a kicker and an observer wired into one Arbiter, kept for inspection.
pub(crate) struct Harness {
    pub(crate) arbiter: Arbiter<ScriptedStore>,
    pub(crate) kicker: ScriptedKicker,
    pub(crate) observer: RecordingObserver,
}

impl Harness {
    /// An Arbiter over `store` with `kicker` and a recording observer.
    pub(crate) fn new(store: ScriptedStore, kicker: ScriptedKicker) -> Self {
        Self::with(store, kicker, |b| b)
    }

    /// Like [`Harness::new`], with extra builder settings.
    pub(crate) fn with(
        store: ScriptedStore,
        kicker: ScriptedKicker,
        configure: impl FnOnce(ArbiterBuilder<ScriptedStore>) -> ArbiterBuilder<ScriptedStore>,
    ) -> Self {
        let observer = RecordingObserver::default();
        let builder = Arbiter::builder(store)
            .kicker(kicker.clone())
            .observer(observer.clone());
        Self {
            arbiter: configure(builder).build(),
            kicker,
            observer,
        }
    }

    pub(crate) fn store(&self) -> &ScriptedStore {
        self.arbiter.store()
    }

    pub(crate) async fn claim(&self) -> Result<ClaimOutcome, Error> {
        self.arbiter.claim(&input()).await
    }
}

/// An Arbiter with no kicker (fail-open) and a recording observer.
pub(crate) fn without_kicker(store: ScriptedStore) -> (Arbiter<ScriptedStore>, RecordingObserver) {
    let observer = RecordingObserver::default();
    let arbiter = Arbiter::builder(store).observer(observer.clone()).build();
    (arbiter, observer)
}

/// The fields of a non-replayed outcome, spelled out by each test.
pub(crate) struct Expect {
    pub(crate) generation: i64,
    pub(crate) prev_generation: i64,
    pub(crate) has_prev: bool,
    pub(crate) prev_owner: Option<Owner>,
    pub(crate) kicked: bool,
    pub(crate) kick_detail: Option<KickDetail>,
}

impl Expect {
    pub(crate) fn outcome(self) -> ClaimOutcome {
        ClaimOutcome {
            generation: self.generation,
            prev_generation: self.prev_generation,
            has_prev: self.has_prev,
            prev_owner: self.prev_owner,
            kicked: self.kicked,
            kick_detail: self.kick_detail,
            replayed: false,
        }
    }
}

/// The outcome SPEC section 4 prescribes for a replay: the stored gen, nothing else.
pub(crate) fn replayed(generation: i64) -> ClaimOutcome {
    ClaimOutcome {
        generation,
        prev_generation: 0,
        has_prev: false,
        prev_owner: None,
        kicked: false,
        kick_detail: None,
        replayed: true,
    }
}

/// A memory store on which a rival login of one key (another process's arbiter on the same
/// store) lands exactly between a logout's read of that key and its tombstone: `release` of
/// the rival's key first runs the rival's claim to completion (it kicks the old session and
/// writes gen + 1), then tombstones, so the logout's fence fails.
pub(crate) struct LoginBeforeRelease {
    inner: Arc<unique_store_memory::MemoryStore>,
    rival: Mutex<Option<ClaimInput>>,
}

impl LoginBeforeRelease {
    pub(crate) fn new(inner: Arc<unique_store_memory::MemoryStore>, rival: ClaimInput) -> Self {
        Self {
            inner,
            rival: Mutex::new(Some(rival)),
        }
    }
}

#[async_trait]
impl Store for LoginBeforeRelease {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.inner.read_owner(key).await
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        self.inner.claim_cas(key, owner, claim_id, snap).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.inner.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        let rival = {
            let mut rival = lock(&self.rival);
            if rival.as_ref().is_some_and(|r| r.key == *key) {
                rival.take()
            } else {
                None
            }
        };
        if let Some(rival) = rival {
            let other = Arbiter::new(Arc::clone(&self.inner));
            other.claim(&rival).await.expect("the rival login wins");
        }
        self.inner.release(key, generation).await
    }
    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        self.inner.read_owners(keys).await
    }
    async fn list_sessions(
        &self,
        user: &unique_core::UserKey,
    ) -> Result<Vec<unique_core::UserSession>, Error> {
        self.inner.list_sessions(user).await
    }
}
