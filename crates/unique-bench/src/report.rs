//! The summary table printed at the end of a run.

use std::fmt::Write as _;

use crate::load::{LoadPlan, Measurement};

/// One line describing the run, printed above the table.
pub(crate) fn plan_line(plan: &LoadPlan, client_threads: usize) -> String {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    format!(
        "{} connections (one request in flight each), {:?} measured after {:?} warm-up, {}, \
         {:.0}% replays; client {client_threads} threads; {cores} cores shared by client and server",
        plan.connections,
        plan.duration,
        plan.warmup,
        plan.keys.describe(),
        plan.replay_share * 100.0
    )
}

/// The table: one row per target, then the errors by kind. `rows` holds
/// `(label, is the baseline, measurement)`; ratios are to the first baseline.
pub(crate) fn table(rows: &[(&str, bool, Measurement)]) -> String {
    let baseline = rows
        .iter()
        .find(|(_, is_baseline, _)| *is_baseline)
        .map(|(_, _, m)| m.throughput());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>10} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9} {:>14}",
        "target", "ok", "ok/s", "p50", "p90", "p99", "max", "errors", "vs redis", "cpu µs/req c+s"
    );
    for (label, _, m) in rows {
        let h = &m.latency;
        let ratio = match baseline {
            Some(base) if base > 0.0 => format!("{:.2}x", m.throughput() / base),
            _ => "-".to_owned(),
        };
        let cpu = m
            .cpu_per_request()
            .map_or_else(|| "-".to_owned(), |(c, s)| format!("{c:.1}+{s:.1}"));
        let _ = writeln!(
            out,
            "{label:<22} {:>10} {:>9.0} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9} {:>14}",
            h.len(),
            m.throughput(),
            millis(h.value_at_quantile(0.50)),
            millis(h.value_at_quantile(0.90)),
            millis(h.value_at_quantile(0.99)),
            millis(h.max()),
            m.error_count(),
            ratio,
            cpu
        );
    }
    out.push_str(
        "cpu µs/req c+s: CPU time per request sent (warm-up included) of the client \
         (this process) + the server; less sensitive to other load on the machine than ok/s\n",
    );
    let errors: Vec<_> = rows
        .iter()
        .flat_map(|(label, _, m)| m.errors.iter().map(move |(kind, n)| (label, kind, n)))
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

/// Nanoseconds as milliseconds with three decimals (`0.512ms`).
fn millis(nanos: u64) -> String {
    format!("{:.3}ms", nanos as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use hdrhistogram::Histogram;

    use super::*;
    use crate::cpu::CpuTimes;

    fn measurement(latencies_us: &[u64], errors: &[(&str, u64)]) -> Measurement {
        let mut latency = Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for us in latencies_us {
            latency.record(us * 1000).unwrap();
        }
        Measurement {
            latency,
            errors: errors
                .iter()
                .map(|(k, n)| ((*k).to_owned(), *n))
                .collect::<BTreeMap<_, _>>(),
            window: Duration::from_secs(1),
            sent: 10,
            cpu: Some(CpuTimes {
                own: Duration::from_micros(150),
                children: Duration::from_micros(200),
            }),
        }
    }

    #[test]
    fn table_has_ratio_to_the_baseline_and_lists_errors() {
        let rows = [
            ("redis", true, measurement(&[100, 200, 300, 400], &[])),
            (
                "memory",
                false,
                measurement(&[100; 8], &[("http 503 unavailable", 2)]),
            ),
        ];
        let text = table(&rows);
        let lines: Vec<_> = text.lines().collect();
        assert!(
            lines[1].starts_with("redis ") && lines[1].contains(" 1.00x "),
            "{text}"
        );
        assert!(
            lines[2].contains(" 0.100ms ") && lines[2].contains(" 2.00x "),
            "{text}"
        );
        assert!(lines[2].ends_with(" 15.0+20.0"), "{text}");
        assert!(
            text.contains("memory                 http 503 unavailable: 2"),
            "{text}"
        );
    }

    #[test]
    fn millis_has_three_decimals() {
        assert_eq!(millis(512_300), "0.512ms");
    }
}
