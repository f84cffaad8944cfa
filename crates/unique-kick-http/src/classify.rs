//! The kick classification (`docs/design.md#kicker`), kept pure so every branch
//! has a unit test.

use http::StatusCode;
use unique_core::{KickDetail, KickOutcome};

/// Maps a complete answer's status: 2xx confirms, everything else (redirects
/// included: they are never followed) is `non-2xx`.
pub(crate) fn status_outcome(status: StatusCode) -> KickOutcome {
    if status.is_success() {
        KickOutcome::Confirmed
    } else {
        KickOutcome::Failed(KickDetail::Non2xx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(code: u16) -> KickOutcome {
        status_outcome(StatusCode::from_u16(code).expect("valid status code"))
    }

    #[test]
    fn every_2xx_confirms() {
        for code in [200, 201, 202, 204, 299] {
            assert_eq!(outcome(code), KickOutcome::Confirmed, "status {code}");
        }
    }

    #[test]
    fn informational_redirect_client_and_server_errors_are_non_2xx() {
        for code in [
            101, 199, 300, 301, 302, 303, 307, 308, 400, 404, 429, 500, 503, 599,
        ] {
            assert_eq!(
                outcome(code),
                KickOutcome::Failed(KickDetail::Non2xx),
                "status {code}"
            );
        }
    }
}
