//! The DynamoDB lease directory's own protocol on dynalite, beyond the shared contract:
//! expiry judged per instance by watching a record version (D10), renewals that keep
//! their whole promise for observers that only see the new version (D2), one winner
//! among instances racing for a free room (D8), the requests each operation costs, the
//! table checks, and records this crate did not write.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::types::AttributeValue;
use unique_lease::{Clock, Directory, Lease, LeaseError, ManualClock, new_lease_token};
use unique_store_dynamodb::{DynamoDirectory, DynamoStore, RequestCounts};
use unique_testsupport::dynalite::Dynalite;

const TTL: Duration = Duration::from_secs(10);
const MS: Duration = Duration::from_millis(1);
const BOUND: Duration = Duration::from_secs(10);

fn fresh_table() -> String {
    format!("lease-protocol-{}", new_lease_token())
}

fn start() -> SystemTime {
    unique_lease_contract::start_time()
}

/// A store on the shared dynalite whose client the directories below share (so its
/// request counts include theirs). Generous timeouts, no SDK retry.
async fn store() -> DynamoStore {
    common::store_at(&Dynalite::shared().endpoint_url(), 1).await
}

/// A directory instance on `table` judging time on `clock`, with its own observations.
async fn instance(store: &DynamoStore, table: &str, clock: &Arc<ManualClock>) -> DynamoDirectory {
    DynamoDirectory::builder(table)
        .store(store)
        .clock(clock.clone())
        .build()
        .await
        .expect("build a lease directory")
}

/// A fresh table with `n` instances on it sharing one manual clock.
async fn instances(n: usize) -> (Vec<DynamoDirectory>, Arc<ManualClock>, DynamoStore) {
    let store = store().await;
    let table = fresh_table();
    let clock = Arc::new(ManualClock::new(start()));
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(instance(&store, &table, &clock).await);
    }
    assert!(all[0].create_table_if_missing(BOUND).await.unwrap());
    (all, clock, store)
}

async fn ensure(
    d: &DynamoDirectory,
    clock: &ManualClock,
    room: &str,
    node: &str,
    ttl: Duration,
) -> Lease {
    d.ensure_owner(room, node, clock.now(), ttl)
        .await
        .expect("ensure_owner")
}

fn holding(lease: &Lease) -> (&str, &str, u64) {
    (&lease.node_id, &lease.lease_token, lease.epoch)
}

/// D10: an instance that first sees a holding only after the holder's ttl passed still
/// gives it a whole ttl from that first sighting, while the instance that granted it
/// (and saw its version from the start) already judges it expired.
#[tokio::test]
async fn a_newcomer_waits_a_full_ttl_from_its_first_sighting() {
    let (dirs, clock, _store) = instances(2).await;
    let (granter, newcomer) = (&dirs[0], &dirs[1]);
    let held = ensure(granter, &clock, "r", "a", TTL).await;
    assert!(held.is_held_by("a"));
    assert_eq!(held.ttl_left, TTL);

    clock.advance(TTL);
    let seen_by_granter = granter.lookup("r").await.unwrap().unwrap();
    assert_eq!(
        seen_by_granter.ttl_left,
        Duration::ZERO,
        "expired for the granter"
    );

    let first_look = newcomer.lookup("r").await.unwrap().unwrap();
    assert_eq!(holding(&first_look), holding(&held));
    assert_eq!(
        first_look.ttl_left, TTL,
        "a first sighting is valid for a whole ttl"
    );
    assert!(
        newcomer
            .verify_owner("r", "a", &held.lease_token, clock.now())
            .await
            .unwrap()
    );
    let told = ensure(newcomer, &clock, "r", "b", TTL).await;
    assert_eq!(
        holding(&told),
        holding(&held),
        "still a's for the newcomer (D3)"
    );

    clock.advance(TTL.saturating_sub(MS));
    let told = ensure(newcomer, &clock, "r", "b", TTL).await;
    assert_eq!(
        holding(&told),
        holding(&held),
        "one millisecond before its ttl"
    );
    assert_eq!(told.ttl_left, MS);

    clock.advance(MS);
    let taken = ensure(newcomer, &clock, "r", "b", TTL).await;
    assert!(taken.is_held_by("b"), "{taken:?}");
    assert!(taken.epoch > held.epoch);
    assert_ne!(taken.lease_token, held.lease_token);
    assert_eq!(taken.ttl_left, TTL);

    // The granter sees the new version for the first time: b's for a whole ttl.
    let told = ensure(granter, &clock, "r", "a", TTL).await;
    assert_eq!(holding(&told), holding(&taken));
    assert_eq!(told.ttl_left, TTL);
}

