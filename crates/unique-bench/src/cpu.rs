//! CPU time of a process, from `/proc/<pid>/stat`.
//!
//! Throughput on a shared, busy machine moves with whatever else runs; CPU time
//! per request does much less, so the report shows both: the load generator's
//! own time and the server's, read from each process's counters around a round.

use std::time::Duration;

/// Clock ticks per second of the `/proc` counters (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// Which process to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Process {
    /// The load generator itself.
    This,
    /// A server under test.
    Pid(u32),
}

/// User + system CPU time the process has used so far (all its threads);
/// `None` where `/proc` is unreadable (not Linux, or the process is gone).
pub(crate) fn used(process: Process) -> Option<Duration> {
    let path = match process {
        Process::This => "/proc/self/stat".to_owned(),
        Process::Pid(pid) => format!("/proc/{pid}/stat"),
    };
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// Fields 14 and 15 of `/proc/<pid>/stat`: utime and stime (in ticks). The
/// command name (field 2) may contain spaces, so counting starts after its `)`.
fn parse_stat(stat: &str) -> Option<Duration> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // after_name starts at field 3 (state); field n is at index n - 3.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Duration::from_millis(
        (ticks(14)? + ticks(15)?) * 1000 / TICKS_PER_SECOND,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_after_a_name_with_spaces() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194304 10 0 0 0 250 50 7 3 20 0 1 0 9 0 0";
        assert_eq!(parse_stat(stat), Some(Duration::from_secs(3)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn time_grows_while_a_process_computes() {
        let before = used(Process::This).expect("/proc/self/stat on linux");
        // Compute until the counter moves (a few ticks), giving up after 5 s of
        // wall time: a wrong field would never move and fail the test.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut x = 0_u64;
        while used(Process::This).unwrap() <= before && std::time::Instant::now() < deadline {
            for i in 0..1_000_000_u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
        }
        assert!(used(Process::This).unwrap() > before);
        // The same counters by pid.
        let by_pid = used(Process::Pid(std::process::id())).unwrap();
        assert!(by_pid > before);
        assert_eq!(used(Process::Pid(u32::MAX)), None);
    }
}
