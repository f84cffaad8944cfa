//! Histories against in-process servers: the memory store, which must keep every rule, and
//! deliberately broken stores, which the checker must catch under the rule they break.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use unique_arbiter_http::{ArbiterService, serve};
use unique_core::{
    Arbiter, CasOutcome, CurrentView, Error, Key, Owner, OwnerState, RecentClaims, Store, UserKey,
    UserSession, async_trait, encode_owner,
};
use unique_history::{Report, Rule, Workload, run_duration};
use unique_store_memory::MemoryStore;

/// Serves an Arbiter on `store` on a loopback port; returns its base URL.
async fn serve_in_process<S: Store>(store: S) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = ArbiterService::new(Arbiter::new(store));
    tokio::spawn(serve(listener, service, std::future::pending()));
    format!("http://{addr}")
}

/// Runs the default workload against `servers` and reports it.
async fn run(name: &str, project: &str, servers: Vec<String>, duration: Duration) -> Report {
    let history = Workload::new(servers)
        .project(project)
        .duration(duration)
        .run()
        .await
        .unwrap();
    let report = Report::new(name, &history, 0);
    println!("{report}");
    report
}

/// Two Arbiters (two servers) on one memory store: each queues claims per key, and the
/// store's fenced write arbitrates between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_keeps_every_rule() {
    let store = Arc::new(MemoryStore::new());
    let servers = vec![
        serve_in_process(store.clone()).await,
        serve_in_process(store).await,
    ];
    let duration = run_duration(Duration::from_secs(3));
    let report = run("memory, 2 in-process servers", "memory", servers, duration).await;
    report.assert_clean();
    assert!(
        report.counts.superseded > 0,
        "late retries of replaced logins must be answered superseded: {report}"
    );
    assert!(
        report.counts.list.ok > 0,
        "listings must be answered: {report}"
    );
}

/// How a [`Broken`] store breaks its contract.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Breakage {
    /// Its claim writes `snap.gen + 1` whatever the record holds now, so two servers deciding
    /// on the same snapshot both win, under one gen (C3's unconditional put).
    Unfenced,
    /// `current` answers from a per-key cache it refreshes only on every fourth read, like a
    /// read from a lagging replica (C2's eventually consistent read).
    StaleReads,
    /// Its claims keep no recent claims (C9): a late retry of a replaced login looks new
    /// and wins a second gen, kicking the newer session.
    ForgetsWins,
    /// Every slot of a user shares the default slot's record: a login on slot `"mobile"`
    /// replaces the one on the default slot (a partition key that drops the slot).
    SharedSlots,
    /// `list_sessions` answers from a per-user cache it refreshes only on every fourth
    /// listing (C10's strongly consistent read, broken).
    StaleListing,
}

/// A memory store broken on purpose in one way; otherwise the memory store.
struct Broken {
    inner: MemoryStore,
    breakage: Breakage,
    cache: Mutex<HashMap<Key, (CurrentView, u32)>>,
    listings: Mutex<HashMap<UserKey, (Vec<UserSession>, u32)>>,
}

impl Broken {
    fn new(breakage: Breakage) -> Self {
        Self {
            inner: MemoryStore::new(),
            breakage,
            cache: Mutex::default(),
            listings: Mutex::default(),
        }
    }

    /// The key the store really uses: the default slot's when it shares slots.
    fn stored(&self, key: &Key) -> Key {
        if self.breakage == Breakage::SharedSlots {
            key.user().key("")
        } else {
            key.clone()
        }
    }
}

