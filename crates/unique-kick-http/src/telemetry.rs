//! The kicker's own metrics, through the `metrics` facade (a no-op without a recorder).
//! How kicks end is the `Observer`'s business (`unique-metrics` counts
//! `unique_kicks_total{detail}`); this counts only what the kicker alone knows.

use metrics::Counter;

/// Counter: kicks not attempted because of one of the kicker's own bounds, by
/// `reason` (`max-kicks-in-flight`: the kicks already in flight reached
/// [`max_kicks_in_flight`](crate::HttpKickerBuilder::max_kicks_in_flight)). Each is
/// also a `connect-error` to the arbiter, so it is in `unique_kicks_total` too.
pub const KICKS_SHED_TOTAL: &str = "unique_kicks_shed_total";

/// The `reason` of a kick shed by the in-flight cap.
const MAX_KICKS_IN_FLIGHT: &str = "max-kicks-in-flight";

/// The handles of one kicker, registered when it is built.
#[derive(Debug)]
pub(crate) struct KickerMetrics {
    shed_in_flight: Counter,
}

impl KickerMetrics {
    /// Describes the metric and registers the handle with the current recorder, so
    /// the count reads 0 until a kick is shed.
    pub(crate) fn new() -> Self {
        metrics::describe_counter!(
            KICKS_SHED_TOTAL,
            "Kicks not attempted (connect-error at once) because of a kicker bound, by reason"
        );
        Self {
            shed_in_flight: metrics::counter!(KICKS_SHED_TOTAL, "reason" => MAX_KICKS_IN_FLIGHT),
        }
    }

    /// Counts a kick shed by the in-flight cap.
    pub(crate) fn shed_in_flight(&self) {
        self.shed_in_flight.increment(1);
    }
}
