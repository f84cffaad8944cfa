//! Caller-authentication metrics, through the `metrics` facade (a no-op without a recorder).

use std::sync::OnceLock;

use metrics::Counter;

use crate::auth::Unauthenticated;

/// Counter: `/v1/*` requests refused by caller authentication, by `reason` (`missing`,
/// `malformed`, `unknown`: 401; `forbidden`: 403).
pub const AUTH_REJECTIONS_TOTAL: &str = "unique_auth_rejections_total";

/// Why a request was refused, as the `reason` label.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Refusal {
    Unauthenticated(Unauthenticated),
    Forbidden,
}

impl Refusal {
    const REASONS: [&'static str; 4] = ["missing", "malformed", "unknown", "forbidden"];

    fn index(self) -> usize {
        match self {
            Self::Unauthenticated(Unauthenticated::Missing) => 0,
            Self::Unauthenticated(Unauthenticated::Malformed) => 1,
            Self::Unauthenticated(Unauthenticated::Unknown) => 2,
            Self::Forbidden => 3,
        }
    }
}

/// Counts one refused request.
pub(crate) fn count(refusal: Refusal) {
    rejections()[refusal.index()].increment(1);
}

/// The handles, registered with the recorder in force on first use: the service touches them
/// when tokens are configured, so every reason reads 0 from then on.
pub(crate) fn rejections() -> &'static [Counter; 4] {
    static HANDLES: OnceLock<[Counter; 4]> = OnceLock::new();
    HANDLES.get_or_init(|| {
        metrics::describe_counter!(
            AUTH_REJECTIONS_TOTAL,
            "Requests refused by caller authentication, by reason"
        );
        Refusal::REASONS.map(|reason| metrics::counter!(AUTH_REJECTIONS_TOTAL, "reason" => reason))
    })
}
