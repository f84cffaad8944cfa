//! Self-eviction: a session watches the store and leaves when it no longer holds its key.

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};
use unique_core::{EvictReason, Key, Owner, decide_evict};

use crate::batch::Batcher;
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
    /// How long a due check waits for other sessions' checks to share one
    /// [`Transport::current_batch`] call (default 250 ms; at most a twentieth of the
    /// interval is used). A batch is sent as soon as it holds
    /// [`MAX_BATCH_KEYS`](unique_core::MAX_BATCH_KEYS) keys. The wait before each check is
    /// shortened by as much, so checks still come at most one interval apart. Zero sends each
    /// check at once (batching only checks that are due at the same moment).
    pub batch_window: Duration,
}

impl Default for HeartbeatOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
            jitter: Jitter::spread(0.2),
            batch_window: Duration::from_millis(250),
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

    /// Sets [`batch_window`](Self::batch_window).
    #[must_use]
    pub fn batch_window(mut self, window: Duration) -> Self {
        self.batch_window = window;
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

/// Watches sessions: every interval each reads its key's current record and decides with
/// [`decide_evict`] whether the record still holds this session — its gen *and* the owner
/// it was claimed for (after a gen rollback a new login can get the same gen, and only the
/// owner then tells it apart: [`EvictReason::OwnerChanged`]). On the first eviction reason it
/// calls `on_evict(reason)` exactly once and ends.
///
/// A transport or server error never evicts (I6): the heartbeat logs it and tries again
/// next interval, so a store outage cannot log everyone out. A check slower than one
/// interval counts as such an error.
///
/// # Batching
///
/// One `Heartbeat` (and its clones) watches any number of sessions, and batches their
/// checks by itself: each session keeps its own jittered schedule, and the checks that
/// fall due within [`batch_window`](HeartbeatOptions::batch_window) of each other go out
/// as one [`Transport::current_batch`] call of up to
/// [`MAX_BATCH_KEYS`](unique_core::MAX_BATCH_KEYS) keys (over HTTP, one request). A node
/// with 10 000 sessions at the default 5 s interval sends about 2 000 / 100 = 20 requests
/// a second instead of 2 000. Create one `Heartbeat` per node and [`spawn`](Self::spawn)
/// every session from it (or its clones); separate `Heartbeat`s do not batch together.
/// Batches are sent from their own tasks, so stopping one session never holds up the
/// others' checks.
pub struct Heartbeat<T> {
    batcher: Arc<Batcher<T>>,
    options: HeartbeatOptions,
}

impl<T> Clone for Heartbeat<T> {
    fn clone(&self) -> Self {
        Self {
            batcher: Arc::clone(&self.batcher),
            options: self.options.clone(),
        }
    }
}

impl<T> fmt::Debug for Heartbeat<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Heartbeat")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Heartbeat<T> {
    /// A heartbeat with the default [`HeartbeatOptions`].
    pub fn new(transport: T) -> Self {
        Self::with_options(transport, HeartbeatOptions::default())
    }

    /// A heartbeat with the given timing.
    pub fn with_options(transport: T, options: HeartbeatOptions) -> Self {
        let interval = options.interval.max(MIN_INTERVAL);
        // A window longer than a small part of the interval would delay checks noticeably.
        let window = options.batch_window.min(interval / 20);
        Self {
            batcher: Batcher::new(transport, window),
            options,
        }
    }

    /// Its timing.
    pub fn options(&self) -> &HeartbeatOptions {
        &self.options
    }

    /// Watches the session `generation` of `key`, claimed for `owner` (the owner its login
    /// sent), until it is evicted or `stop` completes.
    ///
    /// The first check happens one (jittered) interval after the call: the session was
    /// just claimed. `stop` is polled first at every step, so once it has completed no
    /// further `current` call starts and `on_evict` is not called.
    pub async fn run<F, S>(
        &self,
        key: &Key,
        generation: i64,
        owner: &Owner,
        on_evict: F,
        stop: S,
    ) -> HeartbeatExit
    where
        F: FnOnce(EvictReason),
        S: Future<Output = ()>,
    {
        let mut stop = pin!(stop);
        // A zero interval would turn the heartbeat into a busy loop against the server.
        let interval = self.options.interval.max(MIN_INTERVAL);
        let window = self.batcher.window();
        loop {
            // The batch window is taken off the wait, so a check still goes out at most
            // one interval after the last (the overlap bound of I5b counts one interval).
            let wait = self.options.jitter.apply(interval).saturating_sub(window);
            tokio::select! {
                biased;
                () = &mut stop => return HeartbeatExit::Stopped,
                () = sleep(wait) => {}
            }
            let call = timeout(interval, self.batcher.current(key));
            let view = tokio::select! {
                biased;
                () = &mut stop => return HeartbeatExit::Stopped,
                view = call => view,
            };
            match view {
                Ok(Ok(view)) => {
                    let reason = decide_evict(generation, owner, &view);
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

impl<T: Transport> Heartbeat<T> {
    /// Runs [`run`](Self::run) on a new tokio task and returns its handle.
    ///
    /// Dropping the handle stops the heartbeat (so a forgotten session is not watched
    /// forever); keep it for as long as the session lives.
    pub fn spawn<F>(&self, key: Key, generation: i64, owner: Owner, on_evict: F) -> HeartbeatHandle
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
            this.run(&key, generation, &owner, on_evict, stop).await
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
