//! The one place where SQLite failures become [`unique_core::Error`] (C8).
//!
//! SQLite has no notion of throttling, so this store never returns
//! [`Error::Throttled`]. Lock contention is waited out inside SQLite (the busy
//! timeout); a lock still held when that timeout elapses means another process
//! is stuck or running something long (a backup, a manual transaction), which is
//! a fault the operator must see: `Unavailable`, like every other SQLite error.
//! A failed fence condition is never an SQLite error here: the statements report
//! it by returning no row, and the store answers it with
//! [`CasOutcome::LostRace`](unique_core::CasOutcome::LostRace), never through
//! this module.

use std::fmt;
use std::sync::Arc;

use rusqlite::ErrorCode;
use unique_core::Error;

/// Maps an SQLite failure during `what` (a lower-case fragment such as
/// `"claim"`) to `Unavailable`, keeping the SQLite error as the source.
pub(crate) fn map_sqlite(what: &str, e: rusqlite::Error) -> Error {
    Error::unavailable_with(format!("sqlite {what} failed: {}", describe(&e)), e)
}

/// The same mapping for an error that several callers share (a failed commit
/// answers every caller of the batch).
pub(crate) fn map_shared(what: &str, e: &Arc<rusqlite::Error>) -> Error {
    Error::unavailable_with(
        format!("sqlite {what} failed: {}", describe(e)),
        SharedSqliteError(Arc::clone(e)),
    )
}

/// The writer thread is gone (it panicked, or the store is shutting down).
pub(crate) fn writer_stopped() -> Error {
    Error::unavailable("sqlite writer thread has stopped")
}

/// A blocking read task did not finish (it panicked or the runtime is shutting down).
pub(crate) fn read_task_failed(e: tokio::task::JoinError) -> Error {
    Error::unavailable_with("sqlite read task did not complete", e)
}

/// What went wrong, in words an operator can act on.
fn describe(e: &rusqlite::Error) -> &'static str {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            "database is locked by another connection and the busy timeout elapsed"
        }
        Some(ErrorCode::DiskFull) => "disk is full",
        Some(ErrorCode::ReadOnly) => "database is read-only",
        Some(ErrorCode::NotADatabase) => "file is not an sqlite database",
        Some(ErrorCode::DatabaseCorrupt) => "database file is corrupt",
        Some(ErrorCode::CannotOpen) => "cannot open the database file",
        Some(ErrorCode::PermissionDenied) => "permission denied",
        Some(ErrorCode::SystemIoFailure) => "i/o error",
        Some(ErrorCode::ConstraintViolation) => "constraint violation",
        Some(_) => "sqlite error",
        // Not from the SQLite library: a value of an unexpected type in a column
        // (e.g. a record edited by hand), which the store cannot interpret.
        None => "unexpected stored data",
    }
}

/// An SQLite error shared between the callers of one batch.
#[derive(Debug)]
struct SharedSqliteError(Arc<rusqlite::Error>);

impl fmt::Display for SharedSqliteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedSqliteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::ffi;

    fn sqlite(code: std::ffi::c_int) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(code), None)
    }

    /// Asserts `Unavailable`, the reason, and that the SQLite error is kept as the source.
    fn assert_mapped(e: rusqlite::Error, reason: &str) {
        let mapped = map_sqlite("claim", e);
        assert!(mapped.is_unavailable(), "{mapped:?}");
        assert!(!mapped.is_throttled() && !mapped.is_invalid_params());
        assert_eq!(
            mapped.to_string(),
            format!("unavailable: sqlite claim failed: {reason}")
        );
        let source = std::error::Error::source(&mapped).expect("source kept");
        assert!(source.downcast_ref::<rusqlite::Error>().is_some());
    }

    #[test]
    fn busy_after_timeout_is_unavailable_not_throttled() {
        let reason = "database is locked by another connection and the busy timeout elapsed";
        assert_mapped(sqlite(ffi::SQLITE_BUSY), reason);
        assert_mapped(sqlite(ffi::SQLITE_LOCKED), reason);
    }

    #[test]
    fn disk_full() {
        assert_mapped(sqlite(ffi::SQLITE_FULL), "disk is full");
    }

    #[test]
    fn read_only() {
        assert_mapped(sqlite(ffi::SQLITE_READONLY), "database is read-only");
    }

    #[test]
    fn not_a_database() {
        assert_mapped(sqlite(ffi::SQLITE_NOTADB), "file is not an sqlite database");
    }

    #[test]
    fn corrupt() {
        assert_mapped(sqlite(ffi::SQLITE_CORRUPT), "database file is corrupt");
    }

    #[test]
    fn cannot_open() {
        assert_mapped(
            sqlite(ffi::SQLITE_CANTOPEN),
            "cannot open the database file",
        );
    }

    #[test]
    fn permission_denied() {
        assert_mapped(sqlite(ffi::SQLITE_PERM), "permission denied");
    }

    #[test]
    fn io_error() {
        assert_mapped(sqlite(ffi::SQLITE_IOERR), "i/o error");
    }

    #[test]
    fn constraint_is_a_fault_not_a_lost_race() {
        // A trigger or a schema edit can raise a constraint error; it is a fault,
        // not a lost race (C8: never report another failure as a lost race).
        assert_mapped(sqlite(ffi::SQLITE_CONSTRAINT), "constraint violation");
    }

    #[test]
    fn any_other_sqlite_code() {
        assert_mapped(sqlite(ffi::SQLITE_INTERNAL), "sqlite error");
    }

    #[test]
    fn non_sqlite_error_is_unexpected_data() {
        let e = rusqlite::Error::InvalidColumnType(0, "gen".into(), rusqlite::types::Type::Text);
        assert_mapped(e, "unexpected stored data");
    }

    #[test]
    fn shared_error_keeps_the_chain() {
        let shared = Arc::new(sqlite(ffi::SQLITE_IOERR));
        let mapped = map_shared("commit", &shared);
        assert!(mapped.is_unavailable());
        assert_eq!(
            mapped.to_string(),
            "unavailable: sqlite commit failed: i/o error"
        );
        let source = std::error::Error::source(&mapped).expect("source kept");
        assert!(source.source().is_some());
    }

    #[test]
    fn stopped_writer_and_failed_read_task() {
        assert!(writer_stopped().is_unavailable());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let join_error = rt
            .block_on(async { tokio::task::spawn_blocking(|| panic!("reader panicked")).await })
            .expect_err("the task panicked");
        let mapped = read_task_failed(join_error);
        assert!(mapped.is_unavailable());
        assert_eq!(
            mapped.to_string(),
            "unavailable: sqlite read task did not complete"
        );
    }
}
