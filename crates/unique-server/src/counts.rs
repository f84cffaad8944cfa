//! The deployment-wide series the server reads from its store rather than from its own
//! requests: `unique_sessions_online` (the store's count of records holding a session, every
//! `--sessions-count-interval`) and `unique_lease_takeovers_total` (lease grants over another
//! node's expired holding, decided in the lease directory's atomic step).

use std::time::Duration;

use metrics::{Counter, Unit};
use unique_core::{Arbiter, Store, async_trait};
use unique_lease::{LeaseError, LeaseRows, NodeDecision, NodeOp, RoomDecision, RoomOp, Swept};

use crate::args::Args;

/// A lease directory's rows, counting takeovers as the rules decide them; every method is
/// the wrapped directory's, called once.
pub(crate) struct CountedTakeovers<D> {
    inner: D,
    takeovers: Counter,
}

impl<D> CountedTakeovers<D> {
    /// Wraps `inner`, registering the counter (at 0) with the recorder in force.
    pub(crate) fn new(inner: D) -> Self {
        metrics::describe_counter!(
            unique_metrics::LEASE_TAKEOVERS_TOTAL,
            Unit::Count,
            "Lease grants that took a room over from another node whose holding had expired."
        );
        Self {
            inner,
            takeovers: metrics::counter!(unique_metrics::LEASE_TAKEOVERS_TOTAL),
        }
    }
}

#[async_trait]
impl<D: LeaseRows> LeaseRows for CountedTakeovers<D> {
    async fn room(
        &self,
        room_id: &str,
        op: RoomOp,
    ) -> Result<(RoomDecision, Option<u64>), LeaseError> {
        let decided = self.inner.room(room_id, op).await?;
        // Counted once the grant is written: an error above wrote nothing.
        if decided.0.taken_over_from().is_some() {
            self.takeovers.increment(1);
        }
        Ok(decided)
    }

    async fn node(&self, node_id: &str, op: NodeOp) -> Result<NodeDecision, LeaseError> {
        self.inner.node(node_id, op).await
    }

    async fn sweep(&self, grace_ms: u64, limit: usize) -> Result<Swept, LeaseError> {
        self.inner.sweep(grace_ms, limit).await
    }

    fn max_id_len(&self) -> usize {
        self.inner.max_id_len()
    }
}

/// The running count of sessions online; dropping it stops it.
pub(crate) struct SessionCounter(tokio::task::JoinHandle<()>);

impl Drop for SessionCounter {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// With metrics on (the count feeds the gauge and nothing else), counts the sessions of the
/// arbiter's store every `--sessions-count-interval`.
pub(crate) fn count_sessions<S: Store>(
    arbiter: &Arbiter<S>,
    metrics: bool,
    args: &Args,
) -> Option<SessionCounter> {
    if !metrics {
        return None;
    }
    let arbiter = arbiter.clone();
    let count = move || {
        let arbiter = arbiter.clone();
        async move { arbiter.store().count_online().await }
    };
    spawn_session_count(count, *args.sessions_count_interval, args.store_name())
}

/// Counts the store's sessions at once and then every `interval` (zero: never), setting
/// `unique_sessions_online`. A store that cannot count (`Ok(None)`) is asked once: the gauge
/// stays absent and the log says why. A failed count keeps the last value and logs a warning.
fn spawn_session_count<C, F>(
    count: C,
    interval: Duration,
    store_name: &'static str,
) -> Option<SessionCounter>
where
    C: Fn() -> F + Send + 'static,
    F: Future<Output = Result<Option<u64>, unique_core::Error>> + Send,
{
    if interval.is_zero() {
        tracing::info!("sessions online not counted (--sessions-count-interval 0s)");
        return None;
    }
    Some(SessionCounter(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut gauge = None;
        loop {
            ticks.tick().await;
            match count().await {
                Ok(Some(online)) => {
                    let gauge = gauge.get_or_insert_with(|| {
                        metrics::describe_gauge!(
                            unique_metrics::SESSIONS_ONLINE,
                            Unit::Count,
                            "Records holding a session across the whole store, counted every \
                             --sessions-count-interval."
                        );
                        metrics::gauge!(unique_metrics::SESSIONS_ONLINE)
                    });
                    #[allow(clippy::cast_precision_loss)] // exact below 2^53 sessions
                    gauge.set(online as f64);
                }
                Ok(None) => {
                    tracing::info!(
                        store = store_name,
                        "sessions online not counted: the {store_name} store has no cheap count"
                    );
                    return;
                }
                Err(e) => tracing::warn!(
                    "counting the sessions online failed ({e}); the next count in {}",
                    humantime::format_duration(interval)
                ),
            }
        }
    })))
}