#[async_trait]
impl Store for Broken {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.inner.read_owner(&self.stored(key)).await
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        let key = &self.stored(key);
        if self.breakage == Breakage::ForgetsWins {
            let forgetful = OwnerState {
                recent_claims: RecentClaims::new(),
                ..snap.clone()
            };
            return self.inner.claim_cas(key, owner, claim_id, &forgetful).await;
        }
        if self.breakage != Breakage::Unfenced {
            return self.inner.claim_cas(key, owner, claim_id, snap).await;
        }
        let owner = encode_owner(owner)?;
        // A real store's write is a round trip away from its read; yielding stands in for it
        // so the race window is not confined to a few instructions.
        tokio::task::yield_now().await;
        let generation = snap.generation + 1;
        self.inner
            .put_raw(key, generation, Some(&owner), Some(claim_id), None);
        Ok(CasOutcome::Written { generation })
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        let fresh = self.inner.current(&self.stored(key)).await?;
        if self.breakage != Breakage::StaleReads {
            return Ok(fresh);
        }
        let mut cache = self.cache.lock().unwrap();
        let (view, reads) = cache.entry(key.clone()).or_insert((fresh.clone(), 0));
        *reads += 1;
        if *reads % 4 == 0 {
            *view = fresh;
        }
        Ok(view.clone())
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.inner.release(&self.stored(key), generation).await
    }
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let fresh = self.inner.list_sessions(user).await?;
        if self.breakage != Breakage::StaleListing {
            return Ok(fresh);
        }
        let mut listings = self.listings.lock().unwrap();
        let (listing, listed) = listings.entry(user.clone()).or_insert((fresh.clone(), 0));
        *listed += 1;
        if *listed % 4 == 0 {
            *listing = fresh;
        }
        Ok(listing.clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_ignores_the_fence_breaks_one_gen_one_claim_id() {
    // Two servers: each queues its own claims per key, so the race is between them.
    let store = Arc::new(Broken::new(Breakage::Unfenced));
    let servers = vec![
        serve_in_process(store.clone()).await,
        serve_in_process(store).await,
    ];
    let report = run(
        "broken store: claims ignore the fence",
        "unfenced",
        servers,
        Duration::from_secs(2),
    )
    .await;
    assert!(report.violations_of(Rule::OneClaimPerGen) > 0, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_stale_reads_breaks_no_going_back() {
    let servers = vec![serve_in_process(Broken::new(Breakage::StaleReads)).await];
    let report = run(
        "broken store: stale reads",
        "stale",
        servers,
        Duration::from_secs(2),
    )
    .await;
    assert!(report.violations_of(Rule::NoGoingBack) > 0, "{report}");
    // Claims read the record afresh and every stale view was once true: the other rules
    // have nothing to object to.
    assert_eq!(report.violations_of(Rule::ClaimAbove), 0, "{report}");
    assert_eq!(report.violations_of(Rule::OneClaimPerGen), 0, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_forgets_its_wins_breaks_one_gen_per_claim() {
    let servers = vec![serve_in_process(Broken::new(Breakage::ForgetsWins)).await];
    let report = run(
        "broken store: no recent claims",
        "forgets",
        servers,
        Duration::from_secs(2),
    )
    .await;
    assert!(report.violations_of(Rule::OneGenPerClaim) > 0, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_shares_one_record_across_slots_breaks_one_claim_per_gen() {
    let servers = vec![serve_in_process(Broken::new(Breakage::SharedSlots)).await];
    let report = run(
        "broken store: one record for all slots",
        "shared",
        servers,
        Duration::from_secs(2),
    )
    .await;
    // Reads of one slot see sessions that only claims on the other slot wrote.
    assert!(report.violations_of(Rule::OneClaimPerGen) > 0, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_stale_listings_breaks_no_going_back() {
    let servers = vec![serve_in_process(Broken::new(Breakage::StaleListing)).await];
    let report = run(
        "broken store: stale listings",
        "stale-list",
        servers,
        Duration::from_secs(2),
    )
    .await;
    assert!(report.violations_of(Rule::NoGoingBack) > 0, "{report}");
    // Only the listings are stale: claims and reads keep the claim rules.
    assert_eq!(report.violations_of(Rule::ClaimAbove), 0, "{report}");
}
