//! CPU time of this process and of its reaped children, from `/proc/self/stat`.
//!
//! Throughput on a shared, busy machine moves with whatever else runs; CPU time
//! per request does much less, so the report shows both. The servers under test
//! are children of this process and are reaped (killed and waited for) before
//! the second reading, so their time lands in the children's counters.

use std::time::Duration;

/// Clock ticks per second of the `/proc` counters (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// User + system CPU time, split between this process and its reaped children.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CpuTimes {
    /// This process (the load generator).
    pub(crate) own: Duration,
    /// Children that have exited and been waited for (the servers).
    pub(crate) children: Duration,
}

impl CpuTimes {
    /// The current counters; `None` where `/proc/self/stat` is unreadable (not Linux).
    pub(crate) fn now() -> Option<Self> {
        parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
    }

    /// The time spent between `earlier` and `self`.
    pub(crate) fn since(self, earlier: Self) -> Self {
        Self {
            own: self.own.saturating_sub(earlier.own),
            children: self.children.saturating_sub(earlier.children),
        }
    }
}

/// Fields 14–17 of `/proc/<pid>/stat`: utime, stime, cutime, cstime (in ticks).
/// The command name (field 2) may contain spaces, so counting starts after its `)`.
fn parse_stat(stat: &str) -> Option<CpuTimes> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // after_name starts at field 3 (state); field n is at index n - 3.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let as_time = |t: u64| Duration::from_millis(t * 1000 / TICKS_PER_SECOND);
    Some(CpuTimes {
        own: as_time(ticks(14)? + ticks(15)?),
        children: as_time(ticks(16)? + ticks(17)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_after_a_name_with_spaces() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194304 10 0 0 0 250 50 7 3 20 0 1 0 9 0 0";
        assert_eq!(
            parse_stat(stat),
            Some(CpuTimes {
                own: Duration::from_secs(3),
                children: Duration::from_millis(100),
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn own_time_grows_while_this_process_computes() {
        let before = CpuTimes::now().expect("/proc/self/stat on linux");
        // Compute until the counter moves (a few ticks), giving up after 5 s of
        // wall time: a wrong field would never move and fail the test.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut x = 0_u64;
        while CpuTimes::now().unwrap().own <= before.own && std::time::Instant::now() < deadline {
            for i in 0..1_000_000_u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
        }
        let after = CpuTimes::now().unwrap();
        assert!(after.own > before.own, "{before:?} -> {after:?}");
        assert_eq!(after.since(before).children, Duration::ZERO);
    }
}
