//! The synchronisation primitives the claim queue uses: `std::sync` and tokio's
//! `Semaphore` in normal builds; under `--cfg loom`, `loom::sync` and a semaphore
//! on loom's mutex, so the loom models (`queue/loom_models.rs`) check the queue's own code.
//!
//! tokio's `Semaphore` is model-checked in tokio, but a dependency's tokio is built
//! on `std` even under `--cfg loom`, so loom could neither see nor interleave it.
//! [`Semaphore`] below stands in for it with the behaviour the queue relies on.

#[cfg(loom)]
pub(crate) use self::loom_semaphore::Semaphore;
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use tokio::sync::Semaphore;

/// Locks `mutex`, ignoring poison: every critical section of the queue leaves
/// its map consistent (a count changed, a slot pushed or removed).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(loom)]
mod loom_semaphore {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    use super::{Mutex, lock};

    /// tokio's `Semaphore`, as far as the queue uses it: `acquire` takes a
    /// permit from the pool or waits in line; `add_permits` gives each permit to
    /// the longest waiting acquirer, or to the pool when none waits; an
    /// acquirer dropped after a permit was given to it gives the permit on the
    /// same way, and one dropped while waiting leaves the line.
    pub(crate) struct Semaphore {
        state: Mutex<State>,
    }

    struct State {
        /// Permits no acquirer waits for.
        permits: usize,
        /// Acquirers waiting, longest first, each with the waker of its last poll.
        waiting: VecDeque<(u64, Waker)>,
        /// Acquirers given a permit that have not yet been polled since.
        granted: Vec<u64>,
        next_id: u64,
    }

    impl State {
        fn add(&mut self, permits: usize) {
            for _ in 0..permits {
                match self.waiting.pop_front() {
                    Some((id, waker)) => {
                        self.granted.push(id);
                        waker.wake();
                    }
                    None => self.permits += 1,
                }
            }
        }

        /// Takes back the permit given to `id`, if one was.
        fn take_grant(&mut self, id: u64) -> bool {
            match self.granted.iter().position(|granted| *granted == id) {
                Some(index) => {
                    self.granted.swap_remove(index);
                    true
                }
                None => false,
            }
        }
    }

    impl Semaphore {
        pub(crate) fn new(permits: usize) -> Self {
            Self {
                state: Mutex::new(State {
                    permits,
                    waiting: VecDeque::new(),
                    granted: Vec::new(),
                    next_id: 0,
                }),
            }
        }

        pub(crate) fn add_permits(&self, permits: usize) {
            lock(&self.state).add(permits);
        }

        /// Never fails: the queue never closes its semaphores (tokio's `Err`
        /// means closed).
        pub(crate) fn acquire(&self) -> Acquire<'_> {
            Acquire {
                semaphore: self,
                id: None,
            }
        }
    }

    pub(crate) struct Acquire<'a> {
        semaphore: &'a Semaphore,
        /// Its place in line while it waits.
        id: Option<u64>,
    }

    impl<'a> Future for Acquire<'a> {
        type Output = Result<SemaphorePermit<'a>, ()>;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let semaphore = self.semaphore;
            let mut state = lock(&semaphore.state);
            let ready = match self.id {
                Some(id) if state.take_grant(id) => true,
                Some(id) => {
                    // Woken by the waker of this poll, as tokio's are.
                    if let Some((_, waker)) = state.waiting.iter_mut().find(|(w, _)| *w == id) {
                        waker.clone_from(cx.waker());
                    }
                    false
                }
                None if state.permits > 0 => {
                    state.permits -= 1;
                    true
                }
                None => {
                    let id = state.next_id;
                    state.next_id += 1;
                    state.waiting.push_back((id, cx.waker().clone()));
                    self.id = Some(id);
                    false
                }
            };
            if !ready {
                return Poll::Pending;
            }
            self.id = None;
            Poll::Ready(Ok(SemaphorePermit { semaphore }))
        }
    }

    impl Drop for Acquire<'_> {
        fn drop(&mut self) {
            let Some(id) = self.id else {
                return;
            };
            let mut state = lock(&self.semaphore.state);
            if state.take_grant(id) {
                state.add(1);
            } else {
                state.waiting.retain(|(waiting, _)| *waiting != id);
            }
        }
    }

    /// A permit; given back when dropped, unless forgotten.
    pub(crate) struct SemaphorePermit<'a> {
        semaphore: &'a Semaphore,
    }

    impl SemaphorePermit<'_> {
        pub(crate) fn forget(self) {
            std::mem::forget(self);
        }
    }

    impl Drop for SemaphorePermit<'_> {
        fn drop(&mut self) {
            self.semaphore.add_permits(1);
        }
    }
}
