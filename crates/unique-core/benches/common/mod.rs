//! Scenarios shared by the timing bench (`arbiter_claim`) and the allocation
//! bench (`claim_allocations`): the same inputs, through the `Arbiter` and as
//! the bare store calls the Arbiter makes.

use std::time::Duration;

use unique_core::{
    Arbiter, CasOutcome, ClaimInput, DEFAULT_MAX_CLAIM_ATTEMPTS, Error, Key, KickOutcome,
    KickPayload, Kicker, Owner, OwnerState, Store, async_trait,
};
use unique_store_memory::MemoryStore;

/// Racers in the contended scenario.
pub(crate) const RACERS: usize = 64;

/// A kicker whose receiver confirms at once: measures the Arbiter's kick path
/// without a network.
pub(crate) struct InstantKicker;

#[async_trait]
impl Kicker for InstantKicker {
    async fn kick(
        &self,
        _endpoint: &str,
        _payload: &KickPayload,
        _timeout: Duration,
    ) -> KickOutcome {
        KickOutcome::Confirmed
    }
}

/// An Arbiter over a fresh memory store with the instant kicker and every other default.
pub(crate) fn arbiter() -> Arbiter<MemoryStore> {
    Arbiter::builder(MemoryStore::new())
        .kicker(InstantKicker)
        .build()
}

/// Turns `node`'s claim into the `i`-th login: a claim_id of its own, written into the
/// same buffer. Reusing a claim_id that won before would be a superseded retry (C9).
pub(crate) fn next_login(node: &mut ClaimInput, i: u64) -> &ClaimInput {
    use std::fmt::Write as _;
    node.claim_id.clear();
    let _ = write!(node.claim_id, "login-{i}");
    node
}

/// A claim of `bench#prod#uid` by node `node` (its own kick endpoint) with `claim_id`.
pub(crate) fn input(uid: i64, node: usize, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: Key::new("bench", "prod", uid),
        owner: Owner::new("eu", "c1", format!("http://10.0.0.{node}:7000/kick")),
        claim_id: claim_id.to_owned(),
    }
}

/// The store calls an uncontended or contended claim needs, made directly: strong
/// read, replay check, fenced CAS, and on a lost race the next attempt from the
/// record the store handed back. No validation, no kick, no observer, no outcome.
/// This is the floor the Arbiter's overhead is measured against.
pub(crate) async fn raw_claim(store: &MemoryStore, input: &ClaimInput) -> Result<i64, Error> {
    let mut carried: Option<OwnerState> = None;
    for _ in 0..DEFAULT_MAX_CLAIM_ATTEMPTS {
        let snap = match carried.take() {
            Some(snap) => snap,
            None => store.read_owner(&input.key).await?,
        };
        if snap.owner.is_some() && snap.claim_id.as_deref() == Some(input.claim_id.as_str()) {
            return Ok(snap.generation);
        }
        match store
            .claim_cas(&input.key, &input.owner, &input.claim_id, &snap)
            .await?
        {
            CasOutcome::Written { generation } => return Ok(generation),
            CasOutcome::LostRace { current } => carried = current,
        }
    }
    Err(Error::unavailable("attempt budget exhausted"))
}

/// A single-threaded runtime with a timer (the Arbiter bounds kicks with
/// `tokio::time::timeout`).
pub(crate) fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime")
}

/// A two-worker runtime, the size of the machine the load numbers come from.
pub(crate) fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("tokio runtime")
}

/// The racers' inputs for one race on `uid`: each its own node and claim_id.
pub(crate) fn racers(uid: i64) -> Vec<ClaimInput> {
    (0..RACERS)
        .map(|node| input(uid, node, &format!("racer-{node}")))
        .collect()
}

/// Runs one race of [`RACERS`] tasks claiming `uid` through `arbiter`; returns the winners.
pub(crate) async fn arbiter_race(arbiter: &Arbiter<MemoryStore>, uid: i64) -> usize {
    let tasks: Vec<_> = racers(uid)
        .into_iter()
        .map(|input| {
            let arbiter = arbiter.clone();
            tokio::spawn(async move { arbiter.claim(&input).await.is_ok() })
        })
        .collect();
    count_winners(tasks).await
}

/// The same race as [`arbiter_race`] with [`raw_claim`].
pub(crate) async fn raw_race(store: &MemoryStore, uid: i64) -> usize {
    let tasks: Vec<_> = racers(uid)
        .into_iter()
        .map(|input| {
            let store = store.clone();
            tokio::spawn(async move { raw_claim(&store, &input).await.is_ok() })
        })
        .collect();
    count_winners(tasks).await
}

async fn count_winners(tasks: Vec<tokio::task::JoinHandle<bool>>) -> usize {
    let mut winners = 0;
    for task in tasks {
        winners += usize::from(task.await.expect("racer panicked"));
    }
    // Each attempt round has exactly one winner, so a race has at least one.
    assert!(winners >= 1, "a race ended without a winner");
    winners
}
