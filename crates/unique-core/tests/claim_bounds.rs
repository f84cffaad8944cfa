//! The Arbiter's own bounds on a claim: a full line of claims on one key is
//! refused with `Throttled`, and a claim past its deadline stops before its next
//! kick or write with `Unavailable` — but never abandons a write it already
//! sent. Each shed claim is reported to the observer. Time is paused, so the
//! deadlines pass without waiting.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use unique_core::{
    Arbiter, CasOutcome, ClaimInput, ClaimOutcome, CurrentView, Error, Key, KickOutcome,
    KickPayload, Kicker, Observer, Owner, OwnerState, ShedReason, Store, async_trait,
};
use unique_store_memory::MemoryStore;

const HELD: &str = "http://10.0.0.1:7000/kick";

/// Holds every kick to [`HELD`] until the gate opens (never, unless a test adds
/// permits); reports each held kick on `entered`.
struct HoldingKicker {
    gate: Arc<Semaphore>,
    entered: mpsc::UnboundedSender<()>,
}

#[async_trait]
impl Kicker for HoldingKicker {
    async fn kick(&self, endpoint: &str, _: &KickPayload, _: Duration) -> KickOutcome {
        if endpoint == HELD {
            let _ = self.entered.send(());
            self.gate.acquire().await.expect("gate open").forget();
        }
        KickOutcome::Confirmed
    }
}

/// Records every shed claim.
#[derive(Clone, Default)]
struct Sheds(Arc<Mutex<Vec<ShedReason>>>);

impl Observer for Sheds {
    fn on_claim_shed(&self, reason: ShedReason) {
        self.0.lock().unwrap().push(reason);
    }
}

impl Sheds {
    fn seen(&self) -> Vec<ShedReason> {
        self.0.lock().unwrap().clone()
    }
}

/// A memory store whose claim writes take `write_delay` (a slow disk or network).
struct SlowWrites {
    inner: MemoryStore,
    write_delay: Duration,
}

#[async_trait]
impl Store for SlowWrites {
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
        tokio::time::sleep(self.write_delay).await;
        self.inner.claim_cas(key, owner, claim_id, snap).await
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.inner.current(key).await
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.inner.release(key, generation).await
    }
}

fn claim(key: &Key, endpoint: &str, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: Owner::new("eu", "c1", endpoint),
        claim_id: claim_id.to_owned(),
    }
}

fn key() -> Key {
    Key::new("game", "prod", 7)
}

struct Setup {
    arbiter: Arbiter<Arc<SlowWrites>>,
    store: Arc<SlowWrites>,
    sheds: Sheds,
    gate: Arc<Semaphore>,
    entered: mpsc::UnboundedReceiver<()>,
}

/// An arbiter over a memory store holding a session at [`HELD`] (gen 1), whose
/// replacement's kick is held at the gate.
async fn setup(
    configure: impl FnOnce(
        unique_core::ArbiterBuilder<Arc<SlowWrites>>,
    ) -> unique_core::ArbiterBuilder<Arc<SlowWrites>>,
    write_delay: Duration,
) -> Setup {
    let store = Arc::new(SlowWrites {
        inner: MemoryStore::new(),
        write_delay,
    });
    Arbiter::new(Arc::clone(&store))
        .claim(&claim(&key(), HELD, "held"))
        .await
        .expect("first login");
    let gate = Arc::new(Semaphore::new(0));
    let (tx, entered) = mpsc::unbounded_channel();
    let sheds = Sheds::default();
    let builder = Arbiter::builder(Arc::clone(&store))
        .kicker(HoldingKicker {
            gate: Arc::clone(&gate),
            entered: tx,
        })
        .observer(sheds.clone())
        .kick_timeout(Duration::from_secs(3));
    Setup {
        arbiter: configure(builder).build(),
        store,
        sheds,
        gate,
        entered,
    }
}

fn spawn(
    arbiter: &Arbiter<Arc<SlowWrites>>,
    input: ClaimInput,
) -> tokio::task::JoinHandle<Result<ClaimOutcome, Error>> {
    let arbiter = arbiter.clone();
    tokio::spawn(async move { arbiter.claim(&input).await })
}

async fn stored_generation(store: &SlowWrites) -> i64 {
    store.inner.read_owner(&key()).await.unwrap().generation
}

