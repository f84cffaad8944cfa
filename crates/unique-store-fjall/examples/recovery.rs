//! How long the fjall store takes to open again after a crash, and what its directory holds
//! per session: `cargo run --release -p unique-store-fjall --example recovery -- DIR [SESSIONS]`.
//!
//! A child process fills a fresh `DIR` with SESSIONS first logins (random uids, one node's
//! owner, 256 claims in flight, so groups commit as under load) and then exits without
//! dropping the store, as a crash would: every acknowledged claim is in the fsynced journal,
//! nothing was flushed or compacted at shutdown. Then a second child opens `DIR` and reads
//! one session back, timing both; the parent prints the directory's size before and after.
//! Each step is a process of its own so the reopen starts with nothing of the fill in memory
//! but the page cache.

// Counts and byte sizes stay far below 2^52, where u64 → f64 is exact.
#![allow(clippy::cast_precision_loss)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::Instant;

use unique_core::{Key, Owner, Store, VacantClaim};
use unique_store_fjall::FjallStore;

/// Claims in flight while filling.
const IN_FLIGHT: u64 = 256;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["--fill", dir, sessions] => parse(sessions).and_then(|n| fill(Path::new(dir), n)),
        ["--reopen", dir, sessions] => parse(sessions).and_then(|n| reopen(Path::new(dir), n)),
        [dir] => run(Path::new(dir), 1_000_000),
        [dir, sessions] => parse(sessions).and_then(|n| run(Path::new(dir), n)),
        _ => Err("usage: recovery DIR [SESSIONS]".to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("recovery: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse(sessions: &str) -> Result<u64, String> {
    sessions
        .parse()
        .map_err(|e| format!("SESSIONS {sessions:?}: {e}"))
}

/// The fill and the reopen, each in a child process, and the directory's size after each.
fn run(dir: &Path, sessions: u64) -> Result<(), String> {
    if dir.exists() {
        return Err(format!("{} exists; give a fresh path", dir.display()));
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    for step in ["--fill", "--reopen"] {
        let status = Command::new(&me)
            .arg(step)
            .arg(dir)
            .arg(sessions.to_string())
            .status()
            .map_err(|e| format!("cannot run {step}: {e}"))?;
        if !status.success() {
            return Err(format!("{step} failed: {status}"));
        }
        let bytes = dir_bytes(dir)?;
        println!(
            "after {step}: {bytes} bytes in {}, {:.1} per session",
            dir.display(),
            bytes as f64 / sessions as f64
        );
    }
    Ok(())
}

/// The uid of the `i`th session: spread over 1..=10^8 like the bench's random users, and
/// distinct for every `i` below 10^8 (multiplying by a number coprime to 10^8 permutes the
/// residues modulo 10^8).
fn uid(i: u64) -> i64 {
    let spread = u128::from(i) * 2_654_435_761 % 100_000_000;
    i64::try_from(spread).unwrap_or(0) + 1
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// Writes `sessions` first logins, then exits without dropping the store (a crash).
fn fill(dir: &Path, sessions: u64) -> Result<(), String> {
    let store = Arc::new(FjallStore::open(dir).map_err(|e| e.to_string())?);
    let started = Instant::now();
    let written = runtime()?.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for lane in 0..IN_FLIGHT {
            let store = Arc::clone(&store);
            tasks.spawn(async move {
                let owner = Owner::new("local", "node-1", "http://127.0.0.1:9/kick");
                let mut written = 0_u64;
                for i in (lane..sessions).step_by(usize::try_from(IN_FLIGHT).unwrap_or(1)) {
                    let key = Key::new("bench", "prod", uid(i));
                    match store.claim_vacant(&key, &owner, &format!("c{i}")).await {
                        Ok(VacantClaim::Written { .. }) => written += 1,
                        Ok(VacantClaim::Occupied(_)) => {}
                        Ok(VacantClaim::Unread) => {
                            return Err("the store does not claim vacant records".to_owned());
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
                Ok(written)
            });
        }
        let mut written = 0;
        while let Some(lane) = tasks.join_next().await {
            written += lane.map_err(|e| e.to_string())??;
        }
        Ok::<u64, String>(written)
    })?;
    let took = started.elapsed();
    println!(
        "filled {written} sessions in {:.1} s ({:.0} claims/s)",
        took.as_secs_f64(),
        written as f64 / took.as_secs_f64()
    );
    // Every acknowledged claim is fsynced; leave without flushing anything more.
    std::process::exit(0);
}

/// Opens the crashed directory and reads the last session back, timing both.
fn reopen(dir: &Path, sessions: u64) -> Result<(), String> {
    let started = Instant::now();
    let store = FjallStore::open(dir).map_err(|e| e.to_string())?;
    let opened = started.elapsed();
    let key = Key::new("bench", "prod", uid(sessions - 1));
    let view = runtime()?
        .block_on(store.current(&key))
        .map_err(|e| e.to_string())?;
    if view.generation != 1 || view.owner.is_none() {
        return Err(format!("the last session did not survive: {view:?}"));
    }
    println!(
        "reopened in {:.3} s, first read {:.3} s after the open began",
        opened.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> Result<u64, String> {
    let mut total = 0;
    let mut pending: Vec<PathBuf> = vec![dir.to_owned()];
    while let Some(path) = pending.pop() {
        for entry in std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))? {
            let entry = entry.map_err(|e| e.to_string())?;
            let meta = entry.metadata().map_err(|e| e.to_string())?;
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    Ok(total)
}
