//! The soak's table (one row per minute) and the flatness half of its verdict.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One minute of the run, as printed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Row {
    pub(crate) minute: u64,
    /// Which start of the server the minute ended in (1 before the SIGKILL, 2 after).
    pub(crate) life: usize,
    pub(crate) claims_per_sec: f64,
    pub(crate) requests_per_sec: f64,
    pub(crate) p99_ms: f64,
    pub(crate) rss: Option<u64>,
    pub(crate) fds: Option<usize>,
    /// Bytes of the fjall directory.
    pub(crate) disk: u64,
    /// Bytes of the server's stderr so far (every start appends).
    pub(crate) log: u64,
    pub(crate) noise_refused: u64,
    pub(crate) errors: BTreeMap<String, u64>,
}

pub(crate) const HEADER: &str = "  min  life  claims/s  req/s  p99 ms  rss MiB   fds  disk MiB  log KiB  noise 401/403  errors by kind";

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

impl Row {
    pub(crate) fn line(&self) -> String {
        let rss = self
            .rss
            .map_or("-".to_owned(), |b| format!("{:.1}", mib(b)));
        let fds = self.fds.map_or("-".to_owned(), |n| n.to_string());
        let errors = if self.errors.is_empty() {
            "none".to_owned()
        } else {
            let listed: Vec<String> = self
                .errors
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect();
            listed.join(", ")
        };
        format!(
            "{:>5}  {:>4}  {:>8.0}  {:>5.0}  {:>6.1}  {rss:>7}  {fds:>4}  {:>8.1}  {:>7}  {:>13}  {errors}",
            self.minute,
            self.life,
            self.claims_per_sec,
            self.requests_per_sec,
            self.p99_ms,
            mib(self.disk),
            self.log / 1024,
            self.noise_refused,
        )
    }
}

/// How much the last minute may exceed the first before a column counts as growing. The
/// key space, rooms and nodes are fixed, so after the first minute the live data no longer
/// grows; what the thresholds leave room for is allocator and LSM slack (a journal that has
/// not been flushed yet, a compaction's output beside its inputs).
const RSS_FACTOR: f64 = 1.5;
const RSS_SLACK: u64 = 16 << 20;
const FDS_SLACK: usize = 8;
const DISK_FACTOR: f64 = 2.0;
const DISK_SLACK: u64 = 64 << 20;

/// The flatness verdict: whether every column stayed within its bounds, and a line saying
/// first, last and largest of each.
pub(crate) fn flatness(rows: &[Row]) -> (bool, String) {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return (false, "no minute was measured".to_owned());
    };
    let mut flat = true;
    let mut out = String::new();
    let mut judge = |name: &str, first: f64, last: f64, max: f64, bound: f64, unit: &str| {
        let ok = last <= bound;
        flat &= ok;
        let _ = write!(
            out,
            "{}{name} {first:.1} -> {last:.1} {unit} (max {max:.1}): {}",
            if out.is_empty() { "" } else { "; " },
            if ok { "flat" } else { "GROWING" }
        );
    };
    let rss = |row: &Row| row.rss.unwrap_or(0);
    let max_rss = rows.iter().map(rss).max().unwrap_or(0);
    judge(
        "rss",
        mib(rss(first)),
        mib(rss(last)),
        mib(max_rss),
        mib(rss(first)) * RSS_FACTOR + mib(RSS_SLACK),
        "MiB",
    );
    let fds = |row: &Row| row.fds.unwrap_or(0);
    let max_fds = rows.iter().map(fds).max().unwrap_or(0);
    judge(
        "fds",
        fds(first) as f64,
        fds(last) as f64,
        max_fds as f64,
        (fds(first) + FDS_SLACK) as f64,
        "",
    );
    let max_disk = rows.iter().map(|row| row.disk).max().unwrap_or(0);
    judge(
        "disk",
        mib(first.disk),
        mib(last.disk),
        mib(max_disk),
        mib(first.disk) * DISK_FACTOR + mib(DISK_SLACK),
        "MiB",
    );
    (flat, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rss_mib: u64, fds: usize, disk_mib: u64) -> Row {
        Row {
            rss: Some(rss_mib << 20),
            fds: Some(fds),
            disk: disk_mib << 20,
            ..Row::default()
        }
    }

    #[test]
    fn flat_columns_pass_and_a_leak_is_named() {
        let (flat, line) = flatness(&[row(20, 30, 10), row(40, 33, 50), row(24, 31, 12)]);
        assert!(flat, "{line}");
        assert!(
            line.contains("rss 20.0 -> 24.0 MiB (max 40.0): flat"),
            "{line}"
        );
        let (flat, line) = flatness(&[row(20, 30, 10), row(20, 90, 10)]);
        assert!(!flat);
        assert!(
            line.contains("fds 30.0 -> 90.0  (max 90.0): GROWING"),
            "{line}"
        );
        let (flat, line) = flatness(&[row(20, 30, 10), row(100, 30, 10)]);
        assert!(
            !flat && line.contains("rss 20.0 -> 100.0 MiB (max 100.0): GROWING"),
            "{line}"
        );
        assert!(!flatness(&[]).0);
    }

    #[test]
    fn a_row_prints_every_column() {
        let mut errors = BTreeMap::new();
        errors.insert("claim 503 unavailable".to_owned(), 12);
        let line = Row {
            minute: 2,
            life: 1,
            claims_per_sec: 812.4,
            requests_per_sec: 1200.0,
            p99_ms: 3.25,
            log: 4096,
            noise_refused: 77,
            errors,
            ..row(18, 40, 3)
        }
        .line();
        assert!(line.contains("812"), "{line}");
        assert!(line.ends_with("77  claim 503 unavailable: 12"), "{line}");
    }
}
