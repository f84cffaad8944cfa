//! What a connection's [`Activity`](crate::activity::Activity) is made of: `std`
//! atomics and tokio's `Instant` in normal builds; under `--cfg loom`, loom's
//! atomics and a clock each loom thread sets itself, so the loom models
//! (`activity/loom_models.rs`) check the real code at chosen times.

#[cfg(loom)]
pub(crate) use self::loom_clock::Instant;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64};
#[cfg(not(loom))]
pub(crate) use tokio::time::Instant;

#[cfg(loom)]
mod loom_clock {
    use std::cell::Cell;
    use std::ops::Add;
    use std::time::Duration;

    loom::thread_local! {
        /// This thread's time since the clock's epoch.
        static NOW: Cell<Duration> = Cell::new(Duration::ZERO);
    }

    /// A point on the model's clock. Each loom thread starts at the epoch
    /// and moves on only when it [sets](Instant::set_now) its time.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub(crate) struct Instant(Duration);

    impl Instant {
        pub(crate) fn now() -> Self {
            Self(NOW.with(Cell::get))
        }

        /// Moves the calling thread's clock to `since_epoch`.
        pub(crate) fn set_now(since_epoch: Duration) {
            NOW.with(|now| now.set(since_epoch));
        }

        pub(crate) fn elapsed(&self) -> Duration {
            Self::now().0.saturating_sub(self.0)
        }
    }

    impl Add<Duration> for Instant {
        type Output = Self;

        fn add(self, duration: Duration) -> Self {
            Self(self.0 + duration)
        }
    }
}
