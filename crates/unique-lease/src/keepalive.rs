//! [`KeepAlive`]: renews a held lease in the background and reports when it is lost.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::directory::Directory;
use crate::error::LeaseError;
use crate::time::{Clock, DEFAULT_TTL, SystemClock};
use crate::types::Lease;

/// How often a [`KeepAlive`] renews, as a fraction of the ttl: a third leaves two
/// more attempts before the lease runs out when one renewal is lost.
const RENEWALS_PER_TTL: u32 = 3;

/// After a failed renewal the next attempt comes sooner: a tenth of the ttl.
const RETRIES_PER_TTL: u32 = 10;

/// What a [`KeepAlive`] knows about its lease, published through a
/// [`watch`] channel ([`KeepAlive::subscribe`]).
#[derive(Debug, Clone)]
pub enum LeaseState {
    /// The lease is held: `lease` is the latest renewal (same token and epoch as the
    /// lease the keep-alive started with, a later `expires_at`).
    Held {
        /// The lease as last renewed.
        lease: Lease,
        /// The error of the last renewal attempt when it failed; `None` after a
        /// success. The lease still holds until `lease.expires_at`, but a holder
        /// that must not overrun it can stop early on this warning.
        renewal_error: Option<Arc<LeaseError>>,
    },
    /// The lease is gone; the keep-alive has stopped and will not publish again.
    Lost(LeaseLost),
}

impl LeaseState {
    /// The held lease, or `None` once it is lost.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Self::Held { lease, .. } => Some(lease),
            Self::Lost(_) => None,
        }
    }

    /// Whether the lease is lost.
    pub fn is_lost(&self) -> bool {
        matches!(self, Self::Lost(_))
    }
}

/// Why a [`KeepAlive`] lost its lease.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LeaseLost {
    /// Another node holds the room now (its lease is `by`): ours had expired from
    /// that node's point of view, and it took the room over with a higher epoch.
    TakenOver {
        /// The new holder's lease.
        by: Lease,
    },
    /// The lease ran out although no renewal failed: the renewal task did not get
    /// to run in time (a stalled runtime, a clock jump), or the directory no longer
    /// had the holding. The directory may have granted this node a *new* holding
    /// during the attempt; the keep-alive releases it, because the application's
    /// fenced state belongs to the old token: acquire the room again deliberately.
    Expired,
    /// Every renewal since the last success failed, until the lease ran out;
    /// `error` is the last failure (e.g. [`LeaseError::Unavailable`] while the
    /// backend is unreachable).
    RenewalFailed {
        /// The last renewal's error.
        error: Arc<LeaseError>,
    },
}

/// Renews a held lease in the background and reports its loss.
///
/// Started with a lease the caller holds (from
/// [`ensure_owner`](Directory::ensure_owner), where
/// [`is_held_by`](Lease::is_held_by) the caller), it calls `ensure_owner` again
/// every ttl/3 (D2: same token and epoch, a later expiry). After a failed renewal it
/// retries every ttl/10 until the lease runs out. It publishes every change as a
/// [`LeaseState`] on a [`watch`] channel and stops at the first loss:
///
/// - a renewal answered with another node's lease: [`LeaseLost::TakenOver`];
/// - renewals failing until `expires_at` passed: [`LeaseLost::RenewalFailed`];
/// - the lease expired otherwise: [`LeaseLost::Expired`].
///
/// A renewal attempt is cut off when the lease runs out, so a backend that hangs
/// cannot delay the loss report past `expires_at`. Expiry is judged with the
/// keep-alive's [`Clock`] (the system clock by default), the same `now` the
/// renewals pass to the directory.
///
/// Dropping the `KeepAlive` stops renewing (the lease then runs out at its ttl);
/// [`release`](Self::release) stops and frees the room at once. It needs a tokio
/// runtime with the time driver.
pub struct KeepAlive {
    state: watch::Receiver<LeaseState>,
    task: JoinHandle<()>,
    directory: Arc<dyn Directory>,
    /// The holding a release frees: the lease as last renewed (same token throughout).
    room_id: String,
    node_id: String,
    lease_token: String,
}

impl KeepAlive {
    /// Starts renewing `lease` for `ttl` each time (zero means
    /// [`DEFAULT_TTL`]), judging time with the system clock.
    pub fn start<D: Directory>(directory: D, lease: Lease, ttl: Duration) -> Self {
        Self::start_with_clock(directory, lease, ttl, Arc::new(SystemClock))
    }

