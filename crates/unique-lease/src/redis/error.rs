//! The one place where Redis errors become [`LeaseError`]s.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::LeaseError;

/// Maps a Redis error raised during `op` (an operation name such as
/// `"ensure_owner"`). Transport faults and transient server states are
/// `Unavailable` (retryable); a key of the wrong type is `Corrupt`; everything else
/// is `Backend`. Reasons never include the connection URL.
pub(super) fn map(op: &str, e: RedisError) -> LeaseError {
    let unavailable = |what: &str| LeaseError::Unavailable {
        reason: format!("redis {op}: {what}"),
        source: None,
    };
    let backend = |what: &str| LeaseError::Backend {
        reason: format!("redis {op}: {what}"),
        source: None,
    };
    let mapped = match e.kind() {
        ErrorKind::Io if e.is_timeout() => unavailable("timed out"),
        // Before "dropped": redis 1.x counts a refused connection as dropped too.
        ErrorKind::Io if e.is_connection_refusal() => unavailable("connection refused"),
        ErrorKind::Io if e.is_connection_dropped() => unavailable("connection dropped"),
        ErrorKind::Io => unavailable("connection failed"),
        // A garbled reply desynchronises the connection; the manager reconnects.
        ErrorKind::Parse => unavailable("unreadable reply"),
        ErrorKind::Server(ServerErrorKind::BusyLoading) => {
            unavailable("server is loading its dataset")
        }
        ErrorKind::Server(
            ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask,
        )
        | ErrorKind::ClusterConnectionNotFound => unavailable("cluster unavailable"),
        // A failover turned our server into a replica; the next primary will answer.
        ErrorKind::Server(ServerErrorKind::ReadOnly) => {
            unavailable("server is a read-only replica")
        }
        ErrorKind::Server(ServerErrorKind::NoPerm) => backend("permission denied"),
        ErrorKind::AuthenticationFailed => backend("authentication failed"),
        ErrorKind::UnexpectedReturnType => backend("unexpected reply"),
        ErrorKind::Extension => match e.code() {
            Some("WRONGTYPE") => {
                return LeaseError::Corrupt(format!(
                    "redis {op}: a key holds the wrong kind of value"
                ));
            }
            Some("OOM") => unavailable("server out of memory"),
            Some("BUSY") => unavailable("server busy running a script"),
            Some("NOAUTH") => backend("permission denied"),
            _ => backend("server error"),
        },
        _ => backend("server error"),
    };
    with_source(mapped, e)
}

fn with_source(mapped: LeaseError, e: RedisError) -> LeaseError {
    match mapped {
        LeaseError::Unavailable { reason, .. } => LeaseError::unavailable_with(reason, e),
        LeaseError::Backend { reason, .. } => LeaseError::backend_with(reason, e),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use redis::make_extension_error;

    use super::*;

    fn io(kind: io::ErrorKind) -> RedisError {
        io::Error::new(kind, "x").into()
    }

    fn ext(code: &str) -> RedisError {
        make_extension_error(code.to_owned(), Some("detail".to_owned()))
    }

    #[test]
    fn transport_faults_are_unavailable() {
        let cases = [
            (io(io::ErrorKind::TimedOut), "redis op: timed out"),
            (
                io(io::ErrorKind::ConnectionReset),
                "redis op: connection dropped",
            ),
            (
                io(io::ErrorKind::BrokenPipe),
                "redis op: connection dropped",
            ),
            (
                io(io::ErrorKind::UnexpectedEof),
                "redis op: connection dropped",
            ),
            (
                io(io::ErrorKind::ConnectionRefused),
                "redis op: connection refused",
            ),
            (io(io::ErrorKind::Other), "redis op: connection failed"),
        ];
        for (e, reason) in cases {
            let mapped = map("op", e);
            assert!(mapped.is_unavailable() && mapped.is_retryable(), "{mapped}");
            assert_eq!(mapped.to_string(), format!("unavailable: {reason}"));
            assert!(
                std::error::Error::source(&mapped).is_some(),
                "keeps the source"
            );
        }
    }

    #[test]
    fn transient_server_states_are_unavailable() {
        let server = ErrorKind::Server;
        let kinds = [
            (ErrorKind::Parse, "unreadable reply"),
            (
                server(ServerErrorKind::BusyLoading),
                "server is loading its dataset",
            ),
            (server(ServerErrorKind::TryAgain), "cluster unavailable"),
            (server(ServerErrorKind::ClusterDown), "cluster unavailable"),
            (server(ServerErrorKind::MasterDown), "cluster unavailable"),
            (server(ServerErrorKind::Moved), "cluster unavailable"),
            (server(ServerErrorKind::Ask), "cluster unavailable"),
            (ErrorKind::ClusterConnectionNotFound, "cluster unavailable"),
            (
                server(ServerErrorKind::ReadOnly),
                "server is a read-only replica",
            ),
        ];
        for (kind, reason) in kinds {
            let mapped = map("op", (kind, "x").into());
            assert_eq!(
                mapped.to_string(),
                format!("unavailable: redis op: {reason}")
            );
        }
        for (code, reason) in [
            ("OOM", "server out of memory"),
            ("BUSY", "server busy running a script"),
        ] {
            let mapped = map("op", ext(code));
            assert_eq!(
                mapped.to_string(),
                format!("unavailable: redis op: {reason}")
            );
        }
    }

    #[test]
    fn wrong_type_is_corrupt() {
        let mapped = map("lookup", ext("WRONGTYPE"));
        assert!(mapped.is_corrupt(), "{mapped}");
        assert!(!mapped.is_retryable());
        assert_eq!(
            mapped.to_string(),
            "corrupt record: redis lookup: a key holds the wrong kind of value"
        );
    }

    #[test]
    fn permanent_refusals_are_backend_errors() {
        let cases: [(RedisError, &str); 8] = [
            (
                (ErrorKind::AuthenticationFailed, "x").into(),
                "authentication failed",
            ),
            (
                (ErrorKind::UnexpectedReturnType, "x").into(),
                "unexpected reply",
            ),
            (
                (ErrorKind::Server(ServerErrorKind::ResponseError), "x").into(),
                "server error",
            ),
            ((ErrorKind::InvalidClientConfig, "x").into(), "server error"),
            (
                (ErrorKind::Server(ServerErrorKind::NoPerm), "x").into(),
                "permission denied",
            ),
            (ext("NOAUTH"), "permission denied"),
            (ext("SOMETHINGNEW"), "server error"),
            ((ErrorKind::Client, "x").into(), "server error"),
        ];
        for (e, reason) in cases {
            let mapped = map("op", e);
            assert!(!mapped.is_retryable(), "{mapped}");
            assert_eq!(
                mapped.to_string(),
                format!("backend error: redis op: {reason}")
            );
        }
    }
}
