//! Expiry without a shared clock: the instance's monotonic clock and its bounded memory
//! of which record versions it saw when, and the millisecond rounding of what is left.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use unique_lease::Clock;

/// The instance's monotonic clock: readings are durations since an origin, and only
/// their differences mean anything.
#[derive(Clone)]
pub(super) enum Ticker {
    /// Production: [`Instant`] since the directory was built.
    Monotonic(Instant),
    /// A test clock's monotonic readings (steps of its wall clock leave them alone).
    Test(Arc<dyn Clock>),
}

impl Ticker {
    pub(super) fn now(&self) -> Duration {
        match self {
            Self::Monotonic(origin) => origin.elapsed(),
            Self::Test(clock) => clock.monotonic(),
        }
    }
}

/// How many versions of one room an instance remembers. Concurrent calls on one
/// instance can record what they saw out of order (a read of the old version answered
/// before another call's grant, but recorded after it); remembering the last few keeps
/// the old version's first sighting, so a version this instance already saw expire
/// never looks fresh again.
const VERSIONS_PER_ROOM: usize = 4;

/// The versions of a room's lease this instance saw most recently, each with when it
/// first saw it, oldest first.
#[derive(Debug)]
struct Observation {
    versions: Vec<(String, Duration)>,
}

impl Observation {
    /// The latest first sighting of any of its versions (what eviction goes by).
    fn latest(&self) -> Duration {
        self.versions
            .iter()
            .map(|(_, first_seen)| *first_seen)
            .max()
            .unwrap_or_default()
    }
}

/// The observation memory, bounded.
///
/// Forgetting a room is always safe: the next sighting counts as the first, so this
/// instance judges the lease valid for a whole ttl from then — longer than needed. A
/// taker only waits longer; a holder renews by writing a new version anyway, which
/// every instance then times from when it sees it.
#[derive(Debug)]
pub(super) struct Observations {
    rooms: HashMap<String, Observation>,
    capacity: usize,
}

impl Observations {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            rooms: HashMap::new(),
            capacity,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.rooms.len()
    }

    /// Records that version `rvn` of `room_id` was seen at `at`; returns when this
    /// instance first saw it (the earlier of `at` and an earlier sighting of the same
    /// version).
    pub(super) fn saw(&mut self, room_id: &str, rvn: &str, at: Duration) -> Duration {
        if let Some(room) = self.rooms.get_mut(room_id) {
            if let Some((_, first_seen)) = room.versions.iter_mut().find(|(v, _)| v == rvn) {
                *first_seen = (*first_seen).min(at);
                return *first_seen;
            }
            if room.versions.len() >= VERSIONS_PER_ROOM {
                room.versions.remove(0);
            }
            room.versions.push((rvn.to_owned(), at));
            return at;
        }
        if self.rooms.len() >= self.capacity {
            self.forget_older_half();
        }
        self.rooms.insert(
            room_id.to_owned(),
            Observation {
                versions: vec![(rvn.to_owned(), at)],
            },
        );
        at
    }

    /// Keeps the `capacity / 2` rooms where something new was seen last (one sweep per
    /// `capacity / 2` new rooms, so the cost per room stays constant).
    fn forget_older_half(&mut self) {
        let keep = self.capacity / 2;
        if keep == 0 {
            self.rooms.clear();
            return;
        }
        let mut sightings: Vec<Duration> = self.rooms.values().map(Observation::latest).collect();
        let cut_at = sightings.len() - keep;
        let (_, &mut cut, _) = sightings.select_nth_unstable(cut_at);
        // Rooms at the cut itself fill what is left of `keep` after the newer ones.
        let newer = self.rooms.values().filter(|o| o.latest() > cut).count();
        let mut ties = keep - newer;
        self.rooms.retain(|_, o| {
            let latest = o.latest();
            if latest > cut {
                return true;
            }
            if latest == cut && ties > 0 {
                ties -= 1;
                return true;
            }
            false
        });
    }
}

/// Whole milliseconds, rounded down (what is reported left).
pub(super) fn floor_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whole milliseconds, rounded up (what a renewal must keep).
pub(super) fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_timed_from_its_first_sighting() {
        let mut seen = Observations::new(10);
        let at = Duration::from_secs;
        assert_eq!(seen.saw("r", "v1", at(5)), at(5));
        assert_eq!(
            seen.saw("r", "v1", at(9)),
            at(5),
            "same version: first sighting"
        );
        assert_eq!(
            seen.saw("r", "v1", at(3)),
            at(3),
            "an earlier sighting counts"
        );
        assert_eq!(
            seen.saw("r", "v2", at(9)),
            at(9),
            "a new version starts again"
        );
        assert_eq!(
            seen.saw("r", "v1", at(10)),
            at(3),
            "an older version recorded late keeps its first sighting"
        );
        for (i, version) in ["v3", "v4", "v5"].into_iter().enumerate() {
            seen.saw("r", version, at(11 + i as u64));
        }
        assert_eq!(
            seen.saw("r", "v1", at(20)),
            at(20),
            "only the last few versions are remembered"
        );
        assert_eq!(seen.len(), 1);
    }

    #[test]
    fn a_full_memory_forgets_its_older_half() {
        let mut seen = Observations::new(4);
        for (i, room) in ["a", "b", "c", "d"].into_iter().enumerate() {
            seen.saw(room, "v", Duration::from_secs(i as u64));
        }
        seen.saw("e", "v", Duration::from_secs(10));
        let mut kept: Vec<&str> = seen.rooms.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["c", "d", "e"]);

        // Ties at the cut are kept only up to half the capacity.
        let mut seen = Observations::new(4);
        for room in ["a", "b", "c", "d"] {
            seen.saw(room, "v", Duration::ZERO);
        }
        seen.saw("e", "v", Duration::ZERO);
        assert_eq!(seen.len(), 3);
        assert!(seen.rooms.contains_key("e"));

        let mut seen = Observations::new(1);
        seen.saw("a", "v", Duration::ZERO);
        seen.saw("b", "v", Duration::ZERO);
        assert_eq!(seen.rooms.keys().collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn milliseconds_round_down_when_reported_and_up_when_kept() {
        let d = Duration::from_micros(1_500);
        assert_eq!(floor_ms(d), 1);
        assert_eq!(ceil_ms(d), 2);
        assert_eq!(floor_ms(Duration::from_millis(7)), 7);
        assert_eq!(ceil_ms(Duration::from_millis(7)), 7);
        assert_eq!(ceil_ms(Duration::ZERO), 0);
    }
}
