//! The one place where PostgreSQL and pool failures become [`unique_core::Error`] (C8).
//!
//! PostgreSQL has no throttling, so this store never returns [`Error::Throttled`]: every
//! failure is `Unavailable`, with the driver's error kept as the source and a reason an
//! operator can act on (which names the SQLSTATE, never the connection URL or password).
//! A failed fence condition is never an error here: the claim statements report it by
//! writing no row, and the store answers it with
//! [`CasOutcome::LostRace`](unique_core::CasOutcome::LostRace).
//!
//! A table whose columns do not have this store's types (altered by hand) is `Unavailable`
//! too, with a reason naming the column and its type ([`Failure::Schema`]), never a panic:
//! every value is read with `try_get` and every statement's parameter types are compared
//! with the schema's before anything is sent.
//!
//! A serialization failure or a deadlock cannot come from the single-statement READ
//! COMMITTED writes of this store; should a server configured otherwise report one, it is
//! `Unavailable` like a lost connection: the claim fails closed and the client retries with
//! the same claim_id, which the replay short-circuit resolves if the write did commit.

use std::time::Duration;

use deadpool_postgres::{PoolError, TimeoutType};
use tokio_postgres::error::SqlState;
use unique_core::Error;

use crate::sql::SCHEMA_VERSION;
use crate::tls::{TlsSetup, tls_problem};

/// Why an operation on a pooled connection failed; [`into_error`](Self::into_error) turns
/// it into the store's error. Any failure closes the connection (see `with_connection`).
#[derive(Debug)]
pub(crate) enum Failure {
    /// The driver or the database failed.
    Pg(tokio_postgres::Error),
    /// The table does not have this store's schema: what differs, naming the column.
    Schema {
        detail: String,
        source: Option<tokio_postgres::Error>,
    },
    /// The store refuses for a reason of its own, already worded (the startup check).
    Refused(Error),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Pg(e)
    }
}

impl Failure {
    /// A schema mismatch without a driver error behind it.
    pub(crate) fn schema(detail: impl Into<String>) -> Self {
        Self::Schema {
            detail: detail.into(),
            source: None,
        }
    }

    /// The store's error for a failure during `what` on `table`.
    pub(crate) fn into_error(self, what: &str, table: &str) -> Error {
        match self {
            Self::Pg(e) => map_pg(what, e),
            Self::Schema { detail, source } => {
                let reason = format!(
                    "postgres {what} failed: invalid schema: table {table} does not match \
                     schema {SCHEMA_VERSION} ({detail}); the startup check lists what differs"
                );
                match source {
                    Some(e) => Error::unavailable_with(reason, e),
                    None => Error::unavailable(reason),
                }
            }
            Self::Refused(e) => e,
        }
    }
}

/// Maps a driver failure during `what` (a lower-case fragment such as `"claim"`).
pub(crate) fn map_pg(what: &str, e: tokio_postgres::Error) -> Error {
    let reason = describe(e.code(), e.is_closed());
    let code = e.code().map(|c| format!(" (sqlstate {})", c.code()));
    // For a table of the wrong shape the server's own words name the column or types.
    let detail = e
        .as_db_error()
        .filter(|_| e.code().is_some_and(is_schema_mismatch))
        .map(|db| format!(": {}", db.message()));
    Error::unavailable_with(
        format!(
            "postgres {what} failed: {reason}{}{}",
            detail.unwrap_or_default(),
            code.unwrap_or_default()
        ),
        e,
    )
}

/// Maps a failure to open a connection (what the pool's backend errors are: it recycles
/// without a query). A TLS failure names the problem and the TLS setup (`sslmode=…`, the
/// root file); a refusal by `pg_hba.conf` (SQLSTATE 28000) carries the server's words,
/// which name the host, user and database and whether the connection was encrypted, and,
/// for a connection without TLS, says that the server may want TLS.
fn map_connect(what: &str, e: tokio_postgres::Error, tls: &TlsSetup) -> Error {
    if let Some(problem) = tls_problem(&e) {
        return Error::unavailable_with(
            format!("postgres {what} failed: TLS: {problem}; {tls}"),
            e,
        );
    }
    if e.code() != Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION) {
        return map_pg(what, e);
    }
    let refusal = e.as_db_error().map_or("", |db| db.message());
    let hint = if tls.plain() {
        format!(
            "; the connection did not use TLS ({tls}): a server that accepts only TLS \
             connections needs sslmode=verify-full (or require)"
        )
    } else {
        String::new()
    };
    Error::unavailable_with(
        format!(
            "postgres {what} failed: the server refused the connection: {refusal}{hint} \
             (sqlstate 28000)"
        ),
        e,
    )
}

/// A SQLSTATE that one of this store's fixed statements only meets on a table whose columns
/// are not the schema's (altered by hand, or altered under a prepared statement).
pub(crate) fn is_schema_mismatch(code: &SqlState) -> bool {
    [
        SqlState::UNDEFINED_COLUMN,
        SqlState::DATATYPE_MISMATCH,
        SqlState::UNDEFINED_FUNCTION,
        SqlState::FEATURE_NOT_SUPPORTED,
    ]
    .contains(code)
}

