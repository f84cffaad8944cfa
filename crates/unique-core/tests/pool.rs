//! Pooled sessions (`Arbiter::claim_pooled`, docs/design.md "Pooled sessions") on the memory
//! store: races of many pooled logins of one user, through one arbiter and through two
//! arbiters on one store, never leave more than `k` sessions online, counted from the store
//! and from the answers; `deny-new` refuses exactly the rest, each refusal listing `k`
//! sessions; `evict-oldest` racers each evict a different session, every eviction kicked
//! before its write, the oldest login first; a replay answers the same place, a superseded
//! retry `Superseded`. A broken store (its CAS's gen check removed) fails the races.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use unique_core::{
    Arbiter, CasOutcome, ClaimInput, CurrentView, Error, Key, KickOutcome, KickPayload, Kicker,
    Owner, OwnerState, PoolPolicy, PoolRequest, PooledOutcome, Store, UserKey, UserSession,
    async_trait,
};
use unique_store_memory::MemoryStore;

/// The project's session limit `N` in these tests; pools ask for `K` places.
const N: usize = 5;
const K: usize = 3;

/// The memory store; every `read_owners` yields to the other tasks after it read, so racers
/// all read before any of them writes (the worst interleaving for a read-then-write).
/// `broken`: the CAS's gen check removed (it writes over whatever the record holds now).
struct Racing {
    inner: MemoryStore,
    broken: bool,
}

#[async_trait]
impl Store for Racing {
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
        if self.broken {
            let now = self.inner.read_owner(key).await?;
            return self.inner.claim_cas(key, owner, claim_id, &now).await;
        }
        self.inner.claim_cas(key, owner, claim_id, snap).await
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.inner.current(key).await
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.inner.release(key, generation).await
    }

    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        let read = self.inner.read_owners(keys).await;
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        read
    }

    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        self.inner.list_sessions(user).await
    }
}

/// One kick as the kicker saw it.
#[derive(Debug, Clone)]
struct Kick {
    endpoint: String,
    payload: KickPayload,
    /// The store still held the kicked session on its place when the kick arrived. A racer
    /// that read before another's eviction kicks a session already gone (its write then
    /// loses); the winner's kick must find it in place.
    held: bool,
}

/// Records every kick, and whether the store still held the kicked session at the kick.
struct Recorder {
    store: Arc<Racing>,
    kicks: Mutex<Vec<Kick>>,
}

#[async_trait]
impl Kicker for Recorder {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, _: Duration) -> KickOutcome {
        let record = self.store.read_owner(&payload.key()).await.unwrap();
        let held = record.generation + 1 == payload.generation
            && record.owner.is_some_and(|o| o.endpoint == endpoint);
        self.kicks.lock().unwrap().push(Kick {
            endpoint: endpoint.to_owned(),
            payload: payload.clone(),
            held,
        });
        KickOutcome::Confirmed
    }
}

impl Recorder {
    /// The eviction `outcome` reports was kicked while its session still held the place:
    /// kick first, then write.
    fn kicked_first(&self, outcome: &PooledOutcome) -> bool {
        let evicted = outcome
            .claim
            .prev_owner
            .as_ref()
            .map(|o| o.endpoint.as_str());
        self.kicks.lock().unwrap().iter().any(|k| {
            k.held
                && Some(k.endpoint.as_str()) == evicted
                && k.payload.slot == outcome.slot
                && k.payload.generation == outcome.claim.prev_generation + 1
        })
    }
}

struct Rig {
    kicker: Arc<Recorder>,
    arbiters: Vec<Arbiter<Arc<Racing>>>,
}

fn rig(arbiters: usize, broken: bool) -> Rig {
    let store = Arc::new(Racing {
        inner: MemoryStore::new(),
        broken,
    });
    let kicker = Arc::new(Recorder {
        store: Arc::clone(&store),
        kicks: Mutex::new(Vec::new()),
    });
    let arbiters = (0..arbiters)
        .map(|_| {
            Arbiter::builder(Arc::clone(&store))
                .kicker(Arc::clone(&kicker))
                .session_limit(N)
                .max_claim_attempts(64)
                .max_queued_claims(64)
                .build()
        })
        .collect();
    Rig { kicker, arbiters }
}

