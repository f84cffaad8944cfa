//! Pooled histories against in-process servers with a real kicker: the memory store, which
//! must keep every pool rule, and a memory store whose claim ignores the gen it was decided
//! on (C3's version check removed), which the checker must catch.

use std::sync::Arc;
use std::time::Duration;

use unique_arbiter_http::{ArbiterService, serve};
use unique_core::{
    Arbiter, CasOutcome, CurrentView, Error, Key, Owner, OwnerState, Store, UserKey, UserSession,
    async_trait, encode_owner,
};
use unique_history::{PoolReport, PoolRule, PoolWorkload, run_duration};
use unique_kick_http::HttpKicker;
use unique_store_memory::MemoryStore;

/// Serves an Arbiter on `store`, kicking over HTTP, on a loopback port; its base URL.
async fn serve_in_process<S: Store>(store: S) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let arbiter = Arbiter::builder(store).kicker(HttpKicker::new()).build();
    tokio::spawn(serve(
        listener,
        ArbiterService::new(arbiter),
        std::future::pending(),
    ));
    format!("http://{addr}")
}

async fn run(name: &str, servers: Vec<String>) -> PoolReport {
    let history = PoolWorkload::new(servers)
        .duration(run_duration(Duration::from_secs(3)))
        .run()
        .await
        .unwrap();
    let report = PoolReport::new(name, &history);
    println!("{report}");
    report
}

/// Two Arbiters (two servers) on one memory store: each decides a user's pooled logins one
/// at a time in its claim line, and the store's fenced write arbitrates between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_keeps_every_pool_rule() {
    let store = Arc::new(MemoryStore::new());
    let servers = vec![
        serve_in_process(store.clone()).await,
        serve_in_process(store).await,
    ];
    run("memory, 2 in-process servers", servers)
        .await
        .assert_clean();
}

/// The memory store with its claim's version check removed: it writes the gen after the one
/// it was decided on whatever the place holds now, so two servers taking one free place (or
/// evicting one session) both win it.
struct Unfenced(MemoryStore);

#[async_trait]
impl Store for Unfenced {
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
        let owner = encode_owner(owner)?;
        // A real store's write is a round trip away from its read.
        tokio::task::yield_now().await;
        let generation = snap.generation + 1;
        self.0
            .put_raw(key, generation, Some(&owner), Some(claim_id), None);
        Ok(CasOutcome::Written { generation })
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.0.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.0.release(key, generation).await
    }
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        self.0.list_sessions(user).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_the_version_check_breaks_the_pool() {
    let store = Arc::new(Unfenced(MemoryStore::new()));
    let servers = vec![
        serve_in_process(store.clone()).await,
        serve_in_process(store).await,
    ];
    let report = run("memory without the version check, 2 servers", servers).await;
    let rules: Vec<PoolRule> = report.violations.iter().map(|v| v.rule).collect();
    assert!(
        rules.contains(&PoolRule::OneSessionPerGen) || rules.contains(&PoolRule::OnePerPlace),
        "the checker must catch two logins granted one place\n{report}"
    );
}