/// Maps a failure to get a connection from the pool; `tls` is how the store connects.
pub(crate) fn map_pool(what: &str, e: PoolError, tls: &TlsSetup) -> Error {
    match e {
        PoolError::Backend(e) => map_connect(what, e, tls),
        PoolError::Timeout(kind) => Error::unavailable(format!(
            "postgres {what} failed: {}",
            describe_timeout(kind)
        )),
        other => Error::unavailable_with(format!("postgres {what} failed: connection pool"), other),
    }
}

/// A store call that did not finish within the operation timeout.
pub(crate) fn timed_out(what: &str, limit: Duration) -> Error {
    Error::unavailable(format!("postgres {what} timed out after {limit:?}"))
}

fn describe_timeout(kind: TimeoutType) -> &'static str {
    match kind {
        TimeoutType::Wait => "timed out waiting for a free connection",
        TimeoutType::Create => "timed out connecting to the database",
        TimeoutType::Recycle => "timed out checking a pooled connection",
    }
}

/// What went wrong, in words an operator can act on.
fn describe(code: Option<&SqlState>, closed: bool) -> &'static str {
    let Some(code) = code else {
        return if closed {
            "connection closed"
        } else {
            "connection error"
        };
    };
    match code {
        c if *c == SqlState::T_R_SERIALIZATION_FAILURE => "serialization failure",
        c if *c == SqlState::T_R_DEADLOCK_DETECTED => "deadlock detected",
        c if *c == SqlState::UNDEFINED_TABLE => {
            "the table is missing (create it, or start with --create-table)"
        }
        c if *c == SqlState::UNDEFINED_COLUMN => "the table does not have the expected columns",
        c if *c == SqlState::DATATYPE_MISMATCH || *c == SqlState::UNDEFINED_FUNCTION => {
            "invalid schema: a column does not have the expected type"
        }
        // "cached plan must not change result type": a column was altered under a prepared
        // statement; the connection is closed and the next one prepares afresh.
        c if *c == SqlState::FEATURE_NOT_SUPPORTED => {
            "the table changed under a prepared statement"
        }
        c if *c == SqlState::INSUFFICIENT_PRIVILEGE => "permission denied",
        c if *c == SqlState::READ_ONLY_SQL_TRANSACTION => {
            "the server is read-only (connected to a standby?)"
        }
        c if *c == SqlState::TOO_MANY_CONNECTIONS => "the server has too many connections",
        c if *c == SqlState::QUERY_CANCELED => "statement cancelled",
        c if *c == SqlState::ADMIN_SHUTDOWN
            || *c == SqlState::CRASH_SHUTDOWN
            || *c == SqlState::CANNOT_CONNECT_NOW =>
        {
            "the server is shutting down or starting up"
        }
        c if *c == SqlState::INVALID_PASSWORD
            || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            "authentication failed"
        }
        c if *c == SqlState::INVALID_CATALOG_NAME => "the database does not exist",
        _ => "database error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_branch_has_its_reason() {
        let cases = [
            (None, true, "connection closed"),
            (None, false, "connection error"),
            (Some("40001"), false, "serialization failure"),
            (Some("40P01"), false, "deadlock detected"),
            (Some("42P01"), false, "the table is missing"),
            (Some("42703"), false, "expected columns"),
            (Some("42804"), false, "invalid schema"),
            (Some("42883"), false, "invalid schema"),
            (Some("0A000"), false, "changed under a prepared statement"),
            (Some("42501"), false, "permission denied"),
            (Some("25006"), false, "read-only"),
            (Some("53300"), false, "too many connections"),
            (Some("57014"), false, "statement cancelled"),
            (Some("57P01"), false, "shutting down"),
            (Some("57P02"), false, "shutting down"),
            (Some("57P03"), false, "starting up"),
            (Some("28P01"), false, "authentication failed"),
            (Some("28000"), false, "authentication failed"),
            (Some("3D000"), false, "does not exist"),
            (Some("22001"), false, "database error"),
        ];
        for (code, closed, reason) in cases {
            let code = code.map(SqlState::from_code);
            let described = describe(code.as_ref(), closed);
            assert!(described.contains(reason), "{code:?}: {described}");
        }
    }

    fn loopback() -> TlsSetup {
        let config = "host=127.0.0.1".parse().unwrap();
        TlsSetup::resolve(crate::tls::TlsParams::default(), &config)
            .unwrap()
            .0
    }

    #[test]
    fn timeouts_are_unavailable_and_named() {
        for (kind, reason) in [
            (TimeoutType::Wait, "free connection"),
            (TimeoutType::Create, "connecting"),
            (TimeoutType::Recycle, "pooled connection"),
        ] {
            let e = map_pool("read", PoolError::Timeout(kind), &loopback());
            assert!(e.is_unavailable());
            assert!(e.to_string().contains(reason), "{e}");
        }
        let e = map_pool("read", PoolError::Closed, &loopback());
        assert!(e.is_unavailable());
        let e = timed_out("claim", Duration::from_secs(3));
        assert!(e.is_unavailable());
        assert_eq!(
            e.to_string(),
            "unavailable: postgres claim timed out after 3s"
        );
    }
}
