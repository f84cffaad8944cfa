//! The accept loop's metrics, through the `metrics` facade (a no-op without a recorder).

use metrics::{Counter, Gauge};

use crate::limit::Refused;

/// Gauge: connections admitted and not yet closed.
pub const CONNECTIONS_OPEN: &str = "unique_http_connections_open";
/// Counter: connections closed at accept by a cap, by `reason`.
pub const CONNECTIONS_REFUSED_TOTAL: &str = "unique_http_connections_refused_total";
/// Gauge: requests handed to the service and not yet answered.
pub const REQUESTS_IN_FLIGHT: &str = "unique_http_requests_in_flight";

/// The handles of one [`serve`](crate::serve) call, registered when it starts.
#[derive(Debug, Clone)]
pub(crate) struct ServeMetrics {
    pub(crate) open: Gauge,
    /// Indexed by [`Refused`].
    refused: [Counter; 2],
    pub(crate) in_flight: Gauge,
}

impl ServeMetrics {
    /// Describes the metrics and registers the handles with the current recorder.
    pub(crate) fn new() -> Self {
        metrics::describe_gauge!(CONNECTIONS_OPEN, "Open HTTP connections");
        metrics::describe_counter!(
            CONNECTIONS_REFUSED_TOTAL,
            "Connections closed as soon as accepted, by the cap they exceeded"
        );
        metrics::describe_gauge!(
            REQUESTS_IN_FLIGHT,
            "HTTP requests being answered (body read, service called, not yet answered)"
        );
        Self {
            open: metrics::gauge!(CONNECTIONS_OPEN),
            refused: [Refused::Total, Refused::PerIp]
                .map(|cap| metrics::counter!(CONNECTIONS_REFUSED_TOTAL, "reason" => cap.as_str())),
            in_flight: metrics::gauge!(REQUESTS_IN_FLIGHT),
        }
    }

    /// Counts a connection refused by `cap`.
    pub(crate) fn refused(&self, cap: Refused) {
        self.refused[cap as usize].increment(1);
    }
}

/// One request in flight: counted while it lives, so a request dropped unanswered (its
/// connection closed, the drain ran out) leaves the gauge as well.
#[derive(Debug)]
pub(crate) struct InFlight(Gauge);

impl InFlight {
    pub(crate) fn start(gauge: &Gauge) -> Self {
        gauge.increment(1);
        Self(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1);
    }
}
