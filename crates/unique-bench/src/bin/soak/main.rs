//! `cargo xtask soak --minutes N`: the release `unique-server` on its default store (fjall,
//! on a small tmpfs of its own), with caller tokens, under a steady mixed load for N minutes
//! (logins, takeovers, logouts, leases, node registrations, requests with bad tokens), through
//! a full disk and a SIGKILL with a restart. One row per minute, then a verdict: nothing
//! acknowledged lost, the server recovered, the columns flat. Exits non-zero on a lost
//! acknowledgement or a server that did not recover. Needs root (the tmpfs).
// Counts, bytes and latencies stay far below 2^52, where u64 → f64 is exact.
#![allow(clippy::cast_precision_loss)]

mod check;
mod episodes;
mod history;
mod http;
mod load;
mod report;
mod server;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::episodes::{Episode, Episodes};
use crate::load::{OTHER_TOKEN, PROJECT, Share, Shared, TOKEN, lock};
use crate::report::Row;
use crate::server::{Disk, Launch};

/// A soak of unique-server: steady mixed load, a full disk and a SIGKILL, one row a minute.
#[derive(Debug, Parser)]
#[command(name = "soak")]
struct Args {
    /// How long to run, in minutes (at least 3: a minute before each episode, one after).
    #[arg(long)]
    minutes: u64,
    /// Minutes between episodes, which alternate: a full disk, then a SIGKILL and restart,
    /// then a full disk... (each 15 s past its minute). Default: a third of the run.
    #[arg(long)]
    episode_every: Option<u64>,
    /// Concurrent connections of the load, one worker each.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Users each connection logs in and out (each with two slots).
    #[arg(long, default_value_t = 1000)]
    users_per_connection: u64,
    /// Rooms each connection's two nodes take leases on.
    #[arg(long, default_value_t = 32)]
    rooms_per_connection: usize,
    /// Size of the tmpfs holding the fjall directory.
    #[arg(long, default_value = "1g")]
    disk_size: String,
    /// How long the disk stays full once claims are refused.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    full_hold: Duration,
    /// The unique-server binary to run (default: `cargo build --release -p unique-server`).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Run server and load wherever the scheduler puts them (default: the server pinned to
    /// the first CPU this process may use, the load to the second).
    #[arg(long)]
    no_pin: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("soak: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The episodes and when each starts, from the run's start.
fn schedule(minutes: u64, every: Option<u64>) -> Result<Vec<(Duration, Episode)>, String> {
    if minutes < 3 {
        return Err(format!(
            "--minutes {minutes}: at least 3 (a minute of load, the disk-full episode, the \
             SIGKILL)"
        ));
    }
    let every = every.unwrap_or((minutes / 3).max(1));
    if every == 0 || 2 * every >= minutes {
        return Err(format!(
            "--episode-every {every} with --minutes {minutes}: both episodes must start \
             before the last minute (2 x every < minutes)"
        ));
    }
    Ok((1..minutes.div_ceil(every))
        .map(|k| k * every)
        .zip([Episode::DiskFull, Episode::Kill].into_iter().cycle())
        .map(|(at, episode)| (Duration::from_secs(at * 60 + 15), episode))
        .collect())
}

fn run(args: &Args) -> Result<bool, String> {
    let plan = schedule(args.minutes, args.episode_every)?;
    if args.connections == 0 || args.users_per_connection == 0 {
        return Err("--connections and --users-per-connection must be at least 1".into());
    }
    let binary = match &args.server_bin {
        Some(path) => path.clone(),
        None => unique_testsupport::build_release_server()?,
    };
    let cpus = server::allowed_cpus().unwrap_or_default();
    let server_cpu = if let ([server, client, ..], false) = (&cpus[..], args.no_pin) {
        server::pin_self(*client)?;
        println!("pinned: unique-server on CPU {server}, the load on CPU {client}");
        Some(*server)
    } else {
        println!("unpinned: server and load share CPUs {cpus:?}");
        None
    };
    let disk = Arc::new(Disk::mount(&args.disk_size)?);
    let files = tempfile::Builder::new()
        .prefix("unique-soak-files-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let launch = Arc::new(Launch {
        binary,
        fjall_dir: disk.mount.join("unique.fjall"),
        tokens: secret(
            &files.path().join("tokens.json"),
            &format!(
                r#"{{"tokens": [{{"name": "soak", "token": "{TOKEN}", "projects": ["{PROJECT}"], "roles": ["admin"]}}, {{"name": "other", "token": "{OTHER_TOKEN}", "projects": ["other"]}}]}}"#
            ),
        )?,
        signing_keys: secret(
            &files.path().join("kick-keys"),
            "unique-soak-signing-key-0123456789abcdef\n",
        )?,
        log: files.path().join("server.log"),
        cpu: server_cpu,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build the runtime: {e}"))?;
    let verdict = runtime.block_on(soak(args, plan, launch, disk));
    drop(files);
    verdict
}

fn secret(path: &std::path::Path, text: &str) -> Result<PathBuf, String> {
    unique_testsupport::write_secret(path, text)
        .map(|()| path.to_path_buf())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

async fn soak(
    args: &Args,
    plan: Vec<(Duration, Episode)>,
    launch: Arc<Launch>,
    disk: Arc<Disk>,
) -> Result<bool, String> {
    let kick_base = check::kick_receiver().await?;
    let starting = Arc::clone(&launch);
    let server = tokio::task::spawn_blocking(move || starting.start())
        .await
        .map_err(|e| format!("starting the server panicked: {e}"))??;
    let shared = Arc::new(Shared::new(server.addr, server.pid(), kick_base));
    let start = Instant::now();
    println!(
        "soak: {} minutes, {} connections, unique-server (fjall on a {} tmpfs) at {}; episodes: {}",
        args.minutes,
        args.connections,
        args.disk_size,
        server.addr,
        plan.iter()
            .map(|(at, e)| format!("{e:?} at {}:{:02}", at.as_secs() / 60, at.as_secs() % 60))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let workers: Vec<_> = (0..args.connections)
        .map(|index| {
            let share = Share {
                index,
                workers: args.connections,
                users: args.users_per_connection,
                rooms: args.rooms_per_connection,
            };
            tokio::spawn(load::worker(Arc::clone(&shared), share))
        })
        .collect();
    let measured = Arc::clone(&launch);
    let mut episodes = Episodes {
        shared: Arc::clone(&shared),
        launch,
        server,
        disk: Arc::clone(&disk),
        start,
        failures: Vec::new(),
        checks: Vec::new(),
        full_hold: args.full_hold,
    };
    let episodes = tokio::spawn(async move {
        for (at, episode) in plan {
            tokio::time::sleep_until((start + at).into()).await;
            if !episodes.run(episode).await {
                break;
            }
        }
        episodes
    });
    println!("{}", report::HEADER);
    let rows = minutes(&shared, &measured, args.minutes, start).await;
    let mut episodes = episodes
        .await
        .map_err(|e| format!("the episodes panicked: {e}"))?;
    shared.stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = worker.await;
    }
    let last = check::check(&shared).await;
    let last = last.map_err(|e| format!("the final check: {e}"))?;
    if let Some(status) = episodes.server.exited() {
        episodes
            .failures
            .push(format!("unique-server exited: {status}"));
    }
    Ok(verdict(&shared, &rows, &episodes, &last))
}

/// One row at the end of every minute.
async fn minutes(shared: &Shared, launch: &Launch, minutes: u64, start: Instant) -> Vec<Row> {
    let mut rows = Vec::new();
    for minute in 1..=minutes {
        tokio::time::sleep_until((start + Duration::from_secs(minute * 60)).into()).await;
        let counts = std::mem::replace(&mut *lock(&shared.minute), load::Minute::new());
        let pid = shared.pid.load(Ordering::Relaxed);
        let row = Row {
            minute,
            life: shared.lives.load(Ordering::Relaxed),
            claims_per_sec: counts.claims_ok as f64 / 60.0,
            requests_per_sec: counts.requests as f64 / 60.0,
            p99_ms: counts.claim_latency.value_at_quantile(0.99) as f64 / 1000.0,
            rss: server::rss(pid),
            fds: server::open_fds(pid),
            disk: server::dir_bytes(&launch.fjall_dir),
            log: std::fs::metadata(&launch.log).map_or(0, |m| m.len()),
            noise_refused: counts.noise_refused,
            errors: counts.errors,
        };
        println!("{}", row.line());
        rows.push(row);
    }
    rows
}

/// Prints the verdict; true when nothing was lost and the server recovered every time.
fn verdict(shared: &Shared, rows: &[Row], episodes: &Episodes, last: &check::Checked) -> bool {
    let online = lock(&shared.losses).clone();
    for loss in online.iter().chain(&last.losses).take(20) {
        println!("LOST: {}", loss.0);
    }
    let broken = online.len()
        + last.losses.len()
        + episodes
            .checks
            .iter()
            .map(|c| c.losses.len())
            .sum::<usize>();
    let (flat, flatness) = report::flatness(rows);
    let ok = broken == 0 && episodes.failures.is_empty();
    println!(
        "verdict: {}; {}; read back at the end: {} sessions, {} rooms, {} nodes; {}{}",
        if broken == 0 {
            "nothing acknowledged lost".to_owned()
        } else {
            format!("{broken} acknowledgements LOST")
        },
        if episodes.failures.is_empty() {
            "the server recovered from every episode".to_owned()
        } else {
            format!("FAILED: {}", episodes.failures.join("; "))
        },
        last.sessions,
        last.rooms,
        last.nodes,
        flatness,
        if flat {
            ""
        } else {
            " (not failing the run: see the rows)"
        }
    );
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn episodes_alternate_inside_the_run() {
        let at = |m: u64| Duration::from_secs(m * 60 + 15);
        assert_eq!(
            schedule(3, None).unwrap(),
            [(at(1), Episode::DiskFull), (at(2), Episode::Kill)]
        );
        assert_eq!(
            schedule(30, Some(8)).unwrap(),
            [
                (at(8), Episode::DiskFull),
                (at(16), Episode::Kill),
                (at(24), Episode::DiskFull)
            ]
        );
        assert!(schedule(2, None).unwrap_err().contains("at least 3"));
        assert!(
            schedule(10, Some(5))
                .unwrap_err()
                .contains("2 x every < minutes")
        );
        assert!(schedule(10, Some(0)).is_err());
    }
}
