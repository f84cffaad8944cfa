//! The binary on `--store postgres` against tables made by hand (a real PostgreSQL started by
//! the test tooling, or `UNIQUE_TEST_DATABASE_URL`): a table of the previous schema version is
//! refused at startup naming its migration, and migrated by `--create-table`, after which
//! claims write the recent claims; a table whose column was altered to another type is refused
//! at startup naming the column and its type.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use unique_store_postgres::tokio_postgres::{self, NoTls};
use unique_testsupport::postgres::{self, PASSWORD};

use common::{http, postgres_command, start};

/// The server on `table` of the database at `url` (passed through the environment).
fn server_command(url: &str, table: &str) -> Command {
    let mut cmd = postgres_command(url, table);
    cmd.env("RUST_LOG", "warn");
    cmd
}

/// Runs the server, which must refuse to start within the startup bound (a server that
/// starts instead is killed and fails the test); returns its stderr.
fn refused(command: &mut Command) -> String {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_mins(1);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "the server must refuse to start: {err}");
    assert!(
        !err.contains(PASSWORD),
        "the password reached the log: {err}"
    );
    err
}

/// Runs `sql` (several statements) on the database at `url`, returning the first column of
/// the last row the last statement returned, as text.
fn sql(url: &str, sql: &str) -> Option<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
        tokio::spawn(connection);
        let messages = client.simple_query(sql).await.unwrap();
        messages.iter().rev().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
    })
}

/// A table name of this run (a database named by `UNIQUE_TEST_DATABASE_URL` outlives it).
fn fresh(base: &str) -> String {
    format!("{base}_{}", std::process::id())
}

#[test]
fn a_schema_1_table_is_refused_then_migrated_by_create_table() {
    let db = postgres::shared();
    let table = fresh("server_schema_one");
    sql(
        db.url(),
        &format!(
            "DROP TABLE IF EXISTS {table}; \
             CREATE TABLE {table} (pk text PRIMARY KEY, gen bigint NOT NULL, owner text, cid text); \
             COMMENT ON TABLE {table} IS 'unique-store-postgres schema 1'"
        ),
    );

    let err = refused(&mut server_command(db.url(), &table));
    assert!(err.contains("has schema 1"), "{err}");
    assert!(err.contains("--create-table"), "{err}");
    assert!(err.contains("ADD COLUMN IF NOT EXISTS won text"), "{err}");

    let mut command = server_command(db.url(), &table);
    command.arg("--create-table");
    let (addr, _server) = start(&mut command);
    let claim = r#"{"project":"mig","env":"pg","uid":1,"owner":{"endpoint":"http://127.0.0.1:9/k"},"claim_id":"c1"}"#;
    let first = http(&addr, "/v1/claim", claim);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert_eq!(
        sql(
            db.url(),
            &format!("SELECT obj_description(to_regclass('{table}'), 'pg_class')")
        )
        .as_deref(),
        Some("unique-store-postgres schema 2")
    );
    assert_eq!(
        sql(
            db.url(),
            &format!("SELECT won FROM {table} WHERE pk = 'mig#pg#1'")
        )
        .as_deref(),
        Some(r#"[["c1",1]]"#),
        "the claim wrote its win"
    );
}

#[test]
fn a_column_of_another_type_is_a_clear_startup_error() {
    let db = postgres::shared();
    let table = fresh("server_altered");
    sql(
        db.url(),
        &format!(
            "DROP TABLE IF EXISTS {table}; \
             CREATE TABLE {table} (pk text PRIMARY KEY, gen bigint NOT NULL, owner text, \
             cid text, won text); \
             COMMENT ON TABLE {table} IS 'unique-store-postgres schema 2'; \
             ALTER TABLE {table} ALTER COLUMN gen TYPE text USING gen::text"
        ),
    );
    let err = refused(&mut server_command(db.url(), &table));
    assert!(err.contains("invalid schema"), "{err}");
    assert!(err.contains("column gen is text, needs bigint"), "{err}");
}
