//! Memory and disk per session (`--resident-sessions N`): fresh servers, each loaded with the
//! same N sessions through the claim the throughput passes send, and each process's resident
//! set (`VmRSS` of `/proc/<pid>/status`) read before and after.
//!
//! Like for like: every target gets the same N distinct uids (spread over the random users'
//! range, so keys are as long as in the throughput passes), one owner (the bench's one node
//! endpoint, so unique's owner sharing is what a node logging its users in gets), and a fresh
//! claim_id per session, sent over the same connections and client code. Redis runs the claim
//! script with persistence off and stores gen, owner and cid in a hash per key; its
//! `INFO memory` `used_memory` is printed as a second figure (what its allocator was asked for,
//! without fragmentation). The durable stores also print the bytes their files take once the
//! load has settled.
//!
//! The "before" reading comes after every connection has sent its first claim, so what a
//! server allocates once (connection buffers, lazily built state) is not counted per session;
//! those first claims are not counted either.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use crate::keys::RANDOM_USERS;
use crate::load::{Claim, Client, Connector, write_claim_id};
use crate::redis_client::info_field;
use crate::target::{Connector as Target, Running};

/// Spreads session `i` over `1..=RANDOM_USERS`: `1 + i * STRIDE mod RANDOM_USERS` is a
/// bijection of `0..RANDOM_USERS` since the stride shares no factor with 10^8 (odd, not a
/// multiple of 5), and consecutive sessions land far apart.
const STRIDE: u64 = 61_803_399;

/// How long the durable stores get to settle after a load: their files are measured once
/// their total size has not changed for [`SETTLED_FOR`], or after this long.
const SETTLE_LIMIT: Duration = Duration::from_mins(1);

/// See [`SETTLE_LIMIT`]; at least [`IDLE_BEFORE_READING`].
const SETTLED_FOR: Duration = Duration::from_secs(3);

/// How long the connections sit idle before each reading: Redis frees a client's query buffer
/// once it has been idle for 2 s, so both readings see the same buffers (without the wait, 256
/// connections' buffers, allocated at the first and freed after the last claim, move the
/// figure by about 5 MB).
const IDLE_BEFORE_READING: Duration = Duration::from_secs(3);

/// The uid of session `i` (`i < RANDOM_USERS`).
pub(crate) fn uid(i: u64) -> u64 {
    1 + (i % RANDOM_USERS) * STRIDE % RANDOM_USERS
}

/// What one target's load gave.
pub(crate) struct Loaded {
    /// Sessions claimed after the "before" reading.
    pub(crate) counted: u64,
    /// How long the claims after the "before" reading took.
    pub(crate) took: Duration,
    /// Growth of the server's `VmRSS`, in bytes.
    pub(crate) resident: i64,
    /// Growth of Redis's `used_memory`, in bytes (Redis only).
    pub(crate) used_memory: Option<i64>,
    /// The store's files after the load settled, when it has files.
    pub(crate) disk: Option<Disk>,
}

/// The bytes of a store's files.
pub(crate) struct Disk {
    /// Sum of the files' lengths.
    pub(crate) length: u64,
    /// Sum of the blocks allocated to them (`st_blocks` × 512).
    pub(crate) allocated: u64,
    /// How long the files took to stop changing after the load (or [`SETTLE_LIMIT`]).
    pub(crate) settled_after: Duration,
    /// Whether they did within [`SETTLE_LIMIT`].
    pub(crate) settled: bool,
}

