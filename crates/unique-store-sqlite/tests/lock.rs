//! One store per database file, whatever its options: every store holds the
//! file's lock (`<db>-lock`) for its life, and a second store on the file is
//! refused, with the record cache on or off in either. (Across processes, with
//! real servers: `unique-server`'s `tests/sqlite_lock.rs`.)

use std::path::Path;

use unique_core::{CasOutcome, Key, Owner, OwnerState, Store};
use unique_store_sqlite::SqliteStore;

fn open(path: &Path, record_cache: usize) -> Result<SqliteStore, unique_core::Error> {
    SqliteStore::builder(path).record_cache(record_cache).open()
}

/// The message of a store refused because another store of this process holds `db`.
fn assert_refused_in_process(err: &unique_core::Error, db: &Path) {
    assert!(err.is_unavailable(), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&db.display().to_string()),
        "names the file: {msg}"
    );
    let lock = std::fs::canonicalize(db.parent().unwrap())
        .unwrap()
        .join(format!(
            "{}-lock",
            db.file_name().unwrap().to_str().unwrap()
        ));
    assert!(
        msg.contains(&format!("lock file {}", lock.display())),
        "names the lock file: {msg}"
    );
    assert!(
        msg.contains(&format!(
            "another store of this process (pid {})",
            std::process::id()
        )),
        "names the holder: {msg}"
    );
    assert!(msg.contains("whatever its options"), "{msg}");
}

/// Every combination of the record cache in the first and the second store: the
/// second is refused while the first is open (and the first keeps working), and
/// opens once the first is dropped. A cache-off store beside a cache-on one was
/// let in before, and the cache-on one then answered the gens it had cached
/// after the other had written newer ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_store_on_the_file_is_refused_whatever_the_cache() {
    let owner = Owner::new("r", "c", "http://node-1.test/kick");
    for (first_cache, second_cache) in [(100, 100), (100, 0), (0, 100), (0, 0)] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("unique.db");
        let first = open(&db, first_cache).expect("the first store opens");
        let key = Key::new("p", "e", 1);
        let err = open(&db, second_cache)
            .map(drop)
            .expect_err("a second store on the file is refused");
        assert_refused_in_process(&err, &db);
        // Refused before it could write: the first store's view is the file's.
        assert_eq!(
            first
                .claim_cas(&key, &owner, "a", &OwnerState::absent())
                .await
                .unwrap(),
            CasOutcome::Written { generation: 1 },
            "cache {first_cache} / {second_cache}"
        );
        drop(first);
        let second = open(&db, second_cache).expect("opens once the first is dropped");
        assert_eq!(second.read_owner(&key).await.unwrap().generation, 1);
    }
}

/// The lock file holds the holder's pid while a store is open, and is left
/// empty (not removed) when it closes.
#[test]
fn the_lock_file_names_the_holder_while_it_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unique.db");
    let lock = dir.path().join("unique.db-lock");
    let store = open(&db, 0).unwrap();
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        format!("{}\n", std::process::id())
    );
    drop(store);
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), "");
}

/// A store whose open failed after it took the lock (here: a schema it refuses)
/// leaves the file free: the next open meets the same refusal, not the lock.
#[test]
fn a_failed_open_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unique.db");
    drop(open(&db, 0).unwrap());
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("PRAGMA user_version = 99")
        .unwrap();
    for _ in 0..2 {
        let err = open(&db, 100).map(drop).expect_err("newer schema");
        assert!(err.to_string().contains("schema version 99"), "{err}");
    }
}

/// Another path to the same file (a symbolic link, a relative path) finds the
/// same lock: the lock file is named after the database's canonical path.
#[cfg(unix)]
#[test]
fn another_path_to_the_file_finds_the_same_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unique.db");
    let first = open(&db, 100).unwrap();
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&db, &link).unwrap();
    let err = open(&link, 0).map(drop).expect_err("the same file");
    assert!(
        err.to_string().contains("another store of this process"),
        "{err}"
    );
    let dotted = dir.path().join(".").join("unique.db");
    let err = open(&dotted, 0).map(drop).expect_err("the same file");
    assert!(
        err.to_string().contains("another store of this process"),
        "{err}"
    );
    drop(first);
    drop(open(&link, 0).expect("free once the first is dropped"));
}

/// A missing database file is created by SQLite after the lock is taken; a
/// missing directory is still reported as such, not as a lock failure.
#[test]
fn a_missing_file_is_created_and_a_missing_directory_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    drop(open(&path, 1).unwrap());
    assert!(path.exists());
    let err = open(&dir.path().join("nope").join("x.db"), 0)
        .map(drop)
        .expect_err("no directory");
    assert!(err.to_string().contains("does not exist"), "{err}");
}

/// Tools that bypass the store (an SQLite connection, as the `sqlite3` CLI or the
/// contract suite's raw writer opens) take no lock and are not refused.
#[test]
fn plain_sqlite_connections_are_not_stores() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unique.db");
    let store = open(&db, 100).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let count: i64 = conn
        .query_row("SELECT count(*) FROM records", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 0);
    drop((conn, store));
}