    /// As [`start`](Self::start), with `clock` as the source of `now` (tests and
    /// simulations).
    pub fn start_with_clock<D: Directory>(
        directory: D,
        lease: Lease,
        ttl: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let directory: Arc<dyn Directory> = Arc::new(directory);
        let ttl = if ttl.is_zero() { DEFAULT_TTL } else { ttl };
        let (tx, state) = watch::channel(LeaseState::Held {
            lease: lease.clone(),
            renewal_error: None,
        });
        let room_id = lease.room_id.clone();
        let node_id = lease.node_id.clone();
        let lease_token = lease.lease_token.clone();
        let renewer = Renewer {
            directory: directory.clone(),
            clock,
            ttl,
            current: lease,
            last_error: None,
            tx,
        };
        Self {
            state,
            task: tokio::spawn(renewer.run()),
            directory,
            room_id,
            node_id,
            lease_token,
        }
    }

    /// A receiver of every [`LeaseState`] this keep-alive publishes. It sees the
    /// latest state at once, and `changed()` wakes on each renewal and on the loss.
    pub fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.state.clone()
    }

    /// The current state.
    pub fn state(&self) -> LeaseState {
        self.state.borrow().clone()
    }

    /// Waits until the lease is lost and says why. Returns at once when it already
    /// is.
    pub async fn lost(&self) -> LeaseLost {
        let mut state = self.subscribe();
        loop {
            if let LeaseState::Lost(why) = &*state.borrow_and_update() {
                return why.clone();
            }
            if state.changed().await.is_err() {
                // The task ended without a loss: only a panic in it can do that.
                return match &*state.borrow() {
                    LeaseState::Lost(why) => why.clone(),
                    LeaseState::Held { .. } => LeaseLost::Expired,
                };
            }
        }
    }

    /// Stops renewing and releases the room ([`release_owner`](Directory::release_owner))
    /// by this keep-alive's token, so a successor need not wait for the ttl. Returns whether
    /// a lease was deleted: `false` when the holding is gone, even when the same node holds
    /// the room again under a newer token (that holding is left alone).
    pub async fn release(self) -> Result<bool, LeaseError> {
        self.task.abort();
        self.directory
            .release_owner(&self.room_id, &self.node_id, &self.lease_token)
            .await
    }
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeepAlive")
            .field("room_id", &self.room_id)
            .field("node_id", &self.node_id)
            .field("state", &*self.state.borrow())
            .finish_non_exhaustive()
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The background task's state.
struct Renewer {
    directory: Arc<dyn Directory>,
    clock: Arc<dyn Clock>,
    ttl: Duration,
    current: Lease,
    last_error: Option<Arc<LeaseError>>,
    tx: watch::Sender<LeaseState>,
}

impl Renewer {
    async fn run(mut self) {
        let lost = loop {
            let wait = if self.last_error.is_some() {
                self.ttl / RETRIES_PER_TTL
            } else {
                self.ttl / RENEWALS_PER_TTL
            };
            let Some(left) = self.left() else {
                break self.ran_out();
            };
            tokio::time::sleep(wait.min(left)).await;
            let Some(left) = self.left() else {
                break self.ran_out();
            };
            let now = self.clock.now();
            let renewal = self.directory.ensure_owner(
                &self.current.room_id,
                &self.current.node_id,
                now,
                self.ttl,
            );
            match tokio::time::timeout(left, renewal).await {
                Ok(Ok(lease)) => {
                    if let Some(lost) = self.renewed(lease).await {
                        break lost;
                    }
                }
                Ok(Err(error)) => self.failed(error),
                Err(_) => self.failed(LeaseError::Unavailable {
                    reason: "renewal did not answer before the lease ran out".into(),
                    source: None,
                }),
            }
        };
        self.tx.send_replace(LeaseState::Lost(lost));
    }

    /// Time until the current lease runs out, `None` when it already has.
    fn left(&self) -> Option<Duration> {
        let now: SystemTime = self.clock.now();
        if !self.current.valid_at(now) {
            return None;
        }
        self.current.expires_at.duration_since(now).ok()
    }

    fn ran_out(&mut self) -> LeaseLost {
        match self.last_error.take() {
            Some(error) => LeaseLost::RenewalFailed { error },
            None => LeaseLost::Expired,
        }
    }

