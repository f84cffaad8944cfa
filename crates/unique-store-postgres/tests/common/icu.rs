//! A test database whose default collation is not bytewise. Shared by the integration
//! tests (`common::icu`) and the crate's unit tests (included by path), so both create the
//! same database the same way.

use tokio_postgres::NoTls;
use unique_testsupport::postgres::PostgresServer;

/// The database, on `server`, whose default collation ignores punctuation: ICU's `en-US`
/// with `ka-shifted`, which orders text the way glibc's `en_US.UTF-8` does at its first
/// level (`p#e#4#a` sorts as `pe4a`, after `p#e#4$`). The test server's own database is
/// created `--locale=C`, and glibc's `en_US.UTF-8` need not be installed where the tests
/// run, while ICU is built into PostgreSQL. Created when missing (the name is fixed, so a database named by
/// `UNIQUE_TEST_DATABASE_URL` gains one, not one per run); returns its URL.
pub async fn punctuation_blind_database(server: &PostgresServer) -> String {
    const NAME: &str = "unique_test_icu_shifted";
    let (admin, connection) = tokio_postgres::connect(server.url(), NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(connection);
    // Tests create it together: one at a time (concurrent CREATE DATABASE of one name can
    // fail on the catalog instead of reporting the duplicate). Released when `admin` closes.
    admin
        .batch_execute("SELECT pg_advisory_lock(hashtext('unique_test_icu_shifted'))")
        .await
        .expect("lock the ICU test database's creation");
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&NAME])
        .await
        .expect("look up the ICU test database")
        .is_some();
    if !exists {
        admin
            .batch_execute(&format!(
                "CREATE DATABASE {NAME} TEMPLATE template0 ENCODING 'UTF8' \
                 LOCALE_PROVIDER icu ICU_LOCALE 'en-US-u-ka-shifted' LOCALE 'C'"
            ))
            .await
            .unwrap_or_else(|e| {
                let why = e
                    .as_db_error()
                    .map_or_else(|| e.to_string(), ToString::to_string);
                panic!(
                    "cannot create the ICU test database (needs PostgreSQL 15 or later built \
                     with ICU, and the CREATEDB privilege): {why}"
                )
            });
    }
    with_database(server.url(), NAME)
}

/// `url` (`postgres://…/db?…`) naming the database `name` instead.
fn with_database(url: &str, name: &str) -> String {
    let authority = 3 + url
        .find("://")
        .expect("the test database URL is a postgres:// URL");
    let path = url[authority..]
        .find('/')
        .map_or(url.len(), |i| authority + i);
    let query = url[path..].find('?').map_or("", |i| &url[path + i..]);
    format!("{}/{name}{query}", &url[..path])
}
