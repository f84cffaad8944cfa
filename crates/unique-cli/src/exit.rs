//! Exit statuses, and the one place a failure becomes one: [`Failure`].

use std::process::ExitCode;

use unique_core::Error;

/// Done.
pub(crate) const OK: u8 = 0;
/// The server could not be reached or is unavailable (connection failed, timeout, 5xx, an
/// answer that is not the wire contract's).
pub(crate) const UNAVAILABLE: u8 = 1;
/// A usage error or invalid input: a bad flag (clap's own status for usage errors is 2), a
/// request the server refused as invalid (400; 404, 405 or 413 from something that is not a
/// unique server), or a file that cannot be used.
pub(crate) const INVALID: u8 = 2;
/// The server refused the credentials: 401 (missing or unknown token) or 403 (a key outside
/// the token's scope, or a logout without the admin role).
pub(crate) const REFUSED: u8 = 3;
/// The store throttled the request (429): retry later.
pub(crate) const THROTTLED: u8 = 4;

/// The table printed after `--help` and in the README.
pub(crate) const TABLE: &str = "\
Exit status:
  0  done (a release or logout that found nothing to end is done too; its output says so)
  1  the server is unreachable or unavailable (connection refused, timeout, 5xx)
  2  usage error or invalid input (a bad flag; a key or reason the server refuses, 400;
     a --server that is not a unique server, 404/405; a file that cannot be used)
  3  the server refused the credentials (401: missing or unknown token; 403: a key outside
     the token's scope, or logout without the admin role)
  4  throttled by the store (429): retry later
  status: 1 also when the store is not ready (the server's info is printed all the same)
  lease, nodes: 2 also for a server that serves no leases (501)
  node-check: 0 every clause passed, 1 a clause failed, 2 usage or key file error";

/// Why a command did not finish: the exit status and what to tell the operator. The message
/// never holds a caller token or a secret from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A file that cannot be read, used or written.
    pub(crate) fn file(message: impl Into<String>) -> Self {
        Self::new(INVALID, message)
    }

    /// A call to the server that failed with `error` (from `unique-client-http`), chosen by
    /// its variant: the transport reports a 401 as `Unauthenticated` and a 403 as
    /// `Forbidden`.
    pub(crate) fn from_call(error: &Error) -> Self {
        match error {
            Error::Unauthenticated(message) => Self::new(
                REFUSED,
                format!("{message}; pass a token the server knows with --token or UNIQUE_TOKEN"),
            ),
            Error::Forbidden(message) => Self::new(
                REFUSED,
                format!(
                    "{message}; the token's entry must cover the key's project and env (and \
                     hold the admin role to log a user out)"
                ),
            ),
            Error::InvalidParams(message) => Self::new(
                INVALID,
                format!("the server refused the request: {message}"),
            ),
            Error::Throttled => Self::new(
                THROTTLED,
                "the server's store throttled the request (429): retry later",
            ),
            Error::Unavailable { reason, source } => {
                let mut message = format!("the server is unreachable or unavailable: {reason}");
                let mut cause = source
                    .as_deref()
                    .map(|e| e as &(dyn std::error::Error + 'static));
                while let Some(e) = cause {
                    message.push_str(": ");
                    message.push_str(&e.to_string());
                    cause = e.source();
                }
                Self::new(UNAVAILABLE, message)
            }
            other => Self::new(UNAVAILABLE, other.to_string()),
        }
    }

    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_has_its_status() {
        let refused = Error::Unauthenticated(
            "current: the server refused the credentials (401): unknown bearer token".into(),
        );
        let forbidden = Error::Forbidden(
            "logout: the server refused the credentials (403): not an admin".into(),
        );
        let cases = [
            (refused, REFUSED, "--token"),
            (forbidden, REFUSED, "admin role"),
            (
                Error::invalid("uid must be >= 1"),
                INVALID,
                "uid must be >= 1",
            ),
            (Error::Throttled, THROTTLED, "retry later"),
            (
                Error::unavailable_with(
                    "current: connection failed",
                    std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
                ),
                UNAVAILABLE,
                "current: connection failed: connection refused",
            ),
            (
                Error::Superseded {
                    generation: 1,
                    current: 2,
                },
                UNAVAILABLE,
                "superseded",
            ),
        ];
        for (error, code, shown) in cases {
            let failure = Failure::from_call(&error);
            assert_eq!(failure.code, code, "{error}");
            assert!(failure.message.contains(shown), "{failure:?}");
        }
    }
}
