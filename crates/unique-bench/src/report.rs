//! The summary table printed at the end of a run.

use std::fmt::Write as _;

use crate::load::{LoadPlan, Measurement};

/// One line describing the run, printed above the table; `placement` says where the
/// servers and the client ran (pinned or not, on which CPUs).
pub(crate) fn plan_line(
    plan: &LoadPlan,
    rounds: usize,
    client_threads: usize,
    server_workers: usize,
    placement: &str,
) -> String {
    let workers = if server_workers == 0 {
        "the server's default (all CPUs but one)".to_owned()
    } else {
        server_workers.to_string()
    };
    format!(
        "{} connections (one request in flight each), {rounds} rounds of {:?} measured after \
         {:?} warm-up per target, {}, {:.0}% replays; client {client_threads} threads, \
         unique-server {workers} workers; {placement}",
        plan.connections,
        plan.duration,
        plan.warmup,
        plan.keys.describe(),
        plan.replay_share * 100.0
    )
}

/// One target's rounds.
pub(crate) struct Row {
    pub(crate) label: &'static str,
    pub(crate) role: Role,
    pub(crate) rounds: Vec<Measurement>,
}

/// What a row's throughput is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The Redis script: every row's `vs redis` ratio is to this one.
    Baseline,
    /// The Redis script with `appendfsync always`: every row's `vs redis aof` ratio
    /// is to this one (the like-for-like baseline of the durable targets).
    DurableBaseline,
    /// unique on the memory store: every row's `vs memory` ratio is to this one.
    Memory,
    /// Any other target.
    Other,
}

/// The table: one row per target with its rounds summed, then the errors by
/// kind. Each ratio (to Redis, to the memory store) is the median of the
/// per-round ratios (each round measures the targets seconds apart), with their
/// range.
pub(crate) fn table(rows: &[Row]) -> String {
    let find = |role| rows.iter().find(|row| row.role == role);
    let (baseline, durable, memory) = (
        find(Role::Baseline),
        find(Role::DurableBaseline),
        find(Role::Memory),
    );
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<29} {:>10} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>20} {:>20} {:>20} {:>14} {:>9}",
        "target",
        "ok",
        "ok/s",
        "p50",
        "p90",
        "p99",
        "max",
        "errors",
        "vs redis (range)",
        "vs redis aof (range)",
        "vs memory (range)",
        "cpu µs/req c+s",
        "B/req"
    );
    for row in rows {
        let total = Measurement::sum(&row.rounds);
        let h = &total.latency;
        let ratio =
            |base: Option<&Row>| base.map_or_else(|| "-".to_owned(), |b| ratio_text(row, b));
        let cpu = total
            .cpu_per_request()
            .map_or_else(|| "-".to_owned(), |(c, s)| format!("{c:.1}+{s:.1}"));
        let written = total
            .written_per_request()
            .map_or_else(|| "-".to_owned(), |b| format!("{b:.0}"));
        let _ = writeln!(
            out,
            "{:<29} {:>10} {:>9.0} {:>8} {:>8} {:>8} {:>8} {:>7} {:>20} {:>20} {:>20} {:>14} {:>9}",
            row.label,
            h.len(),
            total.throughput(),
            millis(h.value_at_quantile(0.50)),
            millis(h.value_at_quantile(0.90)),
            millis(h.value_at_quantile(0.99)),
            millis(h.max()),
            total.error_count(),
            ratio(baseline),
            ratio(durable),
            ratio(memory),
            cpu,
            written
        );
    }
    out.push_str(
        "cpu µs/req c+s: CPU time per request sent (warm-up included) of the client \
         (this process) + the server; less sensitive to other load on the machine than ok/s\n\
         B/req: bytes the server process sent to storage per request sent (/proc/<pid>/io \
         write_bytes: its files' pages as they are dirtied, its background flushes and \
         compactions included; \
         a PostgreSQL's own processes are not counted)\n",
    );
    let errors: Vec<_> = rows
        .iter()
        .flat_map(|row| {
            Measurement::sum(&row.rounds)
                .errors
                .into_iter()
                .map(move |(kind, n)| (row.label, kind, n))
        })
        .collect();
    if errors.is_empty() {
        out.push_str("errors by kind: none\n");
    } else {
        out.push_str("errors by kind:\n");
        for (label, kind, count) in errors {
            let _ = writeln!(out, "  {label:<22} {kind}: {count}");
        }
    }
    out
}