fn user() -> UserKey {
    UserKey::new("game", "prod", 7)
}

fn login(n: usize) -> ClaimInput {
    ClaimInput {
        key: user().key(""),
        owner: Owner::new("", "", format!("http://node-{n}.test/kick")),
        claim_id: format!("login-{n}"),
    }
}

fn pool(policy: PoolPolicy) -> PoolRequest {
    PoolRequest {
        policy,
        limit: Some(K),
    }
}

impl Rig {
    /// `total` pooled logins racing, spread over the arbiters; their answers in login order.
    async fn race(
        &self,
        logins: std::ops::Range<usize>,
        policy: PoolPolicy,
    ) -> Vec<Result<PooledOutcome, Error>> {
        let tasks: Vec<_> = logins
            .map(|n| {
                let arbiter = self.arbiters[n % self.arbiters.len()].clone();
                tokio::spawn(async move { arbiter.claim_pooled(&login(n), &pool(policy)).await })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        answers
    }

    async fn online(&self) -> Vec<UserSession> {
        self.arbiters[0].sessions(&user()).await.unwrap()
    }
}

/// Never more than `K` online: in the store, and counted from the answers (each winner's
/// place, less the places a later winner evicted, which the evictions name).
async fn assert_at_most_k(rig: &Rig, answers: &[Result<PooledOutcome, Error>]) {
    let online = rig.online().await;
    assert_eq!(online.len(), K, "the store holds exactly K: {online:?}");
    let held: HashSet<(String, i64)> = answers
        .iter()
        .flatten()
        .map(|o| (o.slot.clone(), o.claim.generation))
        .collect();
    let replaced: HashSet<(String, i64)> = answers
        .iter()
        .flatten()
        .filter(|o| o.evicted)
        .map(|o| (o.slot.clone(), o.claim.prev_generation))
        .collect();
    let still = held.difference(&replaced).count();
    let wins = answers.iter().flatten().count();
    assert_eq!(
        held.len(),
        wins,
        "two answers claim one place at one gen: {answers:?}"
    );
    assert!(
        still <= K,
        "the answers leave {still} sessions online, more than {K}: {answers:?}"
    );
}

async fn deny_new_race(arbiters: usize, broken: bool) {
    let rig = rig(arbiters, broken);
    let total = 12;
    let answers = rig.race(0..total, PoolPolicy::DenyNew).await;
    assert_at_most_k(&rig, &answers).await;
    let mut refused = 0;
    for answer in &answers {
        match answer {
            Ok(outcome) => assert!(!outcome.evicted && !outcome.claim.has_prev, "{outcome:?}"),
            Err(Error::LimitReached { limit, sessions }) => {
                refused += 1;
                assert_eq!(*limit, K);
                assert_eq!(
                    sessions.len(),
                    K,
                    "a refusal lists the K online: {sessions:?}"
                );
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(refused, total - K, "{answers:?}");
    assert!(
        rig.kicker.kicks.lock().unwrap().is_empty(),
        "deny-new kicks nobody"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_new_racers_through_one_arbiter_admit_exactly_k() {
    deny_new_race(1, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_new_racers_through_two_arbiters_admit_exactly_k() {
    deny_new_race(2, false).await;
}

/// Fills the pool with logins `0..K` one after another, so login `i` is on place `#i`.
async fn fill(rig: &Rig) {
    for n in 0..K {
        let outcome = rig.arbiters[0]
            .claim_pooled(&login(n), &pool(PoolPolicy::EvictOldest))
            .await
            .unwrap();
        assert_eq!(outcome.slot, format!("#{n}"));
        assert!(!outcome.evicted);
    }
}

async fn evict_race(arbiters: usize, broken: bool) {
    let rig = rig(arbiters, broken);
    fill(&rig).await;
    let racers = K..2 * K;
    let answers = rig.race(racers, PoolPolicy::EvictOldest).await;
    assert_at_most_k(&rig, &answers).await;
    let mut evicted = HashSet::new();
    for answer in &answers {
        let outcome = answer.as_ref().expect("evict-oldest always gets a place");
        assert!(outcome.evicted && outcome.claim.has_prev && outcome.claim.kicked);
        let prev = outcome.claim.prev_owner.clone().expect("the evicted owner");
        assert!(
            evicted.insert(prev.endpoint.clone()),
            "two racers evicted one session ({}): {answers:?}",
            prev.endpoint
        );
    }
    // Every evicted session was kicked while it still held its place: kick first, then write.
    for outcome in answers.iter().flatten() {
        assert!(
            rig.kicker.kicked_first(outcome),
            "{outcome:?}: {:?}",
            rig.kicker.kicks
        );
    }
    // Through one arbiter the logins are stamped in order, so the racers evict the first
    // logins. Two arbiters stamp by their own clocks, which order logins of one millisecond
    // arbitrarily (docs/design.md "Pooled sessions": skew).
    if arbiters == 1 {
        let mut online: Vec<String> = rig
            .online()
            .await
            .into_iter()
            .map(|s| s.owner.endpoint)
            .collect();
        online.sort();
        let mut racers: Vec<String> = (K..2 * K).map(|n| login(n).owner.endpoint).collect();
        racers.sort();
        assert_eq!(online, racers, "the racers replaced every first login");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_oldest_racers_through_one_arbiter_each_evict_another_session() {
    evict_race(1, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_oldest_racers_through_two_arbiters_each_evict_another_session() {
    evict_race(2, false).await;
}

/// The broken store (no gen check in its CAS) must fail the race checks above: they would
/// not catch an over-admitting pool otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cas_without_its_gen_check_fails_the_race_checks() {
    for round in 0..20 {
        let caught = tokio::spawn(deny_new_race(2, true)).await.is_err()
            || tokio::spawn(evict_race(2, true)).await.is_err();
        if caught {
            return;
        }
        eprintln!("round {round}: the broken store got through; racing again");
    }
    panic!("the race checks never caught a CAS without its gen check");
}

#[tokio::test]
async fn evict_oldest_evicts_the_oldest_login_first() {
    let rig = rig(1, false);
    fill(&rig).await;
    let arbiter = &rig.arbiters[0];
    // Each new login evicts the oldest online: #0, #1, #2, then #0 again (its login is now
    // the oldest).
    for (n, place) in (K..K + 4).zip(["#0", "#1", "#2", "#0"]) {
        let outcome = arbiter
            .claim_pooled(&login(n), &pool(PoolPolicy::EvictOldest))
            .await
            .unwrap();
        assert_eq!(outcome.slot, place, "login {n}");
        assert!(outcome.evicted);
        let evicted = outcome.claim.prev_owner.unwrap().endpoint;
        let expected = login(n - K).owner.endpoint;
        assert_eq!(evicted, expected, "login {n} evicted the oldest");
    }
    let kicks = rig.kicker.kicks.lock().unwrap().clone();
    let order: Vec<(&str, &str)> = kicks
        .iter()
        .map(|k| (k.endpoint.as_str(), k.payload.slot.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("http://node-0.test/kick", "#0"),
            ("http://node-1.test/kick", "#1"),
            ("http://node-2.test/kick", "#2"),
            ("http://node-3.test/kick", "#0"),
        ]
    );
    for kick in &kicks {
        assert!(kick.held, "{kick:?}");
        assert_eq!(kick.payload.reason.as_str(), "login-elsewhere");
        assert_eq!(
            kick.payload.message.as_deref(),
            Some("session limit 3 reached")
        );
    }
    // Login times are stamped, increasing with the order of the logins.
    let online = arbiter.sessions(&user()).await.unwrap();
    let since = |endpoint: &str| {
        online
            .iter()
            .find(|s| s.owner.endpoint == endpoint)
            .and_then(|s| s.owner.since)
            .expect("stamped")
    };
    assert!(since("http://node-4.test/kick") < since("http://node-5.test/kick"));
    assert!(since("http://node-5.test/kick") < since("http://node-6.test/kick"));
}

#[tokio::test]
async fn a_replay_returns_the_same_place_and_a_superseded_retry_is_refused() {
    let rig = rig(1, false);
    let arbiter = &rig.arbiters[0];
    let one = PoolRequest {
        policy: PoolPolicy::EvictOldest,
        limit: Some(1),
    };
    let first = arbiter
        .claim_pooled(&login(0), &pool(PoolPolicy::DenyNew))
        .await
        .unwrap();
    let second = arbiter
        .claim_pooled(&login(1), &pool(PoolPolicy::DenyNew))
        .await
        .unwrap();
    assert_eq!((first.slot.as_str(), second.slot.as_str()), ("#0", "#1"));
    // The retry of login 1 (same claim_id) is that login, on its place, nothing written.
    let again = arbiter
        .claim_pooled(&login(1), &pool(PoolPolicy::DenyNew))
        .await
        .unwrap();
    assert_eq!(again.slot, "#1");
    assert!(again.claim.replayed && !again.evicted);
    assert_eq!(again.claim.generation, second.claim.generation);
    // A pool of one: login 2 evicts login 0 from #0; login 0's retry is over.
    let third = arbiter.claim_pooled(&login(2), &one).await.unwrap();
    assert_eq!((third.slot.as_str(), third.evicted), ("#0", true));
    let e = arbiter.claim_pooled(&login(0), &one).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Superseded {
                generation: 1,
                current: 2
            }
        ),
        "{e:?}"
    );
    assert_eq!(rig.online().await.len(), 2);
}

#[tokio::test]
async fn pools_are_checked_and_places_are_named_only_after_the_claim() {
    let rig = rig(1, false);
    let arbiter = &rig.arbiters[0];
    for (limit, policy) in [
        (Some(0), PoolPolicy::DenyNew),
        (Some(N + 1), PoolPolicy::EvictOldest),
    ] {
        let e = arbiter
            .claim_pooled(&login(0), &PoolRequest { policy, limit })
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "invalid params: pool.limit must be from 1 to {N}, the project's session limit; got {}",
                limit.unwrap()
            )
        );
    }
    let mut slotted = login(0);
    slotted.key.slot = "pc".into();
    let e = arbiter
        .claim_pooled(&slotted, &PoolRequest::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("slot and pool are exclusive"), "{e}");
    let mut place = login(0);
    place.key.slot = "#2".into();
    let e = arbiter.claim(&place).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid params: slot '#2' is a pool place: claim with \"pool\" instead"
    );
    place.key.slot = "#x".into();
    let e = arbiter.claim(&place).await.unwrap_err();
    assert!(e.to_string().contains("slot must not contain '#'"), "{e}");
    // The default limit is the project's N, and another project has its own.
    let other = Arbiter::builder(MemoryStore::new())
        .session_limit_for("game", 2)
        .build();
    assert_eq!(
        (other.session_limit("game"), other.session_limit("x")),
        (2, 5)
    );
    let full = PoolRequest {
        policy: PoolPolicy::DenyNew,
        limit: None,
    };
    for n in 0..2 {
        other.claim_pooled(&login(n), &full).await.unwrap();
    }
    let e = other.claim_pooled(&login(2), &full).await.unwrap_err();
    assert!(matches!(&e, Error::LimitReached { limit: 2, sessions } if sessions.len() == 2));
    assert_eq!(e.code(), "limit_reached");
    assert!(!e.is_retryable() && !e.is_superseded());
    // A place names its session on every other call: current, release.
    let placed = user().key("#1");
    let view = other.current(&placed).await.unwrap();
    assert!(view.owner.is_some_and(|o| o.since.is_some()));
    assert!(other.release(&placed, view.generation).await.unwrap());
    let again = other.claim_pooled(&login(3), &full).await.unwrap();
    assert_eq!(again.slot, "#1", "the freed place is taken again");
}

#[tokio::test]
async fn a_plain_claim_stores_no_login_time_even_when_the_caller_sends_one() {
    let arbiter = Arbiter::new(MemoryStore::new());
    let mut input = login(0);
    input.owner.since = Some(1);
    arbiter.claim(&input).await.unwrap();
    let view = arbiter.current(&input.key).await.unwrap();
    assert_eq!(view.owner.unwrap().since, None);
}