/// A claim beyond `max_queued_claims` waiters is refused at once with
/// `Throttled` (429 on the wire) and reported as `queue-full`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_full_line_is_throttled_and_counted() {
    let mut s = setup(|b| b.max_queued_claims(0), Duration::ZERO).await;
    let holder = spawn(
        &s.arbiter,
        claim(&key(), "http://10.0.0.2:7000/kick", "holder"),
    );
    s.entered.recv().await.expect("the holder's kick is held");
    let refused = s
        .arbiter
        .claim(&claim(&key(), "http://10.0.0.3:7000/kick", "refused"))
        .await;
    assert!(matches!(refused, Err(Error::Throttled)), "{refused:?}");
    assert_eq!(s.sheds.seen(), [ShedReason::QueueFull]);
    s.gate.add_permits(1);
    assert_eq!(holder.await.unwrap().unwrap().generation, 2);
}

/// The default line is bounded: sixteen claims wait, the seventeenth is throttled.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_default_line_holds_sixteen_waiters() {
    let mut s = setup(|b| b, Duration::ZERO).await;
    let holder = spawn(
        &s.arbiter,
        claim(&key(), "http://10.0.0.2:7000/kick", "holder"),
    );
    s.entered.recv().await.expect("the holder's kick is held");
    let waiters: Vec<_> = (0..unique_core::DEFAULT_MAX_QUEUED_CLAIMS)
        .map(|i| {
            spawn(
                &s.arbiter,
                claim(&key(), "http://10.0.0.2:7000/kick", &format!("w{i}")),
            )
        })
        .collect();
    tokio::task::yield_now().await;
    let refused = s
        .arbiter
        .claim(&claim(&key(), "http://10.0.0.3:7000/kick", "one-too-many"))
        .await;
    assert!(matches!(refused, Err(Error::Throttled)), "{refused:?}");
    s.gate.add_permits(1);
    holder.await.unwrap().unwrap();
    for waiter in waiters {
        waiter.await.unwrap().unwrap();
    }
}

/// A claim still waiting in line when its deadline passes answers
/// `Unavailable` without reading or writing, and is counted as `deadline`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_claim_whose_deadline_passes_in_line_gives_up() {
    let mut s = setup(
        |b| {
            b.claim_timeout(Duration::from_secs(5))
                .kick_timeout(Duration::from_mins(1))
        },
        Duration::ZERO,
    )
    .await;
    let holder = spawn(
        &s.arbiter,
        claim(&key(), "http://10.0.0.2:7000/kick", "holder"),
    );
    s.entered.recv().await.expect("the holder's kick is held");
    let waiter = s
        .arbiter
        .claim(&claim(&key(), "http://10.0.0.3:7000/kick", "waiter"))
        .await;
    assert!(
        matches!(&waiter, Err(e) if e.is_unavailable() && e.to_string().contains("deadline")),
        "{waiter:?}"
    );
    // The holder's own deadline passes inside its held kick: it stops before its write.
    let holder = holder.await.unwrap();
    assert!(
        matches!(&holder, Err(e) if e.is_unavailable()),
        "{holder:?}"
    );
    assert_eq!(s.sheds.seen(), [ShedReason::Deadline, ShedReason::Deadline]);
    assert_eq!(stored_generation(&s.store).await, 1, "nothing was written");
}

/// A kick that outlasts the claim's deadline is cut at the deadline (the kick
/// gets what is left, not its full timeout), and the claim stops before its
/// write: the old session stays, nothing is written after the answer.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_claim_stops_before_its_write_once_the_deadline_passed() {
    let mut s = setup(|b| b.claim_timeout(Duration::from_secs(1)), Duration::ZERO).await;
    let started = tokio::time::Instant::now();
    let claim = spawn(
        &s.arbiter,
        claim(&key(), "http://10.0.0.2:7000/kick", "late"),
    );
    s.entered.recv().await.expect("the kick is held");
    let result = claim.await.unwrap();
    assert!(
        matches!(&result, Err(e) if e.is_unavailable() && e.to_string().contains("deadline")),
        "{result:?}"
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(1),
        "cut at the deadline, not the 3 s kick timeout"
    );
    assert_eq!(s.sheds.seen(), [ShedReason::Deadline]);
    // Well after the answer, the record is still the old session's.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(stored_generation(&s.store).await, 1);
}

/// A write already sent when the deadline passes is waited for, never
/// abandoned: the claim answers with what it wrote, so it never writes after
/// it answered.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_write_in_flight_at_the_deadline_is_waited_for() {
    let s = setup(
        |b| b.claim_timeout(Duration::from_secs(1)),
        Duration::from_secs(4),
    )
    .await;
    s.gate.add_permits(1);
    let started = tokio::time::Instant::now();
    let outcome = s
        .arbiter
        .claim(&claim(&key(), "http://10.0.0.2:7000/kick", "slow-write"))
        .await
        .expect("the write finished, so the claim answers it");
    assert_eq!(outcome.generation, 2);
    assert_eq!(started.elapsed(), Duration::from_secs(4));
    assert_eq!(stored_generation(&s.store).await, 2);
    assert!(s.sheds.seen().is_empty());
}