/// D2 across instances: a renewal asking for less than the holding has left writes the
/// remaining promise as the new version's ttl, so an instance that only ever sees the
/// renewed version still leaves the room to the holder until the original expiry.
#[tokio::test]
async fn a_renewal_seen_only_by_a_newcomer_keeps_the_whole_promise() {
    let (dirs, clock, store) = instances(2).await;
    let (holder, newcomer) = (&dirs[0], &dirs[1]);
    let held = ensure(holder, &clock, "r", "a", TTL).await;

    clock.advance(Duration::from_secs(8));
    let renewed = ensure(holder, &clock, "r", "a", Duration::from_secs(1)).await;
    assert_eq!(
        holding(&renewed),
        holding(&held),
        "a renewal keeps token and epoch"
    );
    assert_eq!(renewed.ttl_left, Duration::from_secs(2), "never shortened");
    assert_eq!(stored_ttl_ms(&store, holder.table(), "r").await, 2_000);

    let told = ensure(newcomer, &clock, "r", "b", TTL).await;
    assert_eq!(holding(&told), holding(&held));
    assert_eq!(told.ttl_left, Duration::from_secs(2));

    // Past what the renewal asked for (1 s), before the first promise ran out.
    clock.advance(Duration::from_secs(1));
    let told = ensure(newcomer, &clock, "r", "b", TTL).await;
    assert_eq!(
        holding(&told),
        holding(&held),
        "a's first promise still runs"
    );

    clock.advance(Duration::from_millis(999));
    let told = ensure(newcomer, &clock, "r", "b", TTL).await;
    assert_eq!(holding(&told), holding(&held));

    clock.advance(MS);
    let taken = ensure(newcomer, &clock, "r", "b", TTL).await;
    assert!(taken.is_held_by("b"), "{taken:?}");
    assert!(taken.epoch > held.epoch);

    // A renewal asking for more than is left writes what it asked for.
    let longer = ensure(newcomer, &clock, "r", "b", Duration::from_secs(30)).await;
    assert_eq!(holding(&longer), holding(&taken));
    assert_eq!(longer.ttl_left, Duration::from_secs(30));
    assert_eq!(stored_ttl_ms(&store, holder.table(), "r").await, 30_000);
}

/// D8: eight instances racing for one free room: exactly one holding is written, and
/// every instance answers with it.
#[tokio::test]
async fn eight_instances_racing_for_a_free_room_agree_on_one_holder() {
    for round in 0..5 {
        let (dirs, clock, _store) = instances(8).await;
        let room = format!("race-{round}");
        let barrier = Arc::new(tokio::sync::Barrier::new(dirs.len()));
        let tasks: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let (d, clock, room, barrier) =
                    (d.clone(), clock.clone(), room.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    d.ensure_owner(&room, &format!("node-{i}"), clock.now(), TTL)
                        .await
                        .expect("ensure_owner")
                })
            })
            .collect();
        let mut leases = Vec::new();
        for task in tasks {
            leases.push(task.await.unwrap());
        }
        let winner = &leases[0];
        for lease in &leases {
            assert_eq!(
                holding(lease),
                holding(winner),
                "round {round}: {leases:#?}"
            );
            assert_eq!(lease.ttl_left, TTL);
        }
        let winners = (0..8)
            .filter(|i| leases.iter().any(|l| l.is_held_by(&format!("node-{i}"))))
            .count();
        assert_eq!(winners, 1);
        for d in &dirs {
            assert!(
                d.verify_owner(&room, &winner.node_id, &winner.lease_token, clock.now())
                    .await
                    .unwrap()
            );
        }
    }
}

