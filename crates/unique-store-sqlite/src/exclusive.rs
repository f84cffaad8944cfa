//! The exclusive lock on the database file that the record cache needs: the
//! cache is right only while this store is the file's one writer.
//!
//! The lock is `File::try_lock` on a separate handle of the database file (on
//! Unix `flock`, which is independent of SQLite's own `fcntl` locks), held for
//! the store's life and released when the process ends, however it ends.
//!
//! One trap: closing *any* descriptor of a file drops every `fcntl` lock this
//! process holds on it, SQLite's included. So the lock is taken before the store
//! opens its SQLite connections, released after they are closed, and a store of
//! this process that already holds the file is refused from a process-wide list
//! without opening (and then closing) a second descriptor of it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use unique_core::Error;

/// The files the cache-on stores of this process hold.
static HELD: Mutex<Vec<FileId>> = Mutex::new(Vec::new());

/// Which file, independent of the path that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FileId {
    #[cfg(unix)]
    Inode { dev: u64, ino: u64 },
    #[cfg(not(unix))]
    Path(std::path::PathBuf),
}

impl FileId {
    fn of(path: &Path) -> io::Result<Self> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::metadata(path)?;
            Ok(Self::Inode {
                dev: meta.dev(),
                ino: meta.ino(),
            })
        }
        #[cfg(not(unix))]
        {
            std::fs::canonicalize(path).map(Self::Path)
        }
    }
}

/// The held lock; dropping it closes the handle, which releases the lock.
#[derive(Debug)]
pub(crate) struct ExclusiveFile {
    file: Option<File>,
    id: FileId,
}

impl ExclusiveFile {
    /// Locks the database file at `path` (creating it empty when missing, as
    /// SQLite would) or says who holds it.
    pub(crate) fn acquire(path: &Path) -> Result<Self, Error> {
        let failed = |why: String| {
            Error::unavailable(format!(
                "cannot open sqlite database {}: {why}",
                path.display()
            ))
        };
        let held_by = |who: &str| {
            failed(format!(
                "{who} has it open with the record cache on, which needs the file to itself. \
                 Stop that store, or turn the record cache off in every process that shares \
                 the file (SqliteStoreBuilder::record_cache(0); unique-server --db-cache-records 0)"
            ))
        };
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        let file = match FileId::of(path) {
            Ok(id) if held.contains(&id) => return Err(held_by("another store in this process")),
            // Read access is enough to lock; SQLite reports a file it cannot write.
            Ok(_) => File::open(path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(path),
            Err(e) => Err(e),
        }
        .map_err(|e| failed(e.to_string()))?;
        let id = FileId::of(path).map_err(|e| failed(e.to_string()))?;
        match file.try_lock() {
            Ok(()) => {}
            // No store of this process holds it (checked above), so closing this
            // handle drops no lock of ours.
            Err(TryLockError::WouldBlock) => return Err(held_by("another process")),
            Err(TryLockError::Error(e)) => {
                return Err(failed(format!(
                    "cannot lock the file for the record cache ({e}); turn the record cache off"
                )));
            }
        }
        held.push(id.clone());
        Ok(Self {
            file: Some(file),
            id,
        })
    }
}

impl Drop for ExclusiveFile {
    fn drop(&mut self) {
        // Closed (unlocked) before the file leaves the list, so a store of this
        // process opening it next never finds it still locked.
        drop(self.file.take());
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = held.iter().position(|id| *id == self.id) {
            held.swap_remove(i);
        }
    }
}
