//! Faults against a real PostgreSQL: an ambiguous commit (the claim's statement commits, its
//! answer never arrives), a database that stops answering, and a database that is gone. Each
//! is `Unavailable`; the ambiguous commit is then resolved by the replay short-circuit.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::claim;
use common::wire::{WireProxy, url_via};
use unique_core::{
    Arbiter, Key, KickOutcome, KickPayload, Kicker, Owner, OwnerState, Store, async_trait,
};
use unique_testsupport::postgres::PostgresServer;
use unique_testsupport::proxy::StallProxy;

const TABLE: &str = "unique_faults";

/// Confirms every kick and counts them; on the first it arms the proxy, so the answer to
/// the claim's write (the next request after the kick) is lost.
struct ArmingKicker {
    proxy: Arc<WireProxy>,
    kicks: AtomicUsize,
}

#[async_trait]
impl Kicker for ArmingKicker {
    async fn kick(&self, _endpoint: &str, _payload: &KickPayload, _t: Duration) -> KickOutcome {
        if self.kicks.fetch_add(1, Ordering::SeqCst) == 0 {
            self.proxy.swallow_next_answer();
        }
        KickOutcome::Confirmed
    }
}

/// The claim's UPDATE commits but its answer is swallowed and the connection cut: the claim
/// fails closed, and the client's retry with the same claim_id finds the written gen through
/// the replay short-circuit, without a second kick or write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_is_resolved_by_replay() {
    let server = common::server();
    let direct = common::store_on(&server, TABLE).await;
    let key = Key::new("ambiguous", "test", 1);
    let old = Arbiter::new(direct.clone())
        .claim(&claim(&key, "http://old.invalid/kick", "cid-old"))
        .await
        .unwrap();
    assert_eq!(old.generation, 1);

    let proxy = Arc::new(WireProxy::start(server.addr().expect("a private server")).await);
    let store = common::builder(&url_via(server.url(), proxy.addr()), TABLE)
        .max_connections(1)
        .build()
        .unwrap();
    // Every statement prepared, so the claim's write is a single request on the wire.
    store.check().await.unwrap();
    store.read_owner(&unique_core::ready_key()).await.unwrap();
    let kicker = Arc::new(ArmingKicker {
        proxy: Arc::clone(&proxy),
        kicks: AtomicUsize::new(0),
    });
    let arbiter = Arbiter::builder(store.clone())
        .kicker(Arc::clone(&kicker))
        .build();
    let input = claim(&key, "http://new.invalid/kick", "cid-new");

    let err = arbiter.claim(&input).await.unwrap_err();
    assert!(err.is_unavailable(), "a lost answer fails closed: {err:?}");
    assert_eq!(
        proxy.swallowed(),
        1,
        "the proxy swallowed the write's answer"
    );
    let stored = direct.read_owner(&key).await.unwrap();
    assert_eq!(
        (stored.generation, stored.claim_id.as_deref()),
        (2, Some("cid-new")),
        "the write committed although its answer was lost"
    );

    let retried = arbiter.claim(&input).await.unwrap();
    assert_eq!(retried.generation, 2, "the gen that was written");
    assert!(retried.replayed, "answered by the replay short-circuit");
    assert_eq!(kicker.kicks.load(Ordering::SeqCst), 1, "no second kick");
    assert_eq!(proxy.connections(), 2, "the cut connection was replaced");
    assert_eq!(
        direct.read_owner(&key).await.unwrap(),
        stored,
        "nothing more written"
    );
}

/// A database that stops answering costs one operation timeout, then `Unavailable`; the
/// silent connection is closed, not reused, so the store recovers once the database answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_database_is_unavailable_within_the_operation_timeout() {
    let server = common::server();
    common::store_on(&server, TABLE).await;
    let proxy = StallProxy::start(server.addr().expect("a private server"));
    let store = common::builder(&url_via(server.url(), proxy.addr()), TABLE)
        .max_connections(1)
        .operation_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let key = Key::new("silent", "test", 1);
    // Connecting (with SCRAM in a debug build) may be slow on a loaded machine: retry.
    let mut connected = false;
    for _ in 0..20 {
        if store.read_owner(&key).await.is_ok() {
            connected = true;
            break;
        }
    }
    assert!(connected, "the store reads through the proxy");

    proxy.stall();
    let started = std::time::Instant::now();
    let err = store.read_owner(&key).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("timed out"), "{err}");
    let err = store
        .claim_cas(
            &key,
            &Owner::new("", "", "http://x.invalid"),
            "c",
            &OwnerState::absent(),
        )
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    println!("a stalled read failed after {:?}", started.elapsed());

    proxy.forward();
    let mut recovered = false;
    for _ in 0..20 {
        if store.read_owner(&key).await.is_ok() {
            recovered = true;
            break;
        }
    }
    assert!(
        recovered,
        "a new connection serves once the database answers"
    );
}

/// A database that is gone (the server stopped) is `Unavailable`, as are the startup check
/// and readiness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_database_is_unavailable() {
    let mut server = PostgresServer::start_private();
    let store = common::builder(server.url(), TABLE).build().unwrap();
    assert!(store.create_table_if_missing().await.unwrap());
    store.check().await.unwrap();
    server.stop();
    let key = Key::new("stopped", "test", 1);
    for err in [
        store.read_owner(&key).await.unwrap_err(),
        store.release(&key, 1).await.unwrap_err(),
        store.check().await.unwrap_err(),
        store.check_ready().await.unwrap_err(),
    ] {
        assert!(err.is_unavailable(), "{err:?}");
        assert!(
            !err.to_string()
                .contains(unique_testsupport::postgres::PASSWORD)
        );
    }
}

/// Many stores creating one missing table at once (server processes starting together with
/// `--create-table`): every creation succeeds, exactly one of them made the table, and the
/// table passes the check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creations_of_one_table_all_succeed() {
    let server = common::server();
    for round in 0..5 {
        let table = format!("created_together_{round}_{}", std::process::id());
        let racers = 16;
        let start = Arc::new(tokio::sync::Barrier::new(racers));
        let creations: Vec<_> = (0..racers)
            .map(|_| {
                let store = common::builder(server.url(), &table).build().unwrap();
                let start = start.clone();
                tokio::spawn(async move {
                    // Connect first (a read of the missing table fails, the connection
                    // stays pooled), so the creations start together.
                    let _ = store.check_ready().await;
                    start.wait().await;
                    store.create_table_if_missing().await
                })
            })
            .collect();
        let mut created = 0;
        for creation in creations {
            if creation.await.unwrap().expect("a racing creation succeeds") {
                created += 1;
            }
        }
        assert_eq!(
            created, 1,
            "round {round}: exactly one creation made the table"
        );
        let store = common::builder(server.url(), &table).build().unwrap();
        store.check().await.unwrap();
    }
}