/// The requests each outcome costs: D3 writes nothing; a grant draws an epoch and writes
/// once; a renewal writes once; a release writes once.
#[tokio::test]
async fn requests_per_outcome() {
    let (dirs, clock, store) = instances(1).await;
    let d = &dirs[0];
    let counts = |before: RequestCounts| store.request_counts().since(&before);

    let before = store.request_counts();
    let held = ensure(d, &clock, "r", "a", TTL).await;
    let grant = counts(before);
    assert_eq!(
        (grant.get_item, grant.update_item, grant.total()),
        (1, 2, 3)
    );

    let before = store.request_counts();
    ensure(d, &clock, "r", "b", TTL).await;
    let elsewhere = counts(before);
    assert_eq!(
        (elsewhere.get_item, elsewhere.total()),
        (1, 1),
        "D3 writes nothing"
    );

    let before = store.request_counts();
    ensure(d, &clock, "r", "a", TTL).await;
    let renewal = counts(before);
    assert_eq!(
        (renewal.get_item, renewal.update_item, renewal.total()),
        (1, 1, 2)
    );

    let before = store.request_counts();
    d.lookup("r").await.unwrap();
    d.verify_owner("r", "a", &held.lease_token, clock.now())
        .await
        .unwrap();
    let reads = counts(before);
    assert_eq!((reads.get_item, reads.total()), (2, 2));

    let before = store.request_counts();
    assert!(d.release_owner("r", "a", &held.lease_token).await.unwrap());
    let release = counts(before);
    assert_eq!((release.update_item, release.total()), (1, 1));
}

/// D4, D6: a release leaves a tombstone that reads as no lease and keeps the item, and
/// the next holding gets a greater epoch from the counter.
#[tokio::test]
async fn a_release_leaves_a_tombstone_and_epochs_keep_growing() {
    let (dirs, clock, store) = instances(1).await;
    let d = &dirs[0];
    let first = ensure(d, &clock, "r", "a", TTL).await;
    assert!(d.release_owner("r", "a", &first.lease_token).await.unwrap());
    assert!(!d.release_owner("r", "a", &first.lease_token).await.unwrap());
    assert_eq!(d.lookup("r").await.unwrap(), None);
    let tombstone = raw_item(&store, d.table(), "lease#r").await.expect("kept");
    assert!(tombstone.contains_key("rvn") && !tombstone.contains_key("node"));
    let second = ensure(d, &clock, "r", "b", TTL).await;
    assert!(second.is_held_by("b"));
    assert!(second.epoch > first.epoch);
    let counter = raw_item(&store, d.table(), "epoch").await.expect("counter");
    assert_eq!(
        counter.get("epoch"),
        Some(&AttributeValue::N(second.epoch.to_string()))
    );
}

/// Forgetting an observation (a full memory) only makes the instance wait longer: the
/// forgotten room's lease is valid for a whole ttl from its next sighting.
#[tokio::test]
async fn a_forgotten_observation_only_delays_a_takeover() {
    let store = store().await;
    let table = fresh_table();
    let clock = Arc::new(ManualClock::new(start()));
    let d = DynamoDirectory::builder(&table)
        .store(&store)
        .clock(clock.clone())
        .max_observations(2)
        .build()
        .await
        .unwrap();
    d.create_table_if_missing(BOUND).await.unwrap();
    let held = ensure(&d, &clock, "old", "a", TTL).await;
    clock.advance(MS);
    for room in ["x", "y", "z"] {
        ensure(&d, &clock, room, "a", TTL).await;
        clock.advance(MS);
    }
    clock.advance(TTL);
    let told = ensure(&d, &clock, "old", "b", TTL).await;
    assert_eq!(holding(&told), holding(&held), "forgotten: seen anew");
    assert_eq!(told.ttl_left, TTL);
    clock.advance(TTL);
    assert!(ensure(&d, &clock, "old", "b", TTL).await.is_held_by("b"));
}

