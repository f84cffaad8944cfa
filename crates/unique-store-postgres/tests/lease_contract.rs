//! The lease contract suite (`unique-lease-contract`, D1–D10 and N1–N4) run against
//! `PostgresDirectory` on a real PostgreSQL server (started by the test tooling, or the
//! database named by `UNIQUE_TEST_DATABASE_URL`), one test per case, each on tables of its
//! own; and the directory's own tests: the database's clock decides, table creation and
//! the startup check, an unreachable server.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use unique_lease::{Directory, LeaseBackend, ManualClock, NodeRegistry, new_lease_token};
use unique_lease_contract::{self as contract, Subject};
use unique_store_postgres::{PostgresDirectory, PostgresStore, tokio_postgres};
use unique_testsupport::postgres::{self, PostgresServer};

/// A store (the connection pool) on `server` with generous bounds, so a loaded machine never
/// turns a slow answer into a failure.
fn store(server: &PostgresServer) -> PostgresStore {
    PostgresStore::builder(server.url())
        .max_connections(4)
        .operation_timeout(Duration::from_secs(20))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .expect("build the store")
}

/// A table prefix no other test uses.
fn fresh_prefix() -> String {
    format!("lease_{}", new_lease_token().replace('-', ""))
}

/// A directory on fresh tables of the test server, checked.
async fn created(store: &PostgresStore, clock: Option<Arc<ManualClock>>) -> PostgresDirectory {
    let mut builder = PostgresDirectory::builder(store).table_prefix(fresh_prefix());
    if let Some(clock) = clock {
        builder = builder.clock(clock);
    }
    let directory = builder.build().expect("valid settings");
    directory
        .create_tables()
        .await
        .expect("create the lease tables");
    directory.check().await.expect("the lease tables pass");
    directory
}

async fn subject() -> Subject {
    let server = postgres::shared();
    let store = store(&server);
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    let directory = created(&store, Some(clock.clone())).await;
    // Another process's directory: its own pool, the same tables and clock.
    let peer = PostgresDirectory::builder(&self::store(&server))
        .table_prefix(directory_prefix(&directory))
        .clock(clock.clone())
        .build()
        .expect("valid settings");
    Subject::new(Arc::new(directory), clock)
        .with_peer(Arc::new(peer))
        .keep_alive(server)
}

/// The prefix `directory` was built with (its leases table without quotes and suffix).
fn directory_prefix(directory: &PostgresDirectory) -> String {
    directory
        .leases_table()
        .trim_matches('"')
        .trim_end_matches("_leases")
        .to_owned()
}

unique_lease_contract::lease_contract_tests!(subject);

/// The sweep cases (D12) with the directory's rows.
async fn rows_subject() -> Subject {
    let server = postgres::shared();
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    let directory = created(&store(&server), Some(clock.clone())).await;
    Subject::with_rows(Arc::new(directory), clock).keep_alive(server)
}

unique_lease_contract::lease_sweep_tests!(rows_subject);

/// D10 on the database's clock (no test clock): callers whose clocks are ten minutes apart
/// never both hold a room. Node a takes it saying it is T; node b, on another directory,
/// says it is T + 10 min, far past a's 30 s lease by its clock, and is told a holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_clock_decides_not_the_callers() {
    let server = postgres::shared();
    let a = created(&store(&server), None).await;
    let b = PostgresDirectory::builder(&store(&server))
        .table_prefix(directory_prefix(&a))
        .build()
        .unwrap();
    let ttl = Duration::from_secs(30);
    let t = SystemTime::now();
    let first = a.ensure_owner("room", "a", t, ttl).await.unwrap();
    assert!(first.is_held_by("a"));
    let later = t + Duration::from_mins(10);
    let seen = b.ensure_owner("room", "b", later, ttl).await.unwrap();
    assert!(seen.is_held_by("a"), "{seen:?}");
    assert!(seen.same_holding(&first));
    assert!(
        b.verify_owner("room", "a", &first.lease_token, later)
            .await
            .unwrap()
    );
    // And a caller whose clock is behind cannot renew a lease that expired on the
    // database's clock: node b with a 1 ms lease, then a after it lapsed.
    let short = b
        .ensure_owner("other", "b", later, Duration::from_millis(1))
        .await
        .unwrap();
    assert!(short.is_held_by("b"));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let early = t - Duration::from_mins(10);
    let taken = a.ensure_owner("other", "a", early, ttl).await.unwrap();
    assert!(taken.is_held_by("a"), "{taken:?}");
    assert!(taken.epoch > short.epoch);
}

