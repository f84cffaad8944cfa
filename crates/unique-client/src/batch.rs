//! The heartbeat's batcher: checks that fall due close together share one
//! [`Transport::current_batch`] call.
//!
//! A check joins the open batch. The first check of a batch starts a timer task; when the
//! window ends the timer sends whatever joined. A batch that reaches `MAX_BATCH_KEYS` keys
//! is sent at once and the next check opens a new one (the timer of the sent batch then
//! finds its round over and does nothing). Each batch is sent from its own task and answers
//! every waiting check through its own channel, so a check that is stopped (its future
//! dropped) never holds up the others.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use unique_core::{CurrentView, Error, Key, MAX_BATCH_KEYS};

use crate::transport::Transport;

type Answer = Result<CurrentView, Error>;

pub(crate) struct Batcher<T> {
    transport: T,
    window: Duration,
    open: Mutex<Open>,
}

/// The batch being filled.
#[derive(Default)]
struct Open {
    /// Counts batches sent, so a timer knows whether its batch is still the open one.
    round: u64,
    checks: Vec<(Key, oneshot::Sender<Answer>)>,
}

impl<T: Transport> Batcher<T> {
    pub(crate) fn new(transport: T, window: Duration) -> Arc<Self> {
        Arc::new(Self {
            transport,
            window,
            open: Mutex::new(Open::default()),
        })
    }

    /// How long the first check of a batch waits for others.
    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    /// The current view of `key`, read in a batch with the checks due around the same time.
    pub(crate) async fn current(self: &Arc<Self>, key: &Key) -> Answer {
        let (answer, answered) = oneshot::channel();
        let full = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            open.checks.push((key.clone(), answer));
            if open.checks.len() >= MAX_BATCH_KEYS {
                open.round += 1;
                Some(std::mem::take(&mut open.checks))
            } else {
                if open.checks.len() == 1 {
                    let (this, round) = (Arc::clone(self), open.round);
                    tokio::spawn(async move { this.flush_after_window(round).await });
                }
                None
            }
        };
        if let Some(checks) = full {
            let this = Arc::clone(self);
            tokio::spawn(async move { this.send(checks).await });
        }
        answered
            .await
            .unwrap_or_else(|_| Err(Error::unavailable("heartbeat batch was dropped")))
    }

    async fn flush_after_window(&self, round: u64) {
        tokio::time::sleep(self.window).await;
        let checks = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            if open.round != round || open.checks.is_empty() {
                return;
            }
            open.round += 1;
            std::mem::take(&mut open.checks)
        };
        self.send(checks).await;
    }

    async fn send(&self, checks: Vec<(Key, oneshot::Sender<Answer>)>) {
        let (keys, answers): (Vec<Key>, Vec<_>) = checks.into_iter().unzip();
        let views = match self.transport.current_batch(&keys).await {
            Ok(views) if views.len() == keys.len() => views,
            Ok(views) => {
                let reason = format!("{} views for {} keys", views.len(), keys.len());
                keys.iter()
                    .map(|_| Err(Error::unavailable(&reason)))
                    .collect()
            }
            Err(e) => keys.iter().map(|_| Err(copy(&e))).collect(),
        };
        for (answer, view) in answers.into_iter().zip(views) {
            // A check stopped meanwhile has dropped its receiver: nothing to tell it.
            let _ = answer.send(view);
        }
    }
}

/// The same error for each check of a failed batch (`Error` is not `Clone`: it may carry a
/// source). Kinds and messages are kept; sources are left out.
fn copy(e: &Error) -> Error {
    match e {
        Error::InvalidParams(reason) => Error::invalid(reason.clone()),
        Error::Throttled => Error::Throttled,
        Error::Unavailable { reason, .. } => Error::unavailable(reason.clone()),
        Error::Unauthenticated(reason) => Error::Unauthenticated(reason.clone()),
        Error::Forbidden(reason) => Error::Forbidden(reason.clone()),
        other => Error::unavailable(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use unique_core::Owner;

    use super::*;
    use unique_core::{ClaimInput, ClaimOutcome};

    /// Answers every key as online at gen = uid; counts calls and keys per call.
    #[derive(Default)]
    struct Counting {
        batches: Mutex<Vec<usize>>,
        fail: bool,
        singles: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Transport for Counting {
        async fn claim(&self, _: &ClaimInput) -> Result<ClaimOutcome, Error> {
            unreachable!("heartbeats never claim")
        }
        async fn current(&self, _: &Key) -> Result<CurrentView, Error> {
            self.singles.fetch_add(1, Ordering::SeqCst);
            unreachable!("batched heartbeats read through current_batch")
        }
        async fn release(&self, _: &Key, _: i64) -> Result<bool, Error> {
            unreachable!("heartbeats never release")
        }
        async fn current_batch(&self, keys: &[Key]) -> Result<Vec<Answer>, Error> {
            self.batches.lock().unwrap().push(keys.len());
            if self.fail {
                return Err(Error::Throttled);
            }
            Ok(keys
                .iter()
                .map(|k| {
                    Ok(CurrentView {
                        generation: k.uid,
                        owner: Some(Owner::new("", "", "http://h/k")),
                        exists: true,
                    })
                })
                .collect())
        }
    }

    fn key(uid: i64) -> Key {
        Key::new("p", "e", uid)
    }

    #[tokio::test(start_paused = true)]
    async fn checks_within_the_window_share_a_call_and_each_gets_its_own_view() {
        let batcher = Batcher::new(Counting::default(), Duration::from_millis(50));
        let checks = (1..=250).map(|uid| {
            let batcher = Arc::clone(&batcher);
            async move { batcher.current(&key(uid)).await.unwrap().generation }
        });
        let generations = futures::future::join_all(checks).await;
        assert_eq!(generations, (1..=250).collect::<Vec<_>>());
        // Two full batches sent at once, the rest when the window ended.
        assert_eq!(*batcher.transport.batches.lock().unwrap(), [100, 100, 50]);
        assert_eq!(batcher.transport.singles.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn checks_further_apart_than_the_window_go_separately() {
        let batcher = Batcher::new(Counting::default(), Duration::from_millis(50));
        batcher.current(&key(1)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        batcher.current(&key(2)).await.unwrap();
        assert_eq!(*batcher.transport.batches.lock().unwrap(), [1, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_batch_fails_every_check_with_its_kind() {
        let failing = Counting {
            fail: true,
            ..Counting::default()
        };
        let batcher = Batcher::new(failing, Duration::from_millis(10));
        let (one, two) = (key(1), key(2));
        let (a, b) = tokio::join!(batcher.current(&one), batcher.current(&two));
        assert!(a.unwrap_err().is_throttled());
        assert!(b.unwrap_err().is_throttled());
        assert_eq!(*batcher.transport.batches.lock().unwrap(), [2]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_check_does_not_hold_up_the_others() {
        let batcher = Batcher::new(Counting::default(), Duration::from_millis(10));
        let stopped = tokio::spawn({
            let batcher = Arc::clone(&batcher);
            async move { batcher.current(&key(1)).await }
        });
        tokio::task::yield_now().await;
        stopped.abort();
        assert_eq!(batcher.current(&key(2)).await.unwrap().generation, 2);
    }
}