/// Without a test clock the instance times versions on `Instant`: a grant has (about) its
/// ttl left and a renewal keeps the holding.
#[tokio::test]
async fn the_monotonic_clock_times_versions_in_production() {
    let store = store().await;
    let d = DynamoDirectory::builder(fresh_table())
        .store(&store)
        .build()
        .await
        .unwrap();
    d.create_table_if_missing(BOUND).await.unwrap();
    let now = SystemTime::now();
    let ttl = Duration::from_mins(1);
    let held = d.ensure_owner("r", "a", now, ttl).await.unwrap();
    assert!(held.is_held_by("a"));
    assert!(
        held.ttl_left <= ttl && held.ttl_left > ttl.saturating_sub(BOUND),
        "{held:?}"
    );
    let renewed = d.ensure_owner("r", "a", now, ttl).await.unwrap();
    assert_eq!(holding(&renewed), holding(&held));
    assert!(renewed.ttl_left > ttl.saturating_sub(BOUND));
    assert!(held.is_live());
}

/// The startup check names what is wrong; the creation is idempotent.
#[tokio::test]
async fn the_startup_check_refuses_a_missing_or_foreign_table() {
    let store = store().await;
    let clock = Arc::new(ManualClock::new(start()));
    let table = fresh_table();
    let d = instance(&store, &table, &clock).await;
    let missing = d.check_reachable(BOUND).await.unwrap_err();
    assert!(missing.is_unavailable());
    assert_eq!(
        missing.to_string(),
        format!("unavailable: dynamodb table {table} does not exist")
    );
    assert!(d.create_table_if_missing(BOUND).await.unwrap());
    assert!(!d.create_table_if_missing(BOUND).await.unwrap());
    d.check_reachable(BOUND).await.unwrap();

    // The session store's table (pk and sk) is refused, saying so.
    store.create_table_if_missing(BOUND).await.unwrap();
    let on_sessions = instance(&store, store.table(), &clock).await;
    let refused = on_sessions.check_reachable(BOUND).await.unwrap_err();
    assert!(matches!(refused, LeaseError::Backend { .. }), "{refused:?}");
    assert!(
        refused.to_string().contains("the session store's layout"),
        "{refused}"
    );

    let empty = DynamoDirectory::builder("").store(&store).build().await;
    assert!(empty.unwrap_err().is_invalid_params());
}

/// A lease item this crate did not write fails closed: `Corrupt`, and nothing is granted
/// over it.
#[tokio::test]
async fn a_foreign_lease_record_is_corrupt_and_never_granted_over() {
    let (dirs, clock, store) = instances(1).await;
    let d = &dirs[0];
    let foreign = HashMap::from([
        ("pk".to_owned(), AttributeValue::S("lease#r".into())),
        ("node".to_owned(), AttributeValue::S("a".into())),
        ("ttl_ms".to_owned(), AttributeValue::N("1000".into())),
    ]);
    store
        .client()
        .put_item()
        .table_name(d.table())
        .set_item(Some(foreign.clone()))
        .send()
        .await
        .unwrap();
    let err = d
        .ensure_owner("r", "b", clock.now(), TTL)
        .await
        .unwrap_err();
    assert!(err.is_corrupt(), "{err}");
    assert!(d.lookup("r").await.unwrap_err().is_corrupt());
    assert_eq!(raw_item(&store, d.table(), "lease#r").await, Some(foreign));
}

async fn raw_item(
    store: &DynamoStore,
    table: &str,
    pk: &str,
) -> Option<HashMap<String, AttributeValue>> {
    store
        .client()
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
}

async fn stored_ttl_ms(store: &DynamoStore, table: &str, room: &str) -> u64 {
    let item = raw_item(store, table, &format!("lease#{room}"))
        .await
        .unwrap();
    match item.get("ttl_ms") {
        Some(AttributeValue::N(n)) => n.parse().unwrap(),
        other => panic!("ttl_ms is {other:?}"),
    }
}