/// The database's clock judges registrations too: a 1 ms registration has expired once
/// the database's clock moved past it, and reads as none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_expire_on_the_database_clock() {
    let server = postgres::shared();
    let directory = created(&store(&server), None).await;
    let registered = directory
        .register_node("n1", "10.0.0.1:7000", Duration::from_mins(1))
        .await
        .unwrap();
    let found = directory.lookup_node("n1").await.unwrap().unwrap();
    assert_eq!(found.grpc_addr, registered.grpc_addr);
    directory
        .register_node("n2", "10.0.0.2:7000", Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(directory.lookup_node("n2").await.unwrap(), None);
}

/// The startup check names the missing tables and how to create them; `create_tables`
/// creates them, is idempotent, and races of it succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_check_names_missing_tables_and_create_tables_makes_them() {
    let server = postgres::shared();
    let store = store(&server);
    let prefix = fresh_prefix();
    let directory = PostgresDirectory::builder(&store)
        .table_prefix(&prefix)
        .build()
        .unwrap();
    let e = directory.check().await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    let text = e.to_string();
    for name in ["_leases", "_epoch", "_nodes"] {
        assert!(text.contains(&format!("\"{prefix}{name}\"")), "{text}");
    }
    assert!(text.contains("create_tables()"), "{text}");
    // Before the tables exist an operation fails as unavailable, naming the cause.
    let e = directory
        .ensure_owner("room", "a", SystemTime::now(), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    assert!(e.to_string().contains("table is missing"), "{e}");

    let (x, y, z) = tokio::join!(
        directory.create_tables(),
        directory.create_tables(),
        directory.create_tables()
    );
    x.unwrap();
    y.unwrap();
    z.unwrap();
    directory.create_tables().await.unwrap();
    directory.check().await.unwrap();
}

/// A sequence that caches values per connection could hand out epochs out of order: the
/// check refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_refuses_a_cached_epoch_sequence() {
    let server = postgres::shared();
    let store = store(&server);
    let directory = created(&store, None).await;
    let (client, connection) = tokio_postgres::connect(server.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "ALTER SEQUENCE {} CACHE 20",
            directory.epoch_sequence()
        ))
        .await
        .unwrap();
    let e = directory.check().await.unwrap_err();
    assert!(e.to_string().contains("CACHE 1"), "{e}");
}

/// A record this crate did not write (an epoch of 0, an empty node) is corrupt: lookup
/// and ensure refuse it, and nothing is granted over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_record_is_corrupt_and_never_granted_over() {
    let server = postgres::shared();
    let directory = created(&store(&server), None).await;
    let (client, connection) = tokio_postgres::connect(server.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "INSERT INTO {} VALUES ('room', '', 'tok', 0, 0)",
            directory.leases_table()
        ))
        .await
        .unwrap();
    assert!(directory.read_lease("room").await.unwrap_err().is_corrupt());
    let e = directory
        .ensure_lease("room", "a", 30_000)
        .await
        .unwrap_err();
    assert!(e.is_corrupt(), "{e}");
    let row = client
        .query_one(
            &format!(
                "SELECT node FROM {} WHERE room = 'room'",
                directory.leases_table()
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "", "left as it was");
    // The connection that saw it still works (the transaction was rolled back).
    let lease = directory.ensure_lease("room-2", "a", 30_000).await.unwrap();
    assert_eq!(lease.node_id, "a");
}

/// A server that cannot be reached is `Unavailable`, and the message never repeats the
/// password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable() {
    let port = unique_testsupport::free_port();
    let store = PostgresStore::builder(&format!("postgres://u:s3cret@127.0.0.1:{port}/db"))
        .operation_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let directory = PostgresDirectory::builder(&store).build().unwrap();
    let e = directory
        .ensure_owner("room", "a", SystemTime::now(), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    assert!(directory.check().await.unwrap_err().is_unavailable());
}
