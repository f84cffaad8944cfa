#![doc = include_str!("../README.md")]

pub mod buckets;
mod observer;
mod store;

pub use observer::MetricsObserver;
pub use store::MeteredStore;

/// Counter: claims by `result` (`ok`, `invalid_params`, `throttled`, `unavailable`, `superseded`).
pub const CLAIMS_TOTAL: &str = "unique_claims_total";
/// Counter: claims answered by the replay short-circuit (a retry of a claim that already won).
pub const CLAIM_REPLAYS_TOTAL: &str = "unique_claim_replays_total";
/// Histogram: store attempts per claim (1 unless the claim lost a race).
pub const CLAIM_ATTEMPTS: &str = "unique_claim_attempts";
/// Histogram: wall time of a claim in seconds, kick included.
pub const CLAIM_DURATION_SECONDS: &str = "unique_claim_duration_seconds";
/// Counter: kick decisions by `detail` (`confirmed` or a kick detail).
pub const KICKS_TOTAL: &str = "unique_kicks_total";
/// Counter: claims the Arbiter shed by `reason` (`queue-full`, `deadline`).
pub const CLAIMS_SHED_TOTAL: &str = "unique_claims_shed_total";
/// Counter: releases by `released` (`true`, `false`).
pub const RELEASES_TOTAL: &str = "unique_releases_total";
/// Histogram: store operation time in seconds by `operation`.
pub const STORE_OPERATION_DURATION_SECONDS: &str = "unique_store_operation_duration_seconds";
/// Counter: store errors by `operation` and `kind`.
pub const STORE_ERRORS_TOTAL: &str = "unique_store_errors_total";
/// Counter: fenced claim writes that lost the race to another write.
pub const STORE_LOST_RACES_TOTAL: &str = "unique_store_lost_races_total";
/// Gauge: records holding a session across the whole store, counted by the server every
/// `--sessions-count-interval` (`Store::count_online`); absent on a store that cannot count.
pub const SESSIONS_ONLINE: &str = "unique_sessions_online";
/// Counter: lease grants that took a room over from another node whose holding had expired
/// (`RoomDecision::taken_over_from` in `unique-lease`); absent where the lease backend
/// cannot tell (DynamoDB).
pub const LEASE_TAKEOVERS_TOTAL: &str = "unique_lease_takeovers_total";
