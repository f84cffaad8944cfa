//! The upgrade path of the lease tables (D11): a leases table an older build created has no
//! `ttl_ms` column. The startup check, and `create_tables`, add it; the rows the older build
//! wrote keep working, judged on their expiry alone until they are next written.

use std::time::{Duration, SystemTime};

use unique_lease::{Directory, new_lease_token};
use unique_store_postgres::{PostgresDirectory, PostgresStore, tokio_postgres};
use unique_testsupport::postgres::{self, PostgresServer};

/// What an older build created (its `create_tables`): the leases table without `ttl_ms`.
fn old_tables(prefix: &str) -> String {
    format!(
        "CREATE TABLE \"{prefix}_leases\" (room text PRIMARY KEY, node text NOT NULL, \
         token text NOT NULL, epoch bigint NOT NULL, expires_ms bigint NOT NULL); \
         CREATE SEQUENCE \"{prefix}_epoch\" AS bigint MINVALUE 1 START 1 CACHE 1 NO CYCLE; \
         CREATE TABLE \"{prefix}_nodes\" (node text PRIMARY KEY, addr text NOT NULL, \
         updated_ms bigint NOT NULL, expires_ms bigint NOT NULL)"
    )
}

/// An older build's grant of `room` to `node` for an hour on the database's clock: its
/// statement, without `ttl_ms`. Returns the epoch.
async fn old_grant(client: &tokio_postgres::Client, prefix: &str, room: &str, node: &str) -> i64 {
    let row = client
        .query_one(
            &format!(
                "INSERT INTO \"{prefix}_leases\" (room, node, token, epoch, expires_ms) \
                 VALUES ($1, $2, 'old-token', nextval('\"{prefix}_epoch\"'::regclass), \
                 floor(extract(epoch from clock_timestamp()) * 1000)::bigint + 3600000) \
                 RETURNING epoch"
            ),
            &[&room, &node],
        )
        .await
        .expect("the older build's grant");
    row.get(0)
}

async fn has_ttl_column(client: &tokio_postgres::Client, prefix: &str) -> bool {
    client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) \
             AND attname = 'ttl_ms' AND NOT attisdropped)",
            &[&format!("\"{prefix}_leases\"")],
        )
        .await
        .unwrap()
        .get(0)
}

/// Old tables with one old row under a fresh prefix; the client, the prefix, the epoch.
async fn upgraded_from_old(server: &PostgresServer) -> (tokio_postgres::Client, String, i64) {
    let (client, connection) = tokio_postgres::connect(server.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let prefix = format!("old_{}", new_lease_token().replace('-', ""));
    client.batch_execute(&old_tables(&prefix)).await.unwrap();
    let epoch = old_grant(&client, &prefix, "room", "old-node").await;
    assert!(!has_ttl_column(&client, &prefix).await);
    (client, prefix, epoch)
}

fn directory(server: &PostgresServer, prefix: &str) -> PostgresDirectory {
    let store = PostgresStore::builder(server.url())
        .max_connections(2)
        .operation_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    PostgresDirectory::builder(&store)
        .table_prefix(prefix)
        .build()
        .unwrap()
}

/// The old row after the upgrade: held by its node (D3 for another node), renewed by it
/// with its token and epoch kept (its ttl now stored), and a new grant fenced above it.
async fn old_rows_keep_working(
    directory: &PostgresDirectory,
    client: &tokio_postgres::Client,
    prefix: &str,
    old_epoch: i64,
) {
    let now = SystemTime::now();
    let ttl = Duration::from_secs(30);
    let looked = directory
        .lookup("room")
        .await
        .unwrap()
        .expect("the old row");
    assert_eq!(
        (looked.node_id.as_str(), looked.lease_token.as_str()),
        ("old-node", "old-token")
    );
    assert_eq!(i64::try_from(looked.epoch).unwrap(), old_epoch);
    assert!(
        looked.ttl_left > Duration::from_mins(59),
        "judged on its expiry alone: {looked:?}"
    );
    let other = directory.ensure_owner("room", "b", now, ttl).await.unwrap();
    assert!(
        other.same_holding(&looked),
        "D3 over the old row: {other:?}"
    );
    let renewed = directory
        .ensure_owner("room", "old-node", now, Duration::from_hours(2))
        .await
        .unwrap();
    assert_eq!(
        (renewed.lease_token.as_str(), renewed.epoch),
        ("old-token", looked.epoch),
        "the holder's renewal keeps token and epoch"
    );
    let stored: Option<i64> = client
        .query_one(
            &format!("SELECT ttl_ms FROM \"{prefix}_leases\" WHERE room = 'room'"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, Some(7_200_000), "the renewal stored its ttl");
    let fresh = directory
        .ensure_owner("new-room", "b", now, ttl)
        .await
        .unwrap();
    assert!(fresh.epoch > looked.epoch, "{fresh:?} after {looked:?}");
    assert!(
        directory
            .release_owner("room", "old-node", "old-token")
            .await
            .unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_startup_check_adds_ttl_ms_to_an_older_leases_table() {
    let server = postgres::shared();
    let (client, prefix, epoch) = upgraded_from_old(&server).await;
    let directory = directory(&server, &prefix);
    directory
        .check()
        .await
        .expect("the check upgrades the table");
    assert!(has_ttl_column(&client, &prefix).await);
    old_rows_keep_working(&directory, &client, &prefix, epoch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_tables_adds_ttl_ms_to_an_older_leases_table() {
    let server = postgres::shared();
    let (client, prefix, epoch) = upgraded_from_old(&server).await;
    let directory = directory(&server, &prefix);
    directory.create_tables().await.expect("create_tables");
    assert!(has_ttl_column(&client, &prefix).await);
    directory.check().await.expect("the check passes");
    old_rows_keep_working(&directory, &client, &prefix, epoch).await;
}
