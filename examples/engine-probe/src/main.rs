//! Candidate durable engines for `unique-server`'s default store, on the workload that decides
//! it: first-login claims of random users (uids uniform over 1..=10^8). Each engine runs as the
//! SQLite store's writer does: claims arrive in groups of `BATCH`; for each claim the engine
//! reads the key (the fence: absent or gen 0 may be claimed) and writes the record; then one
//! durable commit (fsynced) covers the group. The HTTP path is left out, so what differs
//! between the rows is the engine alone.
//!
//! `cargo run --release -- ENGINE DIR CLAIMS BATCH`, ENGINE one of `sqlite-1k`, `sqlite-4k`,
//! `fjall`, `redb`, `journal`. Prints claims/s, CPU µs per claim (every thread of the process,
//! background compaction included), bytes written per claim (`/proc/self/io`) and the files'
//! bytes per record at the end. For fsyncs per claim run it under
//! `perf stat -e syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync`.

use std::collections::HashMap;

use redb::ReadableTable;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One record as the stores keep it: the gen first (8 bytes, little-endian), then the owner's
/// JSON, the claim id and the recent-claims list, about as long as the SQLite row's columns.
fn record(generation: i64, uid: u64) -> Vec<u8> {
    let mut value = generation.to_le_bytes().to_vec();
    value.extend_from_slice(
        format!(
            r#"{{"routing":"r-{uid}","conn":"c-{uid}","endpoint":"http://node.test/kick"}}|claim-{uid}|claim-{uid}"#
        )
        .as_bytes(),
    );
    value
}

fn key(uid: u64) -> Vec<u8> {
    format!("bench\u{1f}prod\u{1f}{uid}").into_bytes()
}

/// May a claim write over `stored`? The fence of a first login: no record, or one at gen 0.
fn vacant(stored: Option<&[u8]>) -> bool {
    stored.is_none_or(|value| value.get(..8) == Some(&0_i64.to_le_bytes()))
}

trait Engine {
    /// Checks and writes every claim of `group`, then commits them durably, together.
    fn claim_group(&mut self, group: &[(Vec<u8>, Vec<u8>)]) -> usize;
}

struct Sqlite {
    conn: rusqlite::Connection,
}

impl Sqlite {
    fn open(path: &Path, page_size: i64) -> Self {
        let conn = rusqlite::Connection::open(path).expect("open sqlite");
        conn.pragma_update(None, "page_size", page_size)
            .expect("page_size");
        conn.pragma_update(None, "journal_mode", "WAL").expect("wal");
        conn.pragma_update(None, "synchronous", "FULL")
            .expect("synchronous");
        conn.execute_batch(
            "CREATE TABLE records (pk BLOB PRIMARY KEY NOT NULL, record BLOB NOT NULL) WITHOUT ROWID",
        )
        .expect("schema");
        Self { conn }
    }
}

impl Engine for Sqlite {
    fn claim_group(&mut self, group: &[(Vec<u8>, Vec<u8>)]) -> usize {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        let mut written = 0;
        {
            let mut read = tx
                .prepare_cached("SELECT record FROM records WHERE pk = ?1")
                .expect("prepare read");
            let mut write = tx
                .prepare_cached("INSERT OR REPLACE INTO records (pk, record) VALUES (?1, ?2)")
                .expect("prepare write");
            for (key, value) in group {
                let stored: Option<Vec<u8>> = read
                    .query_row([key], |row| row.get(0))
                    .map(Some)
                    .or_else(|e| match e {
                        rusqlite::Error::QueryReturnedNoRows => Ok(None),
                        e => Err(e),
                    })
                    .expect("read");
                if vacant(stored.as_deref()) {
                    write.execute((key, value)).expect("write");
                    written += 1;
                }
            }
        }
        tx.commit().expect("commit");
        written
    }
}

struct Fjall {
    db: fjall::Database,
    records: fjall::Keyspace,
}

impl Fjall {
    fn open(path: &Path) -> Self {
        // The journal is persisted by the commit below, not after every write.
        let db = fjall::Database::builder(path)
            .manual_journal_persist(true)
            .open()
            .expect("open fjall");
        let records = db
            .keyspace("records", fjall::KeyspaceCreateOptions::default)
            .expect("keyspace");
        Self { db, records }
    }
}

impl Engine for Fjall {
    fn claim_group(&mut self, group: &[(Vec<u8>, Vec<u8>)]) -> usize {
        // One writer checks every fence, so reads before the batch's commit are safe.
        let mut batch = self.db.batch();
        for (key, value) in group {
            let stored = self.records.get(key).expect("read");
            if vacant(stored.as_deref()) {
                batch.insert(&self.records, key.clone(), value.clone());
            }
        }
        let written = batch.len();
        batch.commit().expect("commit");
        self.db
            .persist(fjall::PersistMode::SyncAll)
            .expect("persist");
        written
    }
}

const REDB_RECORDS: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("records");

struct Redb {
    db: redb::Database,
}

