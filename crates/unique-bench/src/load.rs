//! The closed-loop driver shared by every target: N connections, each with one
//! request in flight, a warm-up, then a fixed measured window.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::io::{IsTerminal, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::keys::KeyChoice;

/// What one run does, identical for every target.
#[derive(Debug, Clone)]
pub(crate) struct LoadPlan {
    /// Keep-alive connections, one request in flight each.
    pub(crate) connections: usize,
    /// Unmeasured load first.
    pub(crate) warmup: Duration,
    /// The measured window.
    pub(crate) duration: Duration,
    /// Key distribution.
    pub(crate) keys: KeyChoice,
    /// Share of requests that retry the previous claim with its claim_id.
    pub(crate) replay_share: f64,
    /// The round (from 1): with random users, each round has its own key sequence.
    pub(crate) round: usize,
}

/// The owner JSON of every claim, on every target. One endpoint for every
/// connection models one node logging its users in again: the Arbiter's kick
/// decision is `self-replace-skipped` (no kick call), so the load measures the
/// read, the decision and the fenced write, like the Redis script.
pub(crate) const OWNER: &str =
    r#"{"region":"eu","cluster":"c1","endpoint":"http://127.0.0.1:9/kick"}"#;

/// One claim a connection sends: key `bench#prod#uid`, this claim_id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim<'a> {
    pub(crate) uid: u64,
    pub(crate) claim_id: &'a str,
}

/// Why a request failed: a short kind for the error table, and whether the
/// connection is broken and must be replaced.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) kind: String,
    pub(crate) broken: bool,
}

impl Failure {
    /// An answer that was not a success; the connection stays usable.
    pub(crate) fn answer(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            broken: false,
        }
    }

    /// A transport failure; the connection is dropped and replaced.
    pub(crate) fn broken(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            broken: true,
        }
    }
}

/// Opens connections to one target.
pub(crate) trait Connector: Clone + Send + Sync + 'static {
    /// One open connection.
    type Client: Client;
    /// Opens a connection.
    fn connect(&self) -> impl Future<Output = Result<Self::Client, Failure>> + Send;
}

/// One open connection to a target.
pub(crate) trait Client: Send + 'static {
    /// Sends one claim and waits for its answer.
    fn claim(&mut self, claim: Claim<'_>) -> impl Future<Output = Result<(), Failure>> + Send;
}

/// The result of measuring one target, for one round or several summed.
#[derive(Debug)]
pub(crate) struct Measurement {
    /// Latency of the successful requests of the measured window, in nanoseconds.
    pub(crate) latency: Histogram<u64>,
    /// Failed requests of the measured window, by kind.
    pub(crate) errors: BTreeMap<String, u64>,
    /// The measured window.
    pub(crate) window: Duration,
    /// Requests sent in all, warm-up included.
    pub(crate) sent: u64,
    /// CPU time `(client, server)` over the whole round, warm-up included
    /// (filled in by the caller, which knows the server process).
    pub(crate) cpu: Option<(Duration, Duration)>,
    /// Bytes the server sent to storage over the whole round, warm-up included (filled in
    /// by the caller, from `/proc/<pid>/io`).
    pub(crate) written: Option<u64>,
}

impl Measurement {
    /// Nothing measured yet, over a window of `window`.
    pub(crate) fn empty(window: Duration) -> Self {
        Self {
            latency: new_histogram(),
            errors: BTreeMap::new(),
            window,
            sent: 0,
            cpu: None,
            written: None,
        }
    }

    /// The rounds of one target as one measurement: latencies, errors, requests,
    /// windows and CPU time added up.
    pub(crate) fn sum(rounds: &[Measurement]) -> Self {
        let mut total = Self::empty(Duration::ZERO);
        total.cpu = Some((Duration::ZERO, Duration::ZERO));
        total.written = Some(0);
        for round in rounds {
            total.add_requests(round);
            total.window += round.window;
            total.sent += round.sent;
            total.cpu = total
                .cpu
                .zip(round.cpu)
                .map(|((c, s), (rc, rs))| (c + rc, s + rs));
            total.written = total.written.zip(round.written).map(|(t, r)| t + r);
        }
        total
    }

    /// Adds `other`'s latencies and errors (same window: another connection).
    fn add_requests(&mut self, other: &Measurement) {
        self.latency
            .add(&other.latency)
            .expect("histograms with equal bounds merge");
        for (kind, count) in &other.errors {
            *self.errors.entry(kind.clone()).or_default() += count;
        }
    }

    /// Successful requests per second in the measured window.
    pub(crate) fn throughput(&self) -> f64 {
        self.latency.len() as f64 / self.window.as_secs_f64()
    }

    /// Failed requests in the measured window.
    pub(crate) fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Microseconds of CPU per request sent, `(client, server)`.
    pub(crate) fn cpu_per_request(&self) -> Option<(f64, f64)> {
        let (client, server) = self.cpu?;
        let per = |d: Duration| d.as_secs_f64() * 1e6 / self.sent.max(1) as f64;
        Some((per(client), per(server)))
    }

    /// Bytes the server sent to storage per request sent.
    pub(crate) fn written_per_request(&self) -> Option<f64> {
        Some(self.written? as f64 / self.sent.max(1) as f64)
    }
}

/// Latencies up to a minute, three significant digits.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

#[derive(Debug, Clone, Copy)]
struct Phases {
    measure_from: Instant,
    end: Instant,
}