/// The like-for-like ratios of every pass side by side: one line per comparison (`labels`),
/// one column per pass (`passes`: its heading and its cells, in `labels`' order).
pub(crate) fn ratios_side_by_side(labels: &[&str], passes: &[(String, Vec<String>)]) -> String {
    let label_width = labels.iter().map(|label| label.len()).max().unwrap_or(0);
    let widths: Vec<usize> = passes
        .iter()
        .map(|(heading, cells)| {
            cells
                .iter()
                .map(String::len)
                .chain([heading.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::from(
        "like for like: median of the per-round throughput ratios (range), every pass\n",
    );
    let _ = write!(out, "{:<label_width$}", "");
    for ((heading, _), width) in passes.iter().zip(&widths) {
        let _ = write!(out, "  {heading:>width$}");
    }
    out.push('\n');
    for (line, label) in labels.iter().enumerate() {
        let _ = write!(out, "{label:<label_width$}");
        for ((_, cells), width) in passes.iter().zip(&widths) {
            let cell = cells.get(line).map_or("-", String::as_str);
            let _ = write!(out, "  {cell:>width$}");
        }
        out.push('\n');
    }
    out
}

/// `1.21x (1.10-1.30)`: the median of the per-round throughput ratios to `base`.
pub(crate) fn ratio_text(row: &Row, base: &Row) -> String {
    let mut ratios: Vec<f64> = row
        .rounds
        .iter()
        .zip(&base.rounds)
        .filter(|(_, b)| b.throughput() > 0.0)
        .map(|(m, b)| m.throughput() / b.throughput())
        .collect();
    if ratios.is_empty() {
        return "-".to_owned();
    }
    ratios.sort_by(f64::total_cmp);
    let middle = ratios.len() / 2;
    let median = if ratios.len() % 2 == 1 {
        ratios[middle]
    } else {
        f64::midpoint(ratios[middle - 1], ratios[middle])
    };
    if ratios.len() == 1 {
        format!("{median:.2}x")
    } else {
        format!(
            "{median:.2}x ({:.2}-{:.2})",
            ratios[0],
            ratios[ratios.len() - 1]
        )
    }
}

/// Nanoseconds as milliseconds with three decimals (`0.512ms`).
fn millis(nanos: u64) -> String {
    format!("{:.3}ms", nanos as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn round(latencies_us: &[u64], errors: &[(&str, u64)]) -> Measurement {
        let mut m = Measurement::empty(Duration::from_secs(1));
        for us in latencies_us {
            m.latency.record(us * 1000).unwrap();
        }
        m.errors = errors.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect();
        m.sent = 10;
        m.cpu = Some((Duration::from_micros(150), Duration::from_micros(200)));
        m.written = Some(1000);
        m
    }

    #[test]
    fn table_sums_rounds_and_takes_the_median_ratio() {
        let rows = [
            Row {
                label: "redis",
                role: Role::Baseline,
                rounds: vec![
                    round(&[100; 4], &[]),
                    round(&[100; 4], &[]),
                    round(&[100; 4], &[]),
                ],
            },
            Row {
                label: "memory",
                role: Role::Memory,
                // Per-round ratios 2, 1 and 3: median 2.
                rounds: vec![
                    round(&[100; 8], &[("http 503 unavailable", 2)]),
                    round(&[100; 4], &[]),
                    round(&[100; 12], &[("http 503 unavailable", 1)]),
                ],
            },
        ];
        let text = table(&rows);
        let lines: Vec<_> = text.lines().collect();
        assert!(
            lines[1].starts_with("redis ")
                && lines[1].contains(" 12 ")
                && lines[1].contains(" 1.00x (1.00-1.00) "),
            "{text}"
        );
        assert!(
            lines[2].contains(" 24 ")
                && lines[2].contains(" 8 ")
                && lines[2].contains(" 0.100ms ")
                && lines[2].contains(" 2.00x (1.00-3.00) "),
            "{text}"
        );
        assert!(lines[2].ends_with(" 15.0+20.0       100"), "{text}");
        // No durable Redis measured: its column is "-" on every row.
        assert!(
            lines[2].contains(" 2.00x (1.00-3.00)                    - "),
            "{text}"
        );
        assert!(
            text.contains("memory                 http 503 unavailable: 3"),
            "{text}"
        );
    }

    #[test]
    fn one_round_has_no_range_and_no_baseline_no_ratio() {
        let base = Row {
            label: "redis",
            role: Role::Baseline,
            rounds: vec![round(&[100; 4], &[])],
        };
        let row = Row {
            label: "sqlite",
            role: Role::Other,
            rounds: vec![round(&[100; 6], &[])],
        };
        assert_eq!(ratio_text(&row, &base), "1.50x");
        let text = table(&[row]);
        // Neither Redis (either kind) nor memory measured: every ratio column is "-".
        let cells: Vec<_> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            cells[cells.len() - 5..cells.len() - 2],
            ["-", "-", "-"],
            "{text}"
        );
    }

    #[test]
    fn ratios_side_by_side_puts_a_pass_per_column() {
        let labels = ["a / b", "c / d longer"];
        let passes = [
            (
                "pinned, random users".to_owned(),
                vec!["1.00x (0.90-1.10)".to_owned(), "-".to_owned()],
            ),
            ("unpinned, 10 keys".to_owned(), vec!["2.00x".to_owned()]),
        ];
        let text = ratios_side_by_side(&labels, &passes);
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[1].ends_with("pinned, random users  unpinned, 10 keys"),
            "{text}"
        );
        assert_eq!(
            lines[2], "a / b            1.00x (0.90-1.10)              2.00x",
            "{text}"
        );
        // A pass with fewer cells than comparisons shows "-".
        assert!(
            lines[3].starts_with("c / d longer ") && lines[3].ends_with("  -"),
            "{text}"
        );
    }

    #[test]
    fn millis_has_three_decimals() {
        assert_eq!(millis(512_300), "0.512ms");
    }
}
