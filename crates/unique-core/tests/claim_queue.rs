//! The per-key claim queue: claims on one key through one Arbiter take turns (no
//! lost race among them), claims on other keys never wait, a dropped claim never
//! wedges its key, and the queue keeps nothing for keys without a claim.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use unique_core::{
    Arbiter, CasOutcome, ClaimInput, ClaimOutcome, CurrentView, Error, Key, KickOutcome,
    KickPayload, Kicker, Owner, OwnerState, Store, async_trait,
};
use unique_store_memory::MemoryStore;

/// A [`MemoryStore`] that counts compare-and-sets, and the ones that lost.
#[derive(Default)]
struct CountingStore {
    inner: MemoryStore,
    cas: AtomicUsize,
    lost: AtomicUsize,
}

#[async_trait]
impl Store for CountingStore {
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
        self.cas.fetch_add(1, Ordering::SeqCst);
        let outcome = self.inner.claim_cas(key, owner, claim_id, snap).await?;
        if matches!(outcome, CasOutcome::LostRace { .. }) {
            self.lost.fetch_add(1, Ordering::SeqCst);
        }
        Ok(outcome)
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.inner.current(key).await
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.inner.release(key, generation).await
    }
}

/// Confirms every kick after yielding to the runtime, so concurrent claims
/// interleave between their read and their write (where they would race).
struct YieldingKicker;

#[async_trait]
impl Kicker for YieldingKicker {
    async fn kick(&self, _: &str, _: &KickPayload, _: Duration) -> KickOutcome {
        tokio::task::yield_now().await;
        KickOutcome::Confirmed
    }
}

/// Holds each kick to [`GATED`] until the test opens the gate (one permit per
/// kick); reports each held kick's payload gen on `entered`. Other kicks confirm.
struct GateKicker {
    gate: Arc<Semaphore>,
    entered: mpsc::UnboundedSender<i64>,
}

const GATED: &str = "http://gated.node:9000/kick";

#[async_trait]
impl Kicker for GateKicker {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, _: Duration) -> KickOutcome {
        if endpoint == GATED {
            let _ = self.entered.send(payload.generation);
            self.gate.acquire().await.expect("gate open").forget();
        }
        KickOutcome::Confirmed
    }
}

fn claim(key: &Key, node: usize, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: Owner::new("eu", "c1", format!("http://10.0.0.{node}:7000/kick")),
        claim_id: claim_id.to_owned(),
    }
}

/// The gated session on `key`: its replacement's kick waits at the gate.
fn gated(key: &Key) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: Owner::new("eu", "c1", GATED),
        claim_id: "gated".to_owned(),
    }
}

struct Gated {
    arbiter: Arbiter<Arc<CountingStore>>,
    store: Arc<CountingStore>,
    gate: Arc<Semaphore>,
    entered: mpsc::UnboundedReceiver<i64>,
}

/// An arbiter whose kicks to [`GATED`] wait for the test; `configure` adds options.
fn gated_arbiter(
    configure: impl FnOnce(
        unique_core::ArbiterBuilder<Arc<CountingStore>>,
    ) -> unique_core::ArbiterBuilder<Arc<CountingStore>>,
) -> Gated {
    let store = Arc::new(CountingStore::default());
    let gate = Arc::new(Semaphore::new(0));
    let (tx, entered) = mpsc::unbounded_channel();
    let builder = Arbiter::builder(Arc::clone(&store)).kicker(GateKicker {
        gate: Arc::clone(&gate),
        entered: tx,
    });
    Gated {
        arbiter: configure(builder).build(),
        store,
        gate,
        entered,
    }
}

/// A claim future that owns its input, to be polled by hand.
fn start(
    arbiter: &Arbiter<Arc<CountingStore>>,
    input: ClaimInput,
) -> Pin<Box<impl Future<Output = Result<ClaimOutcome, Error>> + '_>> {
    Box::pin(async move { arbiter.claim(&input).await })
}

/// Writes the gated session on `key`, then starts a claim replacing it and
/// returns that claim once its kick is held at the gate: it holds `key`'s turn.
async fn held<'a>(
    arbiter: &'a Arbiter<Arc<CountingStore>>,
    entered: &mut mpsc::UnboundedReceiver<i64>,
    key: &Key,
) -> Pin<Box<impl Future<Output = Result<ClaimOutcome, Error>> + 'a>> {
    arbiter.claim(&gated(key)).await.expect("gated session");
    let mut holder = start(arbiter, claim(key, 1, "holder"));
    assert!(pending(&mut holder).await);
    assert_eq!(entered.recv().await, Some(2), "the kick is held");
    holder
}

