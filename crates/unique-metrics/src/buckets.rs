//! Histogram buckets suited to each histogram, for exporters that need them (Prometheus
//! histograms); upper bounds in the metric's unit, ascending.

/// [`CLAIM_DURATION_SECONDS`](crate::CLAIM_DURATION_SECONDS): a claim takes about a
/// millisecond on a fast store, tens of milliseconds on a durable one, and up to the kick
/// timeout (3 s by default) when an old session's node does not answer.
pub const CLAIM_DURATION_SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// [`STORE_OPERATION_DURATION_SECONDS`](crate::STORE_OPERATION_DURATION_SECONDS): from tens of
/// microseconds (memory) through milliseconds (DynamoDB) to 100 ms and more (a durable
/// write waiting for the disk).
pub const STORE_OPERATION_DURATION_SECONDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5,
];

/// [`CLAIM_ATTEMPTS`](crate::CLAIM_ATTEMPTS): 1 without contention; more only after lost
/// races, up to the attempt budget (3 by default).
pub const CLAIM_ATTEMPTS: &[f64] = &[1.0, 2.0, 3.0, 5.0, 10.0];