/// Loads `sessions` sessions into `running` over `connections` connections and reads what it
/// cost.
pub(crate) fn measure(
    runtime: &tokio::runtime::Runtime,
    running: &Running,
    sessions: u64,
    connections: usize,
) -> Result<Loaded, String> {
    let label = running.target.label();
    let pid = running.pid;
    let redis = running.redis_addr;
    let no_rss = || format!("cannot read the VmRSS of {label} (pid {pid})");
    let used_memory = |when: &'static str| async move {
        match redis {
            None => Ok(None),
            Some(addr) => info_field(addr, "memory", "used_memory")
                .await
                .map(Some)
                .map_err(|f| format!("INFO memory {when} the load: {}", f.kind)),
        }
    };
    let baseline = || async move {
        tokio::time::sleep(IDLE_BEFORE_READING).await;
        (vm_rss(pid), used_memory("before").await)
    };
    let (counted, took, (resident_before, used_before)) = match &running.connector {
        Target::Redis(connector) => {
            runtime.block_on(load(label, connector, sessions, connections, baseline))
        }
        Target::Http(connector) => {
            runtime.block_on(load(label, connector, sessions, connections, baseline))
        }
    }?;
    // The durable stores settle for at least as long as the wait.
    let disk = if running.store_files.is_empty() {
        std::thread::sleep(IDLE_BEFORE_READING);
        None
    } else {
        Some(settle(label, &running.store_files))
    };
    let resident_after = vm_rss(pid).ok_or_else(no_rss)?;
    let used_after = runtime.block_on(used_memory("after"))?;
    Ok(Loaded {
        counted,
        took,
        resident: signed(resident_after) - signed(resident_before.ok_or_else(no_rss)?),
        used_memory: used_before?
            .zip(used_after)
            .map(|(before, after)| signed(after) - signed(before)),
        disk,
    })
}

fn signed(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// Claims sessions `0..sessions`, connection `c` taking those with `i % connections == c`.
/// Every connection sends its first claim, then `at_baseline` runs (the "before" reading),
/// then the rest follow. Returns how many claims came after the reading and how long they
/// took, with what `at_baseline` read. A claim whose connection broke is sent again (same claim_id: a
/// replay) on a new connection; a refusal ends the load with an error, since the sessions
/// would no longer be the same on every target.
async fn load<C, F, Fut>(
    label: &str,
    connector: &C,
    sessions: u64,
    connections: usize,
    at_baseline: F,
) -> Result<(u64, Duration, Fut::Output), String>
where
    C: Connector,
    F: FnOnce() -> Fut,
    Fut: std::future::Future,
{
    let connections = u64::try_from(connections)
        .unwrap_or(u64::MAX)
        .clamp(1, sessions.max(1));
    let parties = usize::try_from(connections).expect("at most one connection per session") + 1;
    let (first_done, go_on) = (
        Arc::new(Barrier::new(parties)),
        Arc::new(Barrier::new(parties)),
    );
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..connections)
        .map(|c| {
            let connector = connector.clone();
            let (first_done, go_on, done) = (
                Arc::clone(&first_done),
                Arc::clone(&go_on),
                Arc::clone(&done),
            );
            tokio::spawn(async move {
                let connection = usize::try_from(c).expect("fewer connections than usize");
                let mut client = None;
                let mut claim_id = String::new();
                let mut sequence = 0;
                let mut next = c;
                let mut claim = async |i: u64, sequence: u64| {
                    write_claim_id(&mut claim_id, 1, connection, sequence);
                    claim_once(&connector, &mut client, uid(i), &claim_id).await
                };
                // Every connection waits at the barriers, even one whose first claim failed,
                // or the others would wait for it forever.
                let first = if next < sessions {
                    sequence += 1;
                    next += connections;
                    claim(c, sequence).await
                } else {
                    Ok(())
                };
                first_done.wait().await;
                go_on.wait().await;
                first?;
                while next < sessions {
                    sequence += 1;
                    claim(next, sequence).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                    next += connections;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    first_done.wait().await;
    let read = at_baseline().await;
    go_on.wait().await;
    let started = Instant::now();
    let progress = tokio::spawn({
        let (label, done) = (label.to_owned(), Arc::clone(&done));
        async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                eprintln!(
                    "{label:<26} resident load: {} of {sessions} sessions",
                    done.load(Ordering::Relaxed) + connections
                );
            }
        }
    });
    let mut failure = None;
    for worker in workers {
        if let Err(message) = worker.await.map_err(|e| e.to_string()).and_then(|r| r) {
            failure.get_or_insert(message);
        }
    }
    progress.abort();
    match failure {
        Some(message) => Err(format!("{label}: resident load failed: {message}")),
        None => Ok((done.load(Ordering::Relaxed), started.elapsed(), read)),
    }
}

/// How many times a claim is sent again on a new connection after its connection broke.
const ATTEMPTS: usize = 3;

async fn claim_once<C: Connector>(
    connector: &C,
    client: &mut Option<C::Client>,
    uid: u64,
    claim_id: &str,
) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        let connection = match client {
            Some(connection) => connection,
            None => match connector.connect().await {
                Ok(connection) => client.insert(connection),
                Err(failure) => {
                    last = failure.kind;
                    continue;
                }
            },
        };
        match connection.claim(Claim { uid, claim_id }).await {
            Ok(()) => return Ok(()),
            Err(failure) if failure.broken => {
                *client = None;
                last = failure.kind;
            }
            Err(failure) => return Err(format!("uid {uid}: {}", failure.kind)),
        }
    }
    Err(format!("uid {uid}: {last} ({ATTEMPTS} attempts)"))
}

/// Waits until the total size of `files` has not changed for [`SETTLED_FOR`] (background
/// checkpoints, flushes and compactions done), at most [`SETTLE_LIMIT`], and returns it.
fn settle(label: &str, files: &[PathBuf]) -> Disk {
    let started = Instant::now();
    let mut last = disk_usage(files);
    let mut stable_since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = disk_usage(files);
        if now != last {
            last = now;
            stable_since = Instant::now();
        }
        if stable_since.elapsed() >= SETTLED_FOR {
            return Disk {
                length: last.0,
                allocated: last.1,
                settled_after: stable_since - started,
                settled: true,
            };
        }
        if started.elapsed() >= SETTLE_LIMIT {
            eprintln!("unique-bench: {label}: files still changing after {SETTLE_LIMIT:?}");
            return Disk {
                length: last.0,
                allocated: last.1,
                settled_after: started.elapsed(),
                settled: false,
            };
        }
    }
}

