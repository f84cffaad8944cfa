//! Caller-authentication and release-reason metrics, through the `metrics` facade (a no-op without a recorder).

use std::sync::OnceLock;

use metrics::Counter;
use unique_core::{PoolPolicy, ReleaseReason};

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

/// Counter: releases that named a known reason (`POST /v1/release` with `reason`), by
/// `reason` (`node-draining`: a node draining for a deploy) and `released` (`true`: the
/// session was tombstoned; `false`: a newer gen held the key, say a takeover that raced the
/// drain). A release without a reason, or with one this server does not know, is not counted
/// here; every release is in `unique_releases_total{released}`.
pub const RELEASES_BY_REASON_TOTAL: &str = "unique_releases_by_reason_total";

/// Registers every `reason` × `released` series with the recorder in force, so each reads 0
/// before the first drain.
pub(crate) fn register_release_reasons() {
    metrics::describe_counter!(
        RELEASES_BY_REASON_TOTAL,
        "Releases that named a reason (node-draining), by reason and whether they released"
    );
    for reason in ReleaseReason::ALL {
        for released in [true, false] {
            // Registering is enough: the recorder keeps the series.
            let _ = release_reason_counter(reason, released);
        }
    }
}

/// Pooled claims that evicted the oldest login, by `policy` (`evict-oldest`, the one policy
/// that evicts): `docs/design.md#pooled-sessions`.
pub const POOL_EVICTIONS_TOTAL: &str = "unique_pool_evictions_total";

/// Registers the eviction series with the recorder in force, so it reads 0 before the first.
pub(crate) fn register_pool_evictions() {
    metrics::describe_counter!(
        POOL_EVICTIONS_TOTAL,
        "Pooled claims that evicted the user's oldest login to take its place, by policy"
    );
    let _ = pool_eviction_counter();
}

/// Counts one eviction.
pub(crate) fn count_pool_eviction() {
    pool_eviction_counter().increment(1);
}

/// Looked up at each call, as the release reasons are.
fn pool_eviction_counter() -> Counter {
    metrics::counter!(POOL_EVICTIONS_TOTAL, "policy" => PoolPolicy::EvictOldest.as_str())
}

/// Counts one release that named `reason`.
pub(crate) fn count_release(reason: ReleaseReason, released: bool) {
    release_reason_counter(reason, released).increment(1);
}

/// Looked up at each call rather than cached: drains are rare, and the handle then follows
/// whichever recorder is in force (one installed after the service was built included).
fn release_reason_counter(reason: ReleaseReason, released: bool) -> Counter {
    let released = if released { "true" } else { "false" };
    metrics::counter!(RELEASES_BY_REASON_TOTAL, "reason" => reason.as_str(), "released" => released)
}
