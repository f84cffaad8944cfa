//! The lease sweeper (D12): every `--lease-sweep-interval`, one pass over the lease
//! directory's rows and registrations in short batches, deleting those expired for longer
//! than `--lease-sweep-grace` (the rules decide, `unique_lease::LeaseRow::sweepable`).

use std::sync::Arc;
use std::time::Duration;

use unique_lease::{LeaseRows, sweep_pass};

/// The running sweeper; dropping it stops it.
pub(crate) struct Sweeper(tokio::task::JoinHandle<()>);

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts sweeping `rows` every `interval` (a zero interval: never) with `grace`.
pub(crate) fn spawn(
    rows: Arc<dyn LeaseRows>,
    grace: Duration,
    interval: Duration,
) -> Option<Sweeper> {
    if interval.is_zero() {
        tracing::info!("lease sweep off (--lease-sweep-interval 0s)");
        return None;
    }
    tracing::info!(
        grace = %humantime::format_duration(grace),
        interval = %humantime::format_duration(interval),
        "lease sweep on"
    );
    Some(Sweeper(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is at once: the first pass waits one interval.
        ticks.tick().await;
        loop {
            ticks.tick().await;
            match sweep_pass(&*rows, grace).await {
                Ok(swept) if swept.rooms + swept.nodes > 0 => tracing::info!(
                    rooms = swept.rooms,
                    nodes = swept.nodes,
                    kept_rooms = swept.kept_rooms,
                    kept_nodes = swept.kept_nodes,
                    "lease sweep deleted expired rows"
                ),
                Ok(swept) => tracing::debug!(
                    kept_rooms = swept.kept_rooms,
                    kept_nodes = swept.kept_nodes,
                    "lease sweep: nothing to delete"
                ),
                Err(e) => tracing::warn!(
                    "lease sweep failed ({e}); the next pass in {}",
                    humantime::format_duration(interval)
                ),
            }
        }
    })))
}
