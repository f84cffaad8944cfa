//! Kick-signature metrics, through the `metrics` facade (a no-op without a recorder).

use std::sync::OnceLock;

use metrics::Counter;
use unique_kick_signature::Rejection;

/// Counter: kicks refused (401) because their signature did not verify, by `reason`
/// (`missing`, `malformed`, `stale`, `future`, `bad-signature`).
pub const KICK_SIGNATURE_REJECTIONS_TOTAL: &str = "unique_kick_signature_rejections_total";

const REJECTIONS: [Rejection; 5] = [
    Rejection::Missing,
    Rejection::Malformed,
    Rejection::Stale,
    Rejection::Future,
    Rejection::BadSignature,
];

/// Counts one refused kick.
pub(crate) fn count(rejection: Rejection) {
    match REJECTIONS.iter().position(|r| *r == rejection) {
        Some(index) => rejections()[index].increment(1),
        // A reason added after this list was written: registered on sight.
        None => metrics::counter!(KICK_SIGNATURE_REJECTIONS_TOTAL, "reason" => rejection.as_str())
            .increment(1),
    }
}

/// The handles, registered with the recorder in force on first use: the service touches them
/// when it is given signing keys, so every reason reads 0 from then on.
pub(crate) fn rejections() -> &'static [Counter; 5] {
    static HANDLES: OnceLock<[Counter; 5]> = OnceLock::new();
    HANDLES.get_or_init(|| {
        metrics::describe_counter!(
            KICK_SIGNATURE_REJECTIONS_TOTAL,
            "Kicks refused because their signature did not verify, by reason"
        );
        REJECTIONS.map(|rejection| {
            metrics::counter!(KICK_SIGNATURE_REJECTIONS_TOTAL, "reason" => rejection.as_str())
        })
    })
}