    /// Handles a renewal's answer: `None` while the lease is still ours.
    async fn renewed(&mut self, lease: Lease) -> Option<LeaseLost> {
        if !lease.is_held_by(&self.current.node_id) {
            return Some(LeaseLost::TakenOver { by: lease });
        }
        if lease.lease_token != self.current.lease_token {
            // Our holding ended and the directory granted a new one (D1). Give it
            // back so the room is free; the application decides whether to retake it.
            // By the new token: only the holding this answer granted, never a later one.
            let _ = self
                .directory
                .release_owner(&lease.room_id, &lease.node_id, &lease.lease_token)
                .await;
            return Some(LeaseLost::Expired);
        }
        self.current = lease.clone();
        self.last_error = None;
        self.tx.send_replace(LeaseState::Held {
            lease,
            renewal_error: None,
        });
        None
    }

    fn failed(&mut self, error: LeaseError) {
        let error = Arc::new(error);
        self.last_error = Some(error.clone());
        self.tx.send_replace(LeaseState::Held {
            lease: self.current.clone(),
            renewal_error: Some(error),
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use tokio::time::Instant;

    use super::*;
    use crate::MemoryDirectory;

    const TTL: Duration = Duration::from_secs(30);

    /// Wall-clock time that moves with tokio's (paused) clock.
    struct TokioClock {
        start: Instant,
        at: SystemTime,
    }

    impl Clock for TokioClock {
        fn now(&self) -> SystemTime {
            self.at + self.start.elapsed()
        }

        fn monotonic(&self) -> Duration {
            self.start.elapsed()
        }
    }

    fn clock() -> Arc<TokioClock> {
        Arc::new(TokioClock {
            start: Instant::now(),
            at: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        })
    }

    async fn held(dir: &Arc<MemoryDirectory>, clock: &Arc<TokioClock>, node: &str) -> Lease {
        let lease = dir
            .ensure_owner("room", node, clock.now(), TTL)
            .await
            .unwrap();
        assert!(lease.is_held_by(node));
        lease
    }

    /// Renewals at ttl/3 keep the same holding valid for many ttls.
    #[tokio::test(start_paused = true)]
    async fn renewal_keeps_the_lease_past_several_ttls() {
        let clock = clock();
        let dir = Arc::new(MemoryDirectory::with_clock(clock.clone()));
        let first = held(&dir, &clock, "a").await;
        let keep = KeepAlive::start_with_clock(dir.clone(), first.clone(), TTL, clock.clone());

        tokio::time::sleep(TTL * 5).await;

        let now = clock.now();
        assert!(now > first.expires_at, "the first expiry has long passed");
        assert!(
            dir.verify_owner("room", "a", &first.lease_token, now)
                .await
                .unwrap(),
            "the original token still verifies"
        );
        let LeaseState::Held {
            lease,
            renewal_error,
        } = keep.state()
        else {
            panic!("lost: {:?}", keep.state());
        };
        assert_eq!(
            (lease.epoch, &lease.lease_token),
            (first.epoch, &first.lease_token)
        );
        assert!(lease.expires_at > now + TTL / 2, "renewed within ttl/3");
        assert!(renewal_error.is_none());
    }

    /// Another node taking the room after a forced expiry is reported as a takeover.
    #[tokio::test(start_paused = true)]
    async fn takeover_after_forced_expiry_is_reported() {
        let clock = clock();
        let dir = Arc::new(MemoryDirectory::with_clock(clock.clone()));
        let mine = held(&dir, &clock, "a").await;
        let keep = KeepAlive::start_with_clock(dir.clone(), mine.clone(), TTL, clock.clone());

        dir.force_expire("room");
        let theirs = held(&dir, &clock, "b").await;

        match keep.lost().await {
            LeaseLost::TakenOver { by } => {
                assert!(by.same_holding(&theirs));
                assert!(by.epoch > mine.epoch);
            }
            other => panic!("expected a takeover, got {other:?}"),
        }
        assert!(keep.state().is_lost());
        assert!(keep.state().lease().is_none());
    }

    /// A holding that ended without a successor is reported as expired, and the
    /// new holding the renewal was granted is given back.
    #[tokio::test(start_paused = true)]
    async fn expiry_without_successor_is_reported_and_the_regrant_released() {
        let clock = clock();
        let dir = Arc::new(MemoryDirectory::with_clock(clock.clone()));
        let mine = held(&dir, &clock, "a").await;
        let keep = KeepAlive::start_with_clock(dir.clone(), mine, TTL, clock.clone());

        dir.force_expire("room");

        assert!(matches!(keep.lost().await, LeaseLost::Expired));
        assert_eq!(dir.lookup("room").await.unwrap(), None, "released");
    }

    /// Failing renewals warn while the lease holds and report the loss when it
    /// runs out, not before.
    #[tokio::test(start_paused = true)]
    async fn renewal_failing_until_expiry_is_reported_at_expiry() {
        let clock = clock();
        let dir = Arc::new(FailAfter {
            inner: MemoryDirectory::with_clock(clock.clone()),
            ok: std::sync::atomic::AtomicU32::new(1),
        });
        let mine = dir
            .ensure_owner("room", "a", clock.now(), TTL)
            .await
            .unwrap();
        let keep = KeepAlive::start_with_clock(dir.clone(), mine.clone(), TTL, clock.clone());
        let mut states = keep.subscribe();

        let warned = loop {
            states.changed().await.unwrap();
            if let LeaseState::Held {
                renewal_error: Some(e),
                ..
            } = &*states.borrow()
            {
                break e.clone();
            }
        };
        assert!(warned.is_unavailable(), "{warned}");
        assert!(clock.now() < mine.expires_at, "warned while it still held");

        match keep.lost().await {
            LeaseLost::RenewalFailed { error } => assert!(error.is_unavailable(), "{error}"),
            other => panic!("expected failing renewals, got {other:?}"),
        }
        assert!(clock.now() >= mine.expires_at, "reported once it ran out");
        assert!(clock.now() < mine.expires_at + TTL / 10, "and promptly");
    }

    /// `release` stops renewing and frees the room.
    #[tokio::test(start_paused = true)]
    async fn release_frees_the_room() {
        let clock = clock();
        let dir = Arc::new(MemoryDirectory::with_clock(clock.clone()));
        let mine = held(&dir, &clock, "a").await;
        let keep = KeepAlive::start_with_clock(dir.clone(), mine, TTL, clock.clone());
        assert!(keep.release().await.unwrap());
        assert_eq!(dir.lookup("room").await.unwrap(), None);
    }

    /// A late `release` (the holding ran out and the same node took the room again under a
    /// new token) frees nothing: the newer holding stays.
    #[tokio::test(start_paused = true)]
    async fn release_never_frees_a_newer_holding_of_the_same_node() {
        let clock = clock();
        let dir = Arc::new(MemoryDirectory::with_clock(clock.clone()));
        let mine = held(&dir, &clock, "a").await;
        let keep = KeepAlive::start_with_clock(dir.clone(), mine.clone(), TTL, clock.clone());
        // The same node, once the first holding has expired, is granted anew (D1).
        dir.force_expire("room");
        let again = held(&dir, &clock, "a").await;
        assert_ne!(again.lease_token, mine.lease_token, "a new holding");

        assert!(!keep.release().await.unwrap(), "nothing of ours to free");
        let left = dir.lookup("room").await.unwrap().expect("kept");
        assert!(left.same_holding(&again));
    }

    /// A directory whose `ensure_owner` answers `ok` times, then fails `Unavailable`.
    struct FailAfter {
        inner: MemoryDirectory,
        ok: std::sync::atomic::AtomicU32,
    }

    #[async_trait::async_trait]
    impl Directory for FailAfter {
        async fn lookup(&self, room_id: &str) -> Result<Option<Lease>, LeaseError> {
            self.inner.lookup(room_id).await
        }
        async fn ensure_owner(
            &self,
            room_id: &str,
            node_id: &str,
            now: SystemTime,
            ttl: Duration,
        ) -> Result<Lease, LeaseError> {
            use std::sync::atomic::Ordering;
            let left = self.ok.load(Ordering::SeqCst);
            if left == 0 {
                return Err(LeaseError::unavailable_with(
                    "down",
                    std::io::Error::other("x"),
                ));
            }
            self.ok.store(left - 1, Ordering::SeqCst);
            self.inner.ensure_owner(room_id, node_id, now, ttl).await
        }
        async fn verify_owner(
            &self,
            room_id: &str,
            node_id: &str,
            lease_token: &str,
            now: SystemTime,
        ) -> Result<bool, LeaseError> {
            self.inner
                .verify_owner(room_id, node_id, lease_token, now)
                .await
        }
        async fn release_owner(
            &self,
            room_id: &str,
            node_id: &str,
            lease_token: &str,
        ) -> Result<bool, LeaseError> {
            self.inner
                .release_owner(room_id, node_id, lease_token)
                .await
        }
    }
}
