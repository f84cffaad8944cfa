//! One store per database file: the lock every [`SqliteStore`](crate::SqliteStore)
//! takes on its file for its whole life, whatever its options.
//!
//! Why every store, not only those with the record cache on: the cache is right
//! only while its store is the file's one writer, and a store with the cache off
//! is a writer too. When only cache-on stores locked, a cache-off process beside a
//! cache-on one went unnoticed, and the cache-on one kept answering the gens it
//! had cached after the other had written newer ones. A lock taken by every
//! store cannot be mixed up that way, and one rule ("one store per file") is
//! simpler to state than a shared/exclusive pair. The cost: two cache-off
//! processes can no longer share a file either (SQLite would have serialised
//! their writers, but they gain nothing over one process: the file has one write
//! lock either way).
//!
//! The lock is an exclusive `File::try_lock` (on Unix `flock`) on a separate
//! file beside the database, `<db>-lock` (named after the database's canonical
//! path, so a symbolic link to the file finds the same lock), held by the store
//! and released when it is dropped or its process ends, however it ends: a
//! SIGKILL leaves no stale lock. The holder writes its pid into the lock file,
//! and a store refused reads it to name the holder in its error. The lock file
//! stays beside the database (like SQLite's `-wal` and `-shm`), emptied when the
//! store closes; deleting it while a store runs defeats the lock.
//!
//! A separate file, and not a lock on the database file itself, because closing
//! *any* descriptor of a file drops every `fcntl` lock this process holds on it,
//! SQLite's included: a store refused (or the holder's own handle, closed in the
//! wrong order) would have dropped the locks of a store of this process still
//! using the file. Closing a descriptor of the lock file drops nothing of SQLite's.
//!
//! In one process, a second store on a file is refused just the same (its cache
//! would go stale in the same way, and two writers of one file in one process
//! only contend for the same SQLite write lock). It is refused from a
//! process-wide list before the lock file is even opened, so this does not rely on
//! `flock` locks of one process conflicting with each other (they do on Linux,
//! but not where `flock` is emulated with `fcntl`, as on NFS). Opening a file
//! again after its store was dropped works at once: the store releases the lock
//! only after its writer thread has finished and closed its connections.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use unique_core::Error;

/// The lock files the stores of this process hold (canonical paths).
static HELD: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// How a lock file is named after its database: `<db>-lock`, beside SQLite's
/// `<db>-wal` and `<db>-shm` (not `<db>.lock`, the directory SQLite's
/// `unix-dotfile` VFS would use).
const LOCK_SUFFIX: &str = "-lock";

/// A refused store waits this long at most for a holder that has just taken the
/// lock to write its pid (it does so right after).
const PID_PATIENCE: Duration = Duration::from_millis(100);

/// The held lock; dropping it empties the lock file and closes it, which
/// releases the lock.
#[derive(Debug)]
pub(crate) struct FileLock {
    file: Option<File>,
    path: PathBuf,
}

impl FileLock {
    /// Locks the database file at `db` for this store, or says who holds it.
    /// `db` has passed [`check_path`](crate::schema::check_path).
    pub(crate) fn acquire(db: &Path) -> Result<Self, Error> {
        let failed = |why: String| {
            Error::unavailable(format!(
                "cannot open sqlite database {}: {why}",
                db.display()
            ))
        };
        let path = lock_path(db)
            .map_err(|e| failed(format!("cannot resolve the path of its lock file ({e})")))?;
        let in_use = |holder: Holder| failed(in_use_message(holder, &path));
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains(&path) {
            return Err(in_use(Holder::ThisProcess));
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| {
                failed(format!(
                    "cannot open its lock file {} ({e})",
                    path.display()
                ))
            })?;
        match file.try_lock() {
            Ok(()) => {}
            // Closing this handle (no store of this process holds the file,
            // checked above) releases nothing of anyone's.
            Err(TryLockError::WouldBlock) => return Err(in_use(holder(&mut file))),
            Err(TryLockError::Error(e)) => {
                return Err(failed(format!(
                    "cannot lock its lock file {} ({e}); the store needs a local file \
                     system with file locks",
                    path.display()
                )));
            }
        }
        // Best effort: the lock is what keeps other stores out; the pid only
        // names this process in their errors.
        let _ = file
            .set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        held.push(path.clone());
        Ok(Self {
            file: Some(file),
            path,
        })
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            // Emptied while still locked, so no stale pid is left behind.
            let _ = file.set_len(0);
            // Closing the handle releases the lock.
            drop(file);
        }
        // Unlocked before the path leaves the list, so a store of this process
        // opening the file next never finds it still locked.
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = held.iter().position(|p| *p == self.path) {
            held.swap_remove(i);
        }
    }
}

