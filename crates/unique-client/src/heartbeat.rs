//! Self-eviction: a session watches the store and leaves when it no longer holds its key.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};
use unique_core::{EvictReason, Key, decide_evict};

use crate::jitter::Jitter;
use crate::transport::Transport;

const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Heartbeat timing. Defaults: every 5 s, each wait jittered down to as little as 80 % of
/// it ([`Jitter::spread`]`(0.2)`), so many sessions do not beat in lockstep and no wait
/// exceeds the interval (the overlap bound of I5b counts one interval).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HeartbeatOptions {
    /// Nominal time between two checks; also the bound on one `current` call. At least
    /// 1 ms is used.
    pub interval: Duration,
    /// How the interval becomes each wait.
    pub jitter: Jitter,
}

impl Default for HeartbeatOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
            jitter: Jitter::spread(0.2),
        }
    }
}

impl HeartbeatOptions {
    /// Sets [`interval`](Self::interval).
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Sets [`jitter`](Self::jitter).
    #[must_use]
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }
}

/// Why a heartbeat ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeartbeatExit {
    /// The store says the session must go; `on_evict` was called with this reason.
    /// Never [`EvictReason::None`].
    Evicted(EvictReason),
    /// It was stopped (stop future, [`HeartbeatHandle::stop`], or the handle dropped).
    Stopped,
}

/// Watches one session: every interval it reads [`Transport::current`] and decides with
/// [`decide_evict`]. On the first eviction reason it calls `on_evict(reason)` exactly once
/// and ends.
///
/// A transport or server error never evicts (I6): the heartbeat logs it and tries again
/// next interval, so a store outage cannot log everyone out. A `current` call slower than
/// one interval counts as such an error.
#[derive(Debug, Clone)]
pub struct Heartbeat<T> {
    transport: T,
    options: HeartbeatOptions,
}

impl<T: Transport> Heartbeat<T> {
    /// A heartbeat with the default [`HeartbeatOptions`].
    pub fn new(transport: T) -> Self {
        Self::with_options(transport, HeartbeatOptions::default())
    }

    /// A heartbeat with the given timing.
    pub fn with_options(transport: T, options: HeartbeatOptions) -> Self {
        Self { transport, options }
    }

    /// Its timing.
    pub fn options(&self) -> &HeartbeatOptions {
        &self.options
    }

    /// Watches the session `generation` of `key` until it is evicted or `stop` completes.
    ///
    /// The first check happens one (jittered) interval after the call: the session was
    /// just claimed. `stop` is polled first at every step, so once it has completed no
    /// further `current` call starts and `on_evict` is not called.
    pub async fn run<F, S>(&self, key: &Key, generation: i64, on_evict: F, stop: S) -> HeartbeatExit
    where
        F: FnOnce(EvictReason),
        S: Future<Output = ()>,
    {
        let mut stop = pin!(stop);
        // A zero interval would turn the heartbeat into a busy loop against the server.
        let interval = self.options.interval.max(MIN_INTERVAL);
        loop {
            let wait = self.options.jitter.apply(interval);
            tokio::select! {
                biased;
                () = &mut stop => return HeartbeatExit::Stopped,
                () = sleep(wait) => {}
            }
            let call = timeout(interval, self.transport.current(key));
            let view = tokio::select! {
                biased;
                () = &mut stop => return HeartbeatExit::Stopped,
                view = call => view,
            };
            match view {
                Ok(Ok(view)) => {
                    let reason = decide_evict(generation, &view);
                    if reason != EvictReason::None {
                        tracing::info!(%key, generation, %reason, "session evicted by heartbeat");
                        on_evict(reason);
                        return HeartbeatExit::Evicted(reason);
                    }
                }
                Ok(Err(error)) => {
                    tracing::warn!(%key, generation, %error, "heartbeat check failed, keeping the session");
                }
                Err(_) => {
                    tracing::warn!(%key, generation, "heartbeat check timed out, keeping the session");
                }
            }
        }
    }
}

impl<T: Transport + Clone> Heartbeat<T> {
    /// Runs [`run`](Self::run) on a new tokio task and returns its handle.
    ///
    /// Dropping the handle stops the heartbeat (so a forgotten session is not watched
    /// forever); keep it for as long as the session lives.
    pub fn spawn<F>(&self, key: Key, generation: i64, on_evict: F) -> HeartbeatHandle
    where
        F: FnOnce(EvictReason) + Send + 'static,
    {
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let this = self.clone();
        let task = tokio::spawn(async move {
            // Either a stop signal or a dropped sender ends the heartbeat.
            let stop = async move {
                let _ = stop_rx.await;
            };
            this.run(&key, generation, on_evict, stop).await
        });
        HeartbeatHandle {
            stop: Some(stop_tx),
            task,
        }
    }
}

/// Controls a heartbeat started with [`Heartbeat::spawn`].
#[derive(Debug)]
pub struct HeartbeatHandle {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<HeartbeatExit>,
}

impl HeartbeatHandle {
    /// Stops the heartbeat and waits until it has ended. Returns `Evicted` if it had
    /// already evicted (its `on_evict` then ran), else `Stopped`; after this returns,
    /// `on_evict` is never called.
    pub async fn stop(mut self) -> HeartbeatExit {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        join(&mut self.task).await
    }

    /// Waits until the heartbeat ends by itself, i.e. until the session is evicted.
    pub async fn join(mut self) -> HeartbeatExit {
        join(&mut self.task).await
    }

    /// The heartbeat has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

/// Awaits the task, re-raising a panic from `on_evict` in the caller.
async fn join(task: &mut JoinHandle<HeartbeatExit>) -> HeartbeatExit {
    match task.await {
        Ok(exit) => exit,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only a runtime shutting down cancels the task: nothing runs any more.
        Err(_) => HeartbeatExit::Stopped,
    }
}
