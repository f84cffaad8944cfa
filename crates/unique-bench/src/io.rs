//! Bytes a server process sent to storage, from `/proc/<pid>/io`.
//!
//! The durable stores differ most in what they write per claim (a B-tree writes whole pages,
//! a journal appends the record), so the report shows the server's bytes written per request
//! beside its CPU time, Redis's append-only file included.

/// The process's `write_bytes` so far: what it caused to be sent to the storage layer, all
/// its threads, counted when pages are dirtied (a file on tmpfs counts nothing). `None`
/// where `/proc/<pid>/io` is unreadable (not Linux, the process is gone, or not ours).
pub(crate) fn written(pid: u32) -> Option<u64> {
    parse_io(&std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?)
}

/// The `write_bytes:` line of `/proc/<pid>/io`.
fn parse_io(io: &str) -> Option<u64> {
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_write_bytes_line() {
        let io = "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\n\
                  write_bytes: 8192\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_io(io), Some(8192));
        assert_eq!(parse_io("wchar: 20\n"), None);
        assert_eq!(parse_io("write_bytes: lots\n"), None);
    }

    #[test]
    fn reads_a_live_process_and_not_a_missing_one() {
        assert!(
            written(std::process::id()).is_some(),
            "/proc/self/io on linux"
        );
        assert_eq!(written(u32::MAX), None);
    }
}