/// Who holds a lock this store could not take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    ThisProcess,
    Process(u32),
    Unknown,
}

/// The holder of the lock on `file`, from the pid it wrote there.
fn holder(file: &mut File) -> Holder {
    let started = std::time::Instant::now();
    loop {
        let mut text = String::new();
        let read = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_string(&mut text));
        if read.is_err() {
            return Holder::Unknown;
        }
        if let Ok(pid) = text.trim().parse::<u32>() {
            return if pid == std::process::id() {
                Holder::ThisProcess
            } else {
                Holder::Process(pid)
            };
        }
        // Empty: the holder has just taken the lock and not written its pid yet.
        if started.elapsed() >= PID_PATIENCE {
            return Holder::Unknown;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn in_use_message(holder: Holder, lock: &Path) -> String {
    let who = match holder {
        Holder::ThisProcess => format!(
            "another store of this process (pid {}) has it open",
            std::process::id()
        ),
        Holder::Process(pid) => format!("another process (pid {pid}) has it open"),
        Holder::Unknown => "another process has it open".to_owned(),
    };
    format!(
        "{who} and holds its lock file {}. One store at a time may open the file, whatever \
         its options (a second writer would leave the first one's record cache stale): stop \
         the other one first, or give each its own file",
        lock.display()
    )
}

/// The lock file of the database at `db`: `<canonical db path>-lock`. The
/// database may not exist yet (SQLite creates it), its directory does.
fn lock_path(db: &Path) -> io::Result<PathBuf> {
    let canonical = match std::fs::canonicalize(db) {
        Ok(path) => path,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let name = db.file_name().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "the path names no file")
            })?;
            let dir = match db.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir,
                _ => Path::new("."),
            };
            std::fs::canonicalize(dir)?.join(name)
        }
        Err(e) => return Err(e),
    };
    let mut path = canonical.into_os_string();
    path.push(LOCK_SUFFIX);
    Ok(PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_file_sits_beside_the_canonical_database() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        let want = real.join("u.db-lock");
        // Missing and existing database alike.
        assert_eq!(lock_path(&dir.path().join("u.db")).unwrap(), want);
        std::fs::write(dir.path().join("u.db"), b"").unwrap();
        assert_eq!(lock_path(&dir.path().join("u.db")).unwrap(), want);
        assert_eq!(lock_path(&dir.path().join(".").join("u.db")).unwrap(), want);
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("u.db"), dir.path().join("link.db"))
                .unwrap();
            assert_eq!(lock_path(&dir.path().join("link.db")).unwrap(), want);
        }
    }

    #[test]
    fn the_holder_writes_its_pid_and_empties_the_file_when_done() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("u.db");
        let lock = FileLock::acquire(&db).unwrap();
        let text = std::fs::read_to_string(&lock.path).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        let err = FileLock::acquire(&db).expect_err("held");
        assert!(
            err.to_string()
                .contains(&format!("this process (pid {})", std::process::id())),
            "{err}"
        );
        let path = lock.path.clone();
        drop(lock);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        drop(FileLock::acquire(&db).expect("free again"));
    }

    #[test]
    fn a_refused_store_reads_the_holders_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        std::fs::write(&path, "4242\n").unwrap();
        let mut file = File::open(&path).unwrap();
        assert_eq!(holder(&mut file), Holder::Process(4242));
        std::fs::write(&path, format!("{}", std::process::id())).unwrap();
        assert_eq!(holder(&mut file), Holder::ThisProcess);
        std::fs::write(&path, "").unwrap();
        assert_eq!(holder(&mut file), Holder::Unknown, "after a short wait");
    }
}
