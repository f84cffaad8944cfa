//! Time: the representation the crate uses, clocks, and millisecond conversion.
//!
//! Times are [`SystemTime`] values with **millisecond resolution**: every backend
//! stores whole milliseconds since the Unix epoch, so a caller's `now` is truncated
//! to the millisecond before use and a ttl is rounded *up* to the next millisecond
//! (a positive ttl never becomes zero). Because stored expiries are whole
//! milliseconds, truncating `now` never changes whether `now < expires_at`.

use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::LeaseError;

/// The ttl used when a caller passes a zero ttl (30 s).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The longest accepted ttl (ten years); longer ones are `InvalidParams`.
pub const MAX_TTL: Duration = Duration::from_hours(10 * 365 * 24);

/// Times at or after `UNIX_EPOCH + 2^52 ms` (about year 144 000) are refused, so
/// every sum of a time, a ttl and a grace period stays exact in the doubles of
/// Redis's Lua.
pub const MAX_TIME_MILLIS: u64 = 1 << 52;

/// A store's clock: its wall-clock time, which judges expiry (D10), and a monotonic
/// reading beside it, which a step of the wall clock does not move (D11: the directory
/// notices a forward step by comparing the two).
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> SystemTime;

    /// Time since an arbitrary fixed origin on a clock that never goes back and that
    /// steps of the wall clock leave alone (the system's: [`Instant`]).
    fn monotonic(&self) -> Duration;
}

impl std::fmt::Debug for dyn Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// The origin of [`SystemClock::monotonic`]: the first reading in the process.
static ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn monotonic(&self) -> Duration {
        ORIGIN.elapsed()
    }
}

/// A clock that moves only when told to: for tests and simulations. [`advance`](Self::advance)
/// lets time pass (wall and monotonic together); [`step_forward`](Self::step_forward),
/// [`step_back`](Self::step_back) and [`set`](Self::set) move the wall clock alone, as an
/// operator or a bad NTP server steps a host's clock.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<(SystemTime, Duration)>,
}

impl ManualClock {
    /// A clock standing at `start` (its monotonic reading at zero).
    pub fn new(start: SystemTime) -> Self {
        Self {
            now: Mutex::new((start, Duration::ZERO)),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut (SystemTime, Duration)) -> T) -> T {
        f(&mut self.now.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Lets `by` pass: the wall clock and the monotonic clock both move forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.with(|(wall, mono)| {
            *wall += by;
            *mono += by;
        });
    }

    /// Steps the wall clock forward by `by`; no time passes (the monotonic clock stays).
    pub fn step_forward(&self, by: Duration) {
        self.with(|(wall, _)| *wall += by);
    }

    /// Steps the wall clock back by `by`; no time passes (the monotonic clock stays).
    pub fn step_back(&self, by: Duration) {
        self.with(|(wall, _)| *wall -= by);
    }

    /// Sets the wall clock to `to` (which may be earlier than now): a step, the
    /// monotonic clock stays.
    pub fn set(&self, to: SystemTime) {
        self.with(|(wall, _)| *wall = to);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        self.with(|(wall, _)| *wall)
    }

    fn monotonic(&self) -> Duration {
        self.with(|(_, mono)| *mono)
    }
}

/// `t` as whole milliseconds since the Unix epoch (truncated); `InvalidParams` when
/// `t` is before the epoch or not below [`MAX_TIME_MILLIS`]. `what` names it in errors.
pub(crate) fn to_millis(t: SystemTime, what: &str) -> Result<u64, LeaseError> {
    let since = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| LeaseError::invalid(format!("{what} is before the unix epoch")))?;
    u64::try_from(since.as_millis())
        .ok()
        .filter(|ms| *ms < MAX_TIME_MILLIS)
        .ok_or_else(|| LeaseError::invalid(format!("{what} is beyond the supported range")))
}

/// A store clock's reading in whole milliseconds since the Unix epoch, for backends
/// that judge expiry on a [`Clock`] of this crate.
///
/// # Errors
///
/// `InvalidParams` when the clock reads before the Unix epoch or not below
/// [`MAX_TIME_MILLIS`].
pub fn clock_millis(clock: &dyn Clock) -> Result<u64, LeaseError> {
    to_millis(clock.now(), "the store's clock")
}

/// The instant `ms` milliseconds after the Unix epoch.
#[cfg(test)]
pub(crate) fn from_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// `ttl` in whole milliseconds, rounded up; zero means [`DEFAULT_TTL`]; longer than
/// [`MAX_TTL`] is `InvalidParams`.
pub(crate) fn ttl_millis(ttl: Duration) -> Result<u64, LeaseError> {
    let ttl = if ttl.is_zero() { DEFAULT_TTL } else { ttl };
    if ttl > MAX_TTL {
        return Err(LeaseError::invalid("ttl is longer than ten years"));
    }
    // Cannot overflow: MAX_TTL is far below u64::MAX milliseconds.
    let ms = u64::try_from(ttl.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_truncate_and_round_trip() {
        let t = UNIX_EPOCH + Duration::from_micros(1_500_999);
        assert_eq!(to_millis(t, "now").unwrap(), 1_500);
        assert_eq!(
            from_millis(1_500),
            UNIX_EPOCH + Duration::from_millis(1_500)
        );
        assert_eq!(to_millis(UNIX_EPOCH, "now").unwrap(), 0);
    }

    #[test]
    fn times_outside_the_range_are_invalid() {
        let before = UNIX_EPOCH - Duration::from_millis(1);
        assert!(to_millis(before, "now").unwrap_err().is_invalid_params());
        let last = from_millis(MAX_TIME_MILLIS - 1);
        assert_eq!(to_millis(last, "now").unwrap(), MAX_TIME_MILLIS - 1);
        let err = to_millis(from_millis(MAX_TIME_MILLIS), "now").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid params: now is beyond the supported range"
        );
    }

    #[test]
    fn ttl_rounds_up_defaults_and_caps() {
        assert_eq!(ttl_millis(Duration::ZERO).unwrap(), 30_000);
        assert_eq!(ttl_millis(Duration::from_nanos(1)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1_001)).unwrap(), 2);
        assert_eq!(ttl_millis(Duration::from_millis(7)).unwrap(), 7);
        assert_eq!(
            ttl_millis(MAX_TTL).unwrap(),
            u64::try_from(MAX_TTL.as_millis()).unwrap()
        );
        assert!(
            ttl_millis(MAX_TTL + Duration::from_millis(1))
                .unwrap_err()
                .is_invalid_params()
        );
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(UNIX_EPOCH);
        assert_eq!(clock.now(), UNIX_EPOCH);
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_secs(2));
        assert_eq!(clock.monotonic(), Duration::from_secs(2));
        clock.set(UNIX_EPOCH + Duration::from_secs(1));
        assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_secs(1));
        clock.step_forward(Duration::from_mins(1));
        clock.step_back(Duration::from_secs(30));
        assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_secs(31));
        assert_eq!(
            clock.monotonic(),
            Duration::from_secs(2),
            "steps pass no time"
        );
    }
}