impl Engine for Redb {
    fn claim_group(&mut self, group: &[(Vec<u8>, Vec<u8>)]) -> usize {
        // Durability::Immediate is the default: the commit is fsynced before it returns.
        let tx = self.db.begin_write().expect("begin");
        let mut written = 0;
        {
            let mut table = tx.open_table(REDB_RECORDS).expect("table");
            for (key, value) in group {
                let free = vacant(
                    table
                        .get(key.as_slice())
                        .expect("read")
                        .map(|stored| stored.value().to_vec())
                        .as_deref(),
                );
                if free {
                    table.insert(key.as_slice(), value.as_slice()).expect("write");
                    written += 1;
                }
            }
        }
        tx.commit().expect("commit");
        written
    }
}

/// The lower bound of a memory store with an append-only journal (Redis's AOF design): the
/// records in a map, each write appended as a length-prefixed frame, one fdatasync per group.
/// No compaction or recovery here: a real store pays for those too.
struct Journal {
    records: HashMap<Vec<u8>, Vec<u8>>,
    file: File,
    frames: Vec<u8>,
}

impl Engine for Journal {
    fn claim_group(&mut self, group: &[(Vec<u8>, Vec<u8>)]) -> usize {
        self.frames.clear();
        let mut written = 0;
        for (key, value) in group {
            if vacant(self.records.get(key).map(Vec::as_slice)) {
                let len = u32::try_from(key.len() + value.len()).expect("frame fits");
                self.frames.extend_from_slice(&len.to_le_bytes());
                self.frames.extend_from_slice(key);
                self.frames.extend_from_slice(value);
                written += 1;
            }
        }
        self.file.write_all(&self.frames).expect("append");
        self.file.sync_data().expect("fdatasync");
        // Visible only once durable, as the stores answer only after the commit.
        for (key, value) in group {
            self.records
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
        written
    }
}

fn write_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// User plus system CPU time of every thread of this process, in microseconds.
fn cpu_micros() -> u64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc_rusage::Rusage>();
        libc_rusage::getrusage(0, &raw mut usage);
        usage
    };
    let micros = |tv: libc_rusage::Timeval| {
        u64::try_from(tv.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(tv.tv_usec).unwrap_or(0)
    };
    micros(usage.ru_utime) + micros(usage.ru_stime)
}

/// The two fields of `struct rusage` this probe reads, without a libc dependency.
mod libc_rusage {
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct Timeval {
        pub tv_sec: i64,
        pub tv_usec: i64,
    }
    #[repr(C)]
    pub struct Rusage {
        pub ru_utime: Timeval,
        pub ru_stime: Timeval,
        _rest: [i64; 14],
    }
    unsafe extern "C" {
        pub fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|entry| {
                let meta = entry.metadata().expect("metadata");
                if meta.is_dir() {
                    dir_bytes(&entry.path())
                } else {
                    meta.len()
                }
            })
            .sum()
    })
}

// Counts far below 2^52 become f64 exactly enough for a rate.
#[allow(clippy::cast_precision_loss)]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, engine, dir, claims, batch] = args.as_slice() else {
        eprintln!("usage: engine-probe ENGINE DIR CLAIMS BATCH");
        std::process::exit(2);
    };
    let dir = PathBuf::from(dir);
    let claims: u64 = claims.parse().expect("CLAIMS is a count");
    let batch: usize = batch.parse().expect("BATCH is a count");
    std::fs::create_dir_all(&dir).expect("DIR");
    let mut engine: Box<dyn Engine> = match engine.as_str() {
        "sqlite-1k" => Box::new(Sqlite::open(&dir.join("probe.db"), 1024)),
        "sqlite-4k" => Box::new(Sqlite::open(&dir.join("probe.db"), 4096)),
        "fjall" => Box::new(Fjall::open(&dir.join("fjall"))),
        "redb" => Box::new(Redb {
            db: redb::Database::create(dir.join("probe.redb")).expect("open redb"),
        }),
        "journal" => Box::new(Journal {
            records: HashMap::new(),
            file: File::create(dir.join("probe.journal")).expect("journal"),
            frames: Vec::new(),
        }),
        other => {
            eprintln!("unknown engine {other}");
            std::process::exit(2);
        }
    };
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut group = Vec::with_capacity(batch);
    let (bytes_before, cpu_before, started) = (write_bytes(), cpu_micros(), Instant::now());
    let mut written = 0;
    let mut sent = 0;
    while sent < claims {
        group.clear();
        while group.len() < batch && sent < claims {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let uid = rng % 100_000_000 + 1;
            group.push((key(uid), record(1, uid)));
            sent += 1;
        }
        written += engine.claim_group(&group);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (bytes, cpu) = (write_bytes() - bytes_before, cpu_micros() - cpu_before);
    drop(engine);
    println!(
        "{claims} claims ({written} written) in groups of {batch}: {:.0} claims/s, {:.1} µs CPU/claim, {:.0} B written/claim, {:.0} B on disk/record",
        claims as f64 / elapsed,
        cpu as f64 / claims as f64,
        bytes as f64 / claims as f64,
        dir_bytes(&dir) as f64 / written.max(1) as f64,
    );
}
