//! Randomised waits, shared by the claimer's backoff and the heartbeat's interval.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

type JitterFn = dyn Fn(Duration) -> Duration + Send + Sync;

/// Turns a nominal wait into the wait actually slept.
///
/// Whatever the strategy, the result is clamped to `0..=nominal`, so a jittered wait never
/// exceeds its cap (the backoff cap, or the heartbeat interval that bounds overlap, I5b).
#[derive(Clone)]
pub struct Jitter(JitterKind);

#[derive(Clone)]
enum JitterKind {
    /// Uniform in `[nominal × (1 − spread), nominal]`; `spread = 1` is full jitter.
    Spread(f64),
    Custom(Arc<JitterFn>),
}

impl Jitter {
    /// Full jitter: uniform in `[0, nominal]` (the claimer's default backoff).
    pub fn full() -> Self {
        Self(JitterKind::Spread(1.0))
    }

    /// No jitter: always the nominal wait.
    pub fn none() -> Self {
        Self(JitterKind::Spread(0.0))
    }

    /// Uniform in `[nominal × (1 − spread), nominal]`; `spread` is clamped to `0..=1`
    /// (`0.2` is the heartbeat's default: waits between 80 % and 100 % of the interval).
    pub fn spread(spread: f64) -> Self {
        Self(JitterKind::Spread(spread.clamp(0.0, 1.0)))
    }

    /// A custom strategy, e.g. a seeded or scripted one in tests. Its result is clamped
    /// to `0..=nominal`.
    pub fn from_fn(f: impl Fn(Duration) -> Duration + Send + Sync + 'static) -> Self {
        Self(JitterKind::Custom(Arc::new(f)))
    }

    /// The wait to sleep for a nominal wait of `nominal`.
    pub fn apply(&self, nominal: Duration) -> Duration {
        let wait = match &self.0 {
            JitterKind::Spread(spread) => {
                let cut = nominal.mul_f64(spread * fastrand::f64());
                nominal.saturating_sub(cut)
            }
            JitterKind::Custom(f) => f(nominal),
        };
        wait.min(nominal)
    }
}

impl fmt::Debug for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            JitterKind::Spread(spread) => f.debug_tuple("Jitter::spread").field(spread).finish(),
            JitterKind::Custom(_) => f.write_str("Jitter::from_fn(..)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOMINAL: Duration = Duration::from_secs(1);

    #[test]
    fn none_is_exact() {
        assert_eq!(Jitter::none().apply(NOMINAL), NOMINAL);
    }

    #[test]
    fn full_stays_in_range_and_varies() {
        let j = Jitter::full();
        let waits: Vec<_> = (0..1000).map(|_| j.apply(NOMINAL)).collect();
        assert!(waits.iter().all(|w| *w <= NOMINAL));
        // Uniform over [0, 1 s]: 1000 draws all landing in one half is not credible.
        assert!(waits.iter().any(|w| *w < NOMINAL / 2));
        assert!(waits.iter().any(|w| *w > NOMINAL / 2));
    }

    #[test]
    fn spread_keeps_the_floor() {
        let j = Jitter::spread(0.2);
        let waits: Vec<_> = (0..1000).map(|_| j.apply(NOMINAL)).collect();
        assert!(
            waits
                .iter()
                .all(|w| *w >= Duration::from_millis(800) && *w <= NOMINAL)
        );
        assert!(waits.iter().any(|w| *w < Duration::from_millis(900)));
        assert_eq!(
            Jitter::spread(7.0).apply(Duration::ZERO),
            Duration::ZERO,
            "spread is clamped, zero stays zero"
        );
    }

    #[test]
    fn custom_is_clamped_to_nominal() {
        let j = Jitter::from_fn(|d| d * 3);
        assert_eq!(j.apply(NOMINAL), NOMINAL);
        let j = Jitter::from_fn(|d| d / 4);
        assert_eq!(j.apply(NOMINAL), Duration::from_millis(250));
    }
}
