//! The one place where PostgreSQL and pool failures become [`unique_core::Error`] (C8).
//!
//! PostgreSQL has no throttling, so this store never returns [`Error::Throttled`]: every
//! failure is `Unavailable`, with the driver's error kept as the source and a reason an
//! operator can act on (which names the SQLSTATE, never the connection URL or password).
//! A failed fence condition is never an error here: the claim statements report it by
//! writing no row, and the store answers it with
//! [`CasOutcome::LostRace`](unique_core::CasOutcome::LostRace).
//!
//! A serialization failure or a deadlock cannot come from the single-statement READ
//! COMMITTED writes of this store; should a server configured otherwise report one, it is
//! `Unavailable` like a lost connection: the claim fails closed and the client retries with
//! the same claim_id, which the replay short-circuit resolves if the write did commit.

use std::time::Duration;

use deadpool_postgres::{PoolError, TimeoutType};
use tokio_postgres::error::SqlState;
use unique_core::Error;

/// Maps a driver failure during `what` (a lower-case fragment such as `"claim"`).
pub(crate) fn map_pg(what: &str, e: tokio_postgres::Error) -> Error {
    let reason = describe(e.code(), e.is_closed());
    let code = e.code().map(|c| format!(" (sqlstate {})", c.code()));
    Error::unavailable_with(
        format!(
            "postgres {what} failed: {reason}{}",
            code.unwrap_or_default()
        ),
        e,
    )
}

/// Maps a failure to get a connection from the pool.
pub(crate) fn map_pool(what: &str, e: PoolError) -> Error {
    match e {
        PoolError::Backend(e) => map_pg(what, e),
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

    #[test]
    fn timeouts_are_unavailable_and_named() {
        for (kind, reason) in [
            (TimeoutType::Wait, "free connection"),
            (TimeoutType::Create, "connecting"),
            (TimeoutType::Recycle, "pooled connection"),
        ] {
            let e = map_pool("read", PoolError::Timeout(kind));
            assert!(e.is_unavailable());
            assert!(e.to_string().contains(reason), "{e}");
        }
        let e = map_pool("read", PoolError::Closed);
        assert!(e.is_unavailable());
        let e = timed_out("claim", Duration::from_secs(3));
        assert!(e.is_unavailable());
        assert_eq!(
            e.to_string(),
            "unavailable: postgres claim timed out after 3s"
        );
    }
}
