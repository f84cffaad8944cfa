//! Opening connections: the path check, pragmas, and the schema.

use std::io;
use std::path::Path;

use rusqlite::{Connection, MAIN_DB, OpenFlags};
use unique_core::Error;

use crate::error::map_sqlite;
use crate::options::SqliteStoreBuilder;

/// Marks a database file as this store's (`PRAGMA application_id`, "uniq").
pub(crate) const APPLICATION_ID: i32 = 0x756e_6971;
/// The schema version this build writes and understands (`PRAGMA user_version`):
///
/// 1. `records (pk, gen, owner, cid)`;
/// 2. adds `won` (the recent claims, C9), NULL on the rows written before it.
///
/// An older file is brought to this version when it is opened (see [`migrate`]).
pub(crate) const SCHEMA_VERSION: i32 = 2;

/// Bytes of WAL kept on disk after a checkpoint (`PRAGMA journal_size_limit`).
const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// Page size of a new file (`PRAGMA page_size`; an existing file keeps its own).
/// A claim changes one record of about 100 bytes, and a commit writes, checksums
/// and fsyncs every page it changed whole in the WAL: with 1 KiB pages instead of
/// SQLite's 4 KiB that is a quarter of the bytes per claim.
const PAGE_SIZE: i64 = 1024;

/// The one table. `WITHOUT ROWID` keeps each record in the primary-key B-tree
/// itself, so a lookup or a conditional update touches one tree, not two.
const CREATE_TABLE: &str = "CREATE TABLE records (
    pk    TEXT PRIMARY KEY NOT NULL,
    gen   INTEGER NOT NULL,
    owner TEXT,
    cid   TEXT,
    won   TEXT
) WITHOUT ROWID";

/// Version 1 to 2: the `won` column, NULL (no recent claims) on every existing row.
const ADD_WON: &str = "ALTER TABLE records ADD COLUMN won TEXT";