/// Polls `future` once and returns whether it is still pending (it stays pinned
/// in `future` so the test can poll it again or drop it).
async fn pending<F: Future>(future: &mut Pin<Box<F>>) -> bool {
    tokio::select! {
        biased;
        _ = future.as_mut() => false,
        () = std::future::ready(()) => true,
    }
}

/// Many claims on one key, each kicking the previous session: every one is
/// written (or replayed) in turn, and no compare-and-set ever loses.
#[tokio::test(flavor = "current_thread")]
async fn one_key_claims_take_turns_and_never_lose_a_race() {
    const CLAIMS: usize = 48;
    let store = Arc::new(CountingStore::default());
    // A line longer than the default bound: every claim must wait its turn.
    let arbiter = Arbiter::builder(Arc::clone(&store))
        .kicker(YieldingKicker)
        .max_queued_claims(CLAIMS)
        .build();
    let key = Key::new("game", "prod", 7);
    // Every fourth claim repeats the previous claim_id: a replay, no write.
    let inputs: Vec<ClaimInput> = (0..CLAIMS)
        .map(|i| claim(&key, i, &format!("c{}", i - usize::from(i % 4 == 3))))
        .collect();
    let completed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = inputs
        .into_iter()
        .map(|input| {
            let arbiter = arbiter.clone();
            let completed = Arc::clone(&completed);
            tokio::spawn(async move {
                let outcome = arbiter.claim(&input).await;
                // Current-thread runtime: no other task runs between the claim's
                // end and this push, so the vector is the completion order.
                completed.lock().unwrap().push(outcome);
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("claim task");
    }
    let completed = completed.lock().unwrap();
    let outcomes: Vec<_> = completed
        .iter()
        .map(|r| r.as_ref().expect("every claim succeeds"))
        .collect();
    let written: Vec<i64> = outcomes
        .iter()
        .filter(|o| !o.replayed)
        .map(|o| o.generation)
        .collect();
    assert_eq!(
        written,
        (1..=36).collect::<Vec<i64>>(),
        "gens in completion order"
    );
    assert_eq!(outcomes.iter().filter(|o| o.replayed).count(), 12);
    assert_eq!(store.cas.load(Ordering::SeqCst), written.len());
    assert_eq!(store.lost.load(Ordering::SeqCst), 0);
    assert_eq!(arbiter.claiming_keys(), 0);
}

/// The same on two workers, where claims really run in parallel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_claims_on_two_workers_never_lose_a_race() {
    const CLAIMS: i64 = 64;
    let store = Arc::new(CountingStore::default());
    let arbiter = Arbiter::builder(Arc::clone(&store))
        .kicker(YieldingKicker)
        .max_queued_claims(usize::try_from(CLAIMS).expect("small"))
        .build();
    let key = Key::new("game", "prod", 8);
    let tasks: Vec<_> = (0..CLAIMS)
        .map(|i| {
            let arbiter = arbiter.clone();
            let input = claim(&key, usize::try_from(i).unwrap(), &format!("c{i}"));
            tokio::spawn(async move { arbiter.claim(&input).await })
        })
        .collect();
    let mut gens = Vec::new();
    for task in tasks {
        gens.push(task.await.expect("claim task").expect("claim").generation);
    }
    gens.sort_unstable();
    assert_eq!(gens, (1..=CLAIMS).collect::<Vec<_>>());
    assert_eq!(store.cas.load(Ordering::SeqCst), 64);
    assert_eq!(store.lost.load(Ordering::SeqCst), 0);
    assert_eq!(arbiter.claiming_keys(), 0);
}

/// While one key's claim waits in a slow kick, claims on other keys (another uid,
/// and the same uid in another project) finish, and so do `current` and
/// `release` on the blocked key itself; a second claim on it waits.
#[tokio::test(flavor = "current_thread")]
async fn a_blocked_key_holds_up_no_other_key() {
    let mut g = gated_arbiter(|b| b);
    let hot = Key::new("game", "prod", 1);
    let blocked = held(&g.arbiter, &mut g.entered, &hot).await;

    let mut behind = start(&g.arbiter, claim(&hot, 2, "behind"));
    assert!(pending(&mut behind).await, "same key: waits its turn");

    for other in [Key::new("game", "prod", 2), Key::new("other", "prod", 1)] {
        let outcome = g.arbiter.claim(&claim(&other, 3, "other")).await;
        assert_eq!(outcome.expect("other key").generation, 1);
    }
    assert_eq!(
        g.arbiter.current(&hot).await.expect("current").generation,
        1
    );
    assert!(!g.arbiter.release(&hot, 9).await.expect("release"));
    assert_eq!(g.arbiter.claiming_keys(), 1);

    g.gate.add_permits(1);
    assert_eq!(blocked.await.expect("blocked claim").generation, 2);
    assert_eq!(behind.await.expect("claim behind").generation, 3);
    assert_eq!(g.store.lost.load(Ordering::SeqCst), 0);
    assert_eq!(g.arbiter.claiming_keys(), 0);
}

/// A claim dropped while it waits leaves the line: the claims around it finish
/// and the key is free afterwards.
#[tokio::test(flavor = "current_thread")]
async fn a_dropped_waiting_claim_does_not_wedge_the_key() {
    let mut g = gated_arbiter(|b| b);
    let key = Key::new("game", "prod", 3);
    let holder = held(&g.arbiter, &mut g.entered, &key).await;

    let mut dropped = start(&g.arbiter, claim(&key, 2, "dropped"));
    assert!(pending(&mut dropped).await);
    let mut after = start(&g.arbiter, claim(&key, 3, "after"));
    assert!(pending(&mut after).await);
    drop(dropped);

    g.gate.add_permits(1);
    assert_eq!(holder.await.expect("holder").generation, 2);
    assert_eq!(after.await.expect("claim after").generation, 3);
    assert_eq!(
        g.store.cas.load(Ordering::SeqCst),
        3,
        "the dropped claim wrote nothing"
    );
    assert_eq!(g.arbiter.claiming_keys(), 0);
    let again = g.arbiter.claim(&claim(&key, 4, "again")).await;
    assert_eq!(again.expect("key free").generation, 4);
}

/// A claim dropped while it holds the turn (here, inside the kick) hands the
/// turn to the next in line.
#[tokio::test(flavor = "current_thread")]
async fn a_dropped_holder_hands_the_turn_on() {
    let mut g = gated_arbiter(|b| b);
    let key = Key::new("game", "prod", 4);
    let holder = held(&g.arbiter, &mut g.entered, &key).await;
    let mut next = start(&g.arbiter, claim(&key, 2, "next"));
    assert!(pending(&mut next).await);

    drop(holder);
    // The holder never wrote: the next claim replaces the gated session itself,
    // so its own kick waits at the gate too.
    assert!(pending(&mut next).await);
    assert_eq!(g.entered.recv().await, Some(2));
    g.gate.add_permits(1);
    assert_eq!(next.await.expect("next claim").generation, 2);
    assert_eq!(g.arbiter.claiming_keys(), 0);
}

/// With `max_queued_claims(1)`, a second waiter is refused at once with
/// `Throttled` and no store call; the line then drains normally.
#[tokio::test(flavor = "current_thread")]
async fn a_full_line_refuses_more_claims() {
    let mut g = gated_arbiter(|b| b.max_queued_claims(1));
    let key = Key::new("game", "prod", 5);
    let holder = held(&g.arbiter, &mut g.entered, &key).await;
    let mut waiter = start(&g.arbiter, claim(&key, 2, "waiter"));
    assert!(pending(&mut waiter).await);

    let cas_before = g.store.cas.load(Ordering::SeqCst);
    let refused = g.arbiter.claim(&claim(&key, 3, "refused")).await;
    assert!(matches!(refused, Err(Error::Throttled)), "{refused:?}");
    assert!(refused.unwrap_err().is_retryable());
    assert_eq!(g.store.cas.load(Ordering::SeqCst), cas_before);

    g.gate.add_permits(1);
    assert_eq!(holder.await.expect("holder").generation, 2);
    assert_eq!(waiter.await.expect("waiter").generation, 3);
    assert_eq!(g.arbiter.claiming_keys(), 0);
}

/// The queue keeps an entry only while a key has a claim: after thousands of
/// claims on distinct keys, some concurrent, it holds none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_keeps_nothing_for_idle_keys() {
    let arbiter = Arbiter::builder(MemoryStore::new())
        .kicker(YieldingKicker)
        .build();
    let tasks: Vec<_> = (1..=2_000)
        .map(|uid| {
            let arbiter = arbiter.clone();
            let input = claim(
                &Key::new("game", "prod", uid % 500 + 1),
                1,
                &format!("c{uid}"),
            );
            tokio::spawn(async move { arbiter.claim(&input).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("claim task").expect("claim");
    }
    assert_eq!(arbiter.claiming_keys(), 0);
}