/// Runs `plan` against the target behind `connector` and returns what the
/// measured window saw. A progress line on stderr shows the run.
pub(crate) async fn run<C: Connector>(label: &str, connector: &C, plan: &LoadPlan) -> Measurement {
    let start = Instant::now();
    let phases = Phases {
        measure_from: start + plan.warmup,
        end: start + plan.warmup + plan.duration,
    };
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..plan.connections)
        .map(|id| {
            let worker = Worker {
                id,
                connector: connector.clone(),
                plan: plan.clone(),
                phases,
                done: Arc::clone(&done),
            };
            tokio::spawn(worker.run())
        })
        .collect();
    let progress = tokio::spawn(progress(label.to_owned(), start, phases, Arc::clone(&done)));

    let mut measurement = Measurement::empty(plan.duration);
    for worker in workers {
        measurement.add_requests(&worker.await.expect("load worker panicked"));
    }
    progress.abort();
    let _ = progress.await;
    measurement.sent = done.load(Ordering::Relaxed);
    eprintln!(
        "\r{label:<26} done: {:.0} ok/s, {} errors; {} requests sent in all (warm-up included){:10}",
        measurement.throughput(),
        measurement.error_count(),
        measurement.sent,
        ""
    );
    measurement
}

struct Worker<C> {
    id: usize,
    connector: C,
    plan: LoadPlan,
    phases: Phases,
    done: Arc<AtomicU64>,
}

impl<C: Connector> Worker<C> {
    async fn run(self) -> Measurement {
        // Seeded per connection (and round), so every target sees the same key sequence.
        let mut rng = fastrand::Rng::with_seed(self.plan.keys.seed(self.id, self.plan.round));
        let mut part = Measurement::empty(self.plan.duration);
        let mut client: Option<C::Client> = None;
        let mut claim_id = String::new();
        let mut uid = 0;
        let mut sequence = 0_u64;
        loop {
            let started = Instant::now();
            if started >= self.phases.end {
                break;
            }
            let measured = started >= self.phases.measure_from;
            let connection = match &mut client {
                Some(connection) => connection,
                None => match self.connector.connect().await {
                    Ok(connection) => client.insert(connection),
                    Err(failure) => {
                        if measured {
                            *part.errors.entry(failure.kind).or_default() += 1;
                        }
                        // Do not spin on a target that refuses connections.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
            };
            let replay = uid != 0 && rng.f64() < self.plan.replay_share;
            if !replay {
                uid = self.plan.keys.pick(&mut rng);
                sequence += 1;
                write_claim_id(&mut claim_id, self.plan.round, self.id, sequence);
            }
            let result = connection
                .claim(Claim {
                    uid,
                    claim_id: &claim_id,
                })
                .await;
            let took = started.elapsed();
            self.done.fetch_add(1, Ordering::Relaxed);
            match result {
                Ok(()) if measured => {
                    let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
                    part.latency.saturating_record(nanos.max(1));
                }
                Ok(()) => {}
                Err(failure) => {
                    if failure.broken {
                        client = None;
                    }
                    if measured {
                        *part.errors.entry(failure.kind).or_default() += 1;
                    }
                }
            }
        }
        part
    }
}

/// The claim_id of a connection's `sequence`th claim of `round`: unique in the run. A
/// fixed key set repeats its key sequence every round, and the server answers a claim_id that
/// won an earlier gen as `superseded` (C9), Redis one still on its key as a replay: a
/// claim_id without the round would make later rounds measure those instead of logins.
pub(crate) fn write_claim_id(out: &mut String, round: usize, connection: usize, sequence: u64) {
    out.clear();
    let _ = write!(out, "r{round}c{connection}-{sequence}");
}

/// Prints a progress line about four times a second (on a terminal; every two
/// seconds otherwise, so logs stay short).
async fn progress(label: String, start: Instant, phases: Phases, done: Arc<AtomicU64>) {
    let terminal = std::io::stderr().is_terminal();
    let tick = if terminal {
        Duration::from_millis(250)
    } else {
        Duration::from_secs(2)
    };
    let total = phases.end - start;
    let mut last = (start, 0);
    loop {
        tokio::time::sleep(tick).await;
        let now = Instant::now();
        let count = done.load(Ordering::Relaxed);
        let rate = (count - last.1) as f64 / (now - last.0).as_secs_f64();
        last = (now, count);
        let elapsed = (now - start).min(total);
        let phase = if now < phases.measure_from {
            "warm-up"
        } else {
            "measure"
        };
        let line = format!(
            "{label:<26} {} {phase} {:>5.1}/{:.1} s {:>9.0} req/s",
            bar(elapsed.as_secs_f64() / total.as_secs_f64(), 30),
            elapsed.as_secs_f64(),
            total.as_secs_f64(),
            rate
        );
        let mut stderr = std::io::stderr().lock();
        let _ = if terminal {
            write!(stderr, "\r{line}")
        } else {
            writeln!(stderr, "{line}")
        };
        let _ = stderr.flush();
    }
}

fn bar(fraction: f64, width: usize) -> String {
    // Rounding a clamped fraction of a small width: the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let filled = ((fraction.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_ids_differ_across_rounds_and_connections() {
        let mut ids = std::collections::HashSet::new();
        let mut id = String::new();
        for round in 1..=12 {
            for connection in 0..12 {
                for sequence in 1..=12 {
                    write_claim_id(&mut id, round, connection, sequence);
                    assert!(ids.insert(id.clone()), "{id} twice");
                }
            }
        }
        write_claim_id(&mut id, 1, 2, 3);
        assert_eq!(id, "r1c2-3");
    }

    #[test]
    fn bar_fills_in_proportion() {
        assert_eq!(bar(0.0, 4), "[....]");
        assert_eq!(bar(0.5, 4), "[##..]");
        assert_eq!(bar(1.7, 4), "[####]");
    }
}
