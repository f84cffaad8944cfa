//! Shared by the integration tests: stores on the PostgreSQL of this test binary (a private
//! server, or `UNIQUE_TEST_DATABASE_URL`) and the contract suite's raw-record hook.
//!
//! The raw writer is a separate connection of its own, as an operator with `psql` would be:
//! the store sees its writes only through the database.

#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

pub mod icu;
pub mod wire;

pub use icu::punctuation_blind_database;

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::NoTls;
use unique_core::{ClaimInput, Error, Key, Owner, async_trait};
use unique_store_contract::{RawRecord, RawWriter, Subject};
use unique_store_postgres::{PostgresStore, PostgresStoreBuilder};
use unique_testsupport::postgres::{self, PostgresServer};

/// The table every case of the suite shares: cases use their own keys.
pub const TABLE: &str = "unique_contract";

/// The database of this test binary, started on first use.
pub fn server() -> Arc<PostgresServer> {
    postgres::shared()
}

/// A builder on `url` with generous bounds, so a loaded machine never turns a slow answer
/// into a failure; the tests of the bounds set their own.
pub fn builder(url: &str, table: &str) -> PostgresStoreBuilder {
    PostgresStore::builder(url)
        .table(table)
        .max_connections(8)
        .operation_timeout(Duration::from_secs(20))
        .connect_timeout(Duration::from_secs(10))
}

/// A store on `table` of `server`'s database, with the table created. The caller keeps
/// `server` alive (the shared one stops when its last holder lets go).
pub async fn store_on(server: &PostgresServer, table: &str) -> PostgresStore {
    store_at(server.url(), table).await
}

/// A store on `table` of the database at `url`, with the table created.
pub async fn store_at(url: &str, table: &str) -> PostgresStore {
    let store = builder(url, table).build().expect("build the store");
    store
        .create_table_if_missing()
        .await
        .expect("create the test table");
    store
        .check()
        .await
        .expect("the test table passes the check");
    store
}

/// A direct connection to `server`'s database (the connection task runs on the caller's
/// runtime).
pub async fn connect(server: &PostgresServer) -> tokio_postgres::Client {
    connect_to(server.url()).await
}

/// A direct connection to the database at `url`.
pub async fn connect_to(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(connection);
    client
}

/// Unconditional writes into the store's table over a separate connection.
pub struct PgRaw {
    client: tokio_postgres::Client,
    table: String,
    _server: Arc<PostgresServer>,
}

impl PgRaw {
    pub async fn new(server: Arc<PostgresServer>, store: &PostgresStore) -> Self {
        let url = server.url().to_owned();
        Self::at(&url, server, store).await
    }

    /// On the database at `url` of `server`.
    pub async fn at(url: &str, server: Arc<PostgresServer>, store: &PostgresStore) -> Self {
        Self {
            client: connect_to(url).await,
            table: store.table().to_owned(),
            _server: server,
        }
    }
}

#[async_trait]
impl RawWriter for PgRaw {
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error> {
        let sql = format!(
            "INSERT INTO {} (pk, gen, owner, cid, won) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (pk) DO UPDATE SET gen = excluded.gen, owner = excluded.owner, \
             cid = excluded.cid, won = excluded.won",
            self.table
        );
        self.client
            .execute(
                &sql,
                &[
                    &key.to_string(),
                    &record.generation,
                    &record.owner,
                    &record.claim_id,
                    &record.won,
                ],
            )
            .await
            .map(drop)
            .map_err(|e| Error::unavailable_with("raw write failed", e))
    }
}

/// The factory the contract suite calls once per case.
pub async fn subject() -> Subject {
    let server = server();
    let store = store_on(&server, TABLE).await;
    let raw = PgRaw::new(server, &store).await;
    Subject {
        store: Arc::new(store),
        raw: Arc::new(raw),
    }
}

/// As [`subject`], on a table of its own (the count cases, C13, need a store no other case
/// writes): named from the clock and a process-wide sequence, so runs sharing a database
/// (`UNIQUE_TEST_DATABASE_URL`) do not meet either.
pub async fn subject_on_own_table() -> Subject {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let table = format!("unique_count_{nanos:x}_{n}");
    let server = server();
    let store = store_on(&server, &table).await;
    let raw = PgRaw::new(server, &store).await;
    Subject {
        store: Arc::new(store),
        raw: Arc::new(raw),
    }
}

/// As [`subject`], in the [punctuation-blind database](punctuation_blind_database).
pub async fn punctuation_blind_subject() -> Subject {
    let server = server();
    let url = punctuation_blind_database(&server).await;
    let store = store_at(&url, TABLE).await;
    let raw = PgRaw::at(&url, server, &store).await;
    Subject {
        store: Arc::new(store),
        raw: Arc::new(raw),
    }
}

/// A login of `key` by the node at `endpoint`.
pub fn claim(key: &Key, endpoint: &str, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: Owner::new("r", "c", endpoint),
        claim_id: claim_id.into(),
    }
}