/// Opens the writer connection and brings the file to this build's schema.
pub(crate) fn open_writer(options: &SqliteStoreBuilder) -> Result<Connection, Error> {
    let path = options.path.as_path();
    check_path(path)?;
    let failed = |e| opening(path, e);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(failed)?;
    conn.busy_timeout(options.busy_timeout).map_err(failed)?;
    // SQLite silently falls back to read-only when the OS refuses write access.
    if conn.is_readonly(MAIN_DB).map_err(failed)? {
        return Err(Error::unavailable(format!(
            "cannot open sqlite database {}: the file is not writable (permission denied)",
            path.display()
        )));
    }
    // Takes effect only on a file without pages yet (before WAL mode is set);
    // it does not read the header, so a foreign file still fails just below.
    conn.pragma_update(None, "page_size", PAGE_SIZE)
        .map_err(failed)?;
    // The first statement that reads the header: a file that is not a database fails here.
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(failed)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::unavailable(format!(
            "cannot open sqlite database {}: write-ahead logging is not available there (journal mode stayed {mode})",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", options.synchronous.pragma_value())
        .map_err(failed)?;
    // After a checkpoint, truncate a WAL that grew under a burst instead of
    // keeping its full size on disk forever.
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
        .map_err(failed)?;
    ensure_schema(&conn, path)?;
    Ok(conn)
}

/// Opens one more connection to a file the writer has already prepared.
fn open_prepared(options: &SqliteStoreBuilder) -> Result<Connection, Error> {
    let path = options.path.as_path();
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| opening(path, e))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(|e| opening(path, e))?;
    Ok(conn)
}

/// Opens one read connection to a file the writer has already prepared.
pub(crate) fn open_reader(options: &SqliteStoreBuilder) -> Result<Connection, Error> {
    let failed = |e| opening(&options.path, e);
    let conn = open_prepared(options)?;
    // Readers never write; this makes a bug that tries to fail loudly.
    conn.pragma_update(None, "query_only", true)
        .map_err(failed)?;
    for statement in [crate::records::SELECT, crate::records::SELECT_USER] {
        conn.prepare_cached(statement).map_err(failed)?;
    }
    Ok(conn)
}

/// Opens the connection that runs the WAL checkpoints (see [`crate::checkpoint`]),
/// with the writer's durability: under `FULL` a checkpoint fsyncs what it copied.
pub(crate) fn open_checkpointer(options: &SqliteStoreBuilder) -> Result<Connection, Error> {
    let conn = open_prepared(options)?;
    conn.pragma_update(None, "synchronous", options.synchronous.pragma_value())
        .map_err(|e| opening(&options.path, e))?;
    Ok(conn)
}

/// Clear errors for the usual misconfigurations, before SQLite reports them
/// as a bare "unable to open database file".
pub(crate) fn check_path(path: &Path) -> Result<(), Error> {
    let refuse = |why: String| {
        Err(Error::unavailable(format!(
            "cannot open sqlite database {}: {why}",
            path.display()
        )))
    };
    if path.as_os_str().is_empty() {
        return refuse("the path is empty".into());
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => {
            return refuse(format!("{} is not a directory", dir.display()));
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return refuse(format!("directory {} does not exist", dir.display()));
        }
        Err(e) => return refuse(format!("directory {}: {e}", dir.display())),
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => refuse("it is a directory".into()),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => refuse(e.to_string()),
    }
}

/// Creates the table in a new file, accepts a file this store wrote, and
/// refuses anything else. Runs in a write transaction, so the startup check
/// also proves the file is writable and not locked past the busy timeout.
fn ensure_schema(conn: &Connection, path: &Path) -> Result<(), Error> {
    let refuse = |why: String| {
        Error::unavailable(format!(
            "cannot open sqlite database {}: {why}",
            path.display()
        ))
    };
    let failed = |e| opening(path, e);
    conn.execute_batch("BEGIN IMMEDIATE").map_err(failed)?;
    let checked = (|| {
        let app_id: i32 = conn
            .pragma_query_value(None, "application_id", |row| row.get(0))
            .map_err(failed)?;
        let version: i32 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(failed)?;
        if app_id == APPLICATION_ID {
            if version > SCHEMA_VERSION {
                return Err(refuse(format!(
                    "schema version {version} is newer than this build supports ({SCHEMA_VERSION})"
                )));
            }
            if version < SCHEMA_VERSION {
                migrate(conn, version).map_err(failed)?;
            }
            return Ok(());
        }
        let objects: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
            .map_err(failed)?;
        if app_id != 0 || objects > 0 {
            return Err(refuse(
                "it is an sqlite database of another application (unknown application_id or existing tables)"
                    .into(),
            ));
        }
        conn.execute_batch(CREATE_TABLE).map_err(failed)?;
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(failed)?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(failed)?;
        Ok(())
    })();
    match checked {
        Ok(()) => conn.execute_batch("COMMIT").map_err(failed),
        Err(e) => {
            // Best effort: the connection is dropped right after anyway.
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Brings a file of this store at schema `version` (older than [`SCHEMA_VERSION`])
/// to the current one, inside the startup transaction of [`ensure_schema`]: a
/// failure rolls it all back and the file stays as it was.
///
/// Each step checks the table rather than trusting the version alone, so a file
/// whose version was set back by hand (to run an older build on it) and then
/// opened again is brought forward without repeating a step.
fn migrate(conn: &Connection, version: i32) -> rusqlite::Result<()> {
    if version < 2 && has_table(conn)? && !has_column(conn, "won")? {
        // Adds the column to the table's definition only: no row is rewritten,
        // so this takes the same time on any size of file.
        conn.execute_batch(ADD_WON)?;
    }
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
}

/// The `records` table exists (a file of this store always has it, unless it
/// was dropped by hand; then the store's statements report it).
fn has_table(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'records'",
        [],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// `records` has a column named `name`.
fn has_column(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM pragma_table_info('records') WHERE name = ?1",
        [name],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// A failure while opening, with the path in the reason (a server prints it at startup).
fn opening(path: &Path, e: rusqlite::Error) -> Error {
    map_sqlite(&format!("open of {}", path.display()), e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Synchronous;

    fn pragma(conn: &Connection, name: &str) -> String {
        conn.query_row(&format!("PRAGMA {name}"), [], |row| {
            row.get::<_, rusqlite::types::Value>(0)
        })
        .map(|v| match v {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        })
        .expect("pragma")
    }

    #[test]
    fn writer_runs_in_wal_with_the_requested_durability() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.db");
        // SQLite's codes: NORMAL = 1, FULL = 2.
        for (synchronous, code) in [(Synchronous::Full, "2"), (Synchronous::Normal, "1")] {
            let conn = open_writer(&SqliteStoreBuilder::new(&path).synchronous(synchronous))
                .expect("open");
            assert_eq!(pragma(&conn, "journal_mode"), "wal");
            assert_eq!(pragma(&conn, "synchronous"), code, "{synchronous:?}");
            assert_eq!(pragma(&conn, "application_id"), APPLICATION_ID.to_string());
            assert_eq!(pragma(&conn, "user_version"), SCHEMA_VERSION.to_string());
            assert_eq!(pragma(&conn, "page_size"), PAGE_SIZE.to_string());
        }
    }

    #[test]
    fn readers_refuse_to_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = SqliteStoreBuilder::new(&dir.path().join("r.db"));
        drop(open_writer(&options).expect("open writer"));
        let reader = open_reader(&options).expect("open reader");
        let err = reader
            .execute("INSERT INTO records VALUES ('k', 1, '', NULL, NULL)", [])
            .expect_err("query_only");
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::ReadOnly),
            "{err}"
        );
    }
}