/// `(sum of lengths, sum of allocated bytes)` of `paths`, directories walked; a path that does
/// not exist counts nothing (a WAL file may come and go).
fn disk_usage(paths: &[PathBuf]) -> (u64, u64) {
    fn walk(path: &Path, total: &mut (u64, u64)) {
        use std::os::unix::fs::MetadataExt as _;
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                walk(&entry.path(), total);
            }
        } else if meta.is_file() {
            total.0 += meta.len();
            total.1 += meta.blocks() * 512;
        }
    }
    let mut total = (0, 0);
    for path in paths {
        walk(path, &mut total);
    }
    total
}

/// `VmRSS` of `/proc/<pid>/status`, in bytes.
fn vm_rss(pid: u32) -> Option<u64> {
    parse_vm_rss(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// One measured target, for the table.
pub(crate) struct Row {
    pub(crate) label: &'static str,
    /// What its files are (`bench.db + bench.db-wal`), when it has files.
    pub(crate) files: Option<String>,
    pub(crate) loaded: Loaded,
    pub(crate) role: Role,
}

/// What a row's resident bytes are compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Redis as the throughput passes run it: the `vs redis` ratios are to this one.
    Baseline,
    /// Redis with `hash-max-listpack-value` [`LISTPACK_VALUE`]: the `vs listpack` ratios.
    Listpack,
    /// Any other target.
    Other,
}

/// `hash-max-listpack-value` of the second Redis row: above the bench's 67-byte owner, so
/// each key's hash stays one listpack (Redis's default, 64, makes it a hash table).
pub(crate) const LISTPACK_VALUE: usize = 128;

/// The table of a resident run: one line per target, then what was counted.
pub(crate) fn table(rows: &[Row], heading: &str) -> String {
    let per = |bytes: i64, loaded: &Loaded| bytes as f64 / loaded.counted.max(1) as f64;
    let resident_of = |role| {
        rows.iter()
            .find(|row| row.role == role)
            .map(|row| per(row.loaded.resident, &row.loaded))
    };
    let (baseline, listpack) = (resident_of(Role::Baseline), resident_of(Role::Listpack));
    let mut out = String::new();
    let _ = writeln!(out, "{heading}");
    let _ = writeln!(
        out,
        "{:<33} {:>7} {:>11} {:>12} {:>9} {:>12} {:>12} {:>12} {:>12}",
        "target (bytes per session)",
        "load s",
        "sessions/s",
        "resident",
        "vs redis",
        "vs listpack",
        "used_memory",
        "disk",
        "allocated"
    );
    for row in rows {
        let loaded = &row.loaded;
        let resident = per(loaded.resident, loaded);
        let ratio = |to: Option<f64>| {
            to.map_or_else(|| "-".to_owned(), |b| format!("{:.2}x", resident / b))
        };
        let used = loaded
            .used_memory
            .map_or_else(|| "-".to_owned(), |u| format!("{:.1}", per(u, loaded)));
        let (disk, allocated) = loaded.disk.as_ref().map_or_else(
            || ("-".to_owned(), "-".to_owned()),
            |d| {
                (
                    format!("{:.1}", per(signed(d.length), loaded)),
                    format!("{:.1}", per(signed(d.allocated), loaded)),
                )
            },
        );
        let _ = writeln!(
            out,
            "{:<33} {:>7.1} {:>11.0} {:>12.1} {:>9} {:>12} {:>12} {:>12} {:>12}",
            row.label,
            loaded.took.as_secs_f64(),
            loaded.counted as f64 / loaded.took.as_secs_f64(),
            resident,
            ratio(baseline),
            ratio(listpack),
            used,
            disk,
            allocated
        );
    }
    let _ = writeln!(
        out,
        "counted: per session = growth / the {} sessions claimed after the \"before\" reading \
         (taken once every connection had claimed one and then sat idle {:?}; the \"after\" \
         reading as long after the load); resident = growth of the server process's VmRSS \
         (/proc/<pid>/status); used_memory = growth of Redis's INFO memory used_memory (bytes \
         asked of its allocator); disk = the files' lengths, allocated = their blocks",
        rows.first().map_or(0, |row| row.loaded.counted),
        IDLE_BEFORE_READING
    );
    if listpack.is_some() {
        let _ = writeln!(
            out,
            "  redis, listpack values to {LISTPACK_VALUE} B: a second fresh redis-server after \
             CONFIG SET hash-max-listpack-value {LISTPACK_VALUE} (Redis's default, 64, is below \
             the bench's 67-byte owner, so the first one keeps each key's hash as a hash table)"
        );
    }
    for row in rows {
        if let (Some(files), Some(disk)) = (&row.files, &row.loaded.disk) {
            let _ = writeln!(
                out,
                "  {}: disk = {files}, once their total size held for {SETTLED_FOR:?} ({} {:.1} s \
                 after the load; resident read then)",
                row.label,
                if disk.settled {
                    "settled"
                } else {
                    "still changing, measured"
                },
                disk.settled_after.as_secs_f64()
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_get_distinct_uids_in_the_random_users_range() {
        let n = 1_000_000;
        let mut seen = std::collections::HashSet::new();
        for i in 0..n {
            let uid = uid(i);
            assert!((1..=RANDOM_USERS).contains(&uid));
            assert!(seen.insert(uid), "uid {uid} twice");
        }
        assert_eq!(uid(0), 1);
        assert!(uid(1) > 1_000_000, "neighbours land far apart");
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t1\n";
        assert_eq!(parse_vm_rss(status), Some(1024 * 1024));
        assert_eq!(parse_vm_rss("VmRSS: lots"), None);
        assert!(vm_rss(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn disk_usage_walks_directories_and_skips_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a"), [0_u8; 100]).unwrap();
        std::fs::write(dir.path().join("sub/b"), [0_u8; 23]).unwrap();
        let paths = [dir.path().to_owned(), dir.path().join("missing")];
        let (length, allocated) = disk_usage(&paths);
        assert_eq!(length, 123);
        assert!(allocated >= 123 || allocated == 0, "{allocated}");
    }
}
