//! The file sink (`unique-server --audit-log PATH`): audit records appended to a file, made
//! durable by a group commit, rotated by size.
//!
//! Every record is one line, handed to the kernel with one `write(2)` on a file opened with
//! `O_APPEND`, under a mutex: lines of concurrent requests never interleave. A session event
//! then waits for [`AuditSink::sync`]: one `fsync` for every line written before it started
//! (`commit.rs`), so after an OS crash or a power loss the log holds every session event a
//! caller was told of, and the store (which fsyncs its commits too) and the log agree.
//!
//! The path is opened with `O_NOFOLLOW`: a symbolic link there is refused (another local user
//! who can write the directory could otherwise point the log at a file of their choosing), and
//! so is anything but a regular file.
//!
//! Rotation ([`Rotation`]): a line that would take the file past `max_bytes` first moves it to
//! `PATH.1` (after a fsync), `PATH.1` to `PATH.2` and so on up to `PATH.<keep>`, the oldest
//! dropped, and starts a new file at the path. `unique-server`'s SIGHUP reopens the path
//! ([`AuditFile::reopen`]), for an external rotator's `create` convention: the rotator renames
//! the file, then signals; lines before the reopen go to the renamed file, lines after to the
//! new one, and none is lost between them.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::commit::GroupCommit;
use super::{AuditRecord, AuditSink, AuditSync};

/// The default [`Rotation::max_bytes`]: 100 MiB.
pub const DEFAULT_AUDIT_MAX_BYTES: u64 = 100 * 1024 * 1024;

/// The default [`Rotation::keep`]: with the default size, at most 1 GiB of audit log.
pub const DEFAULT_AUDIT_KEEP: u32 = 9;

/// When an [`AuditFile`] is rotated, and how many rotated files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// The largest the file grows: a line that would take it past this is written to a new
    /// file after a rotation. `0`: never rotated here (an external rotator and SIGHUP).
    pub max_bytes: u64,
    /// How many rotated files are kept (`PATH.1` newest to `PATH.<keep>`); the oldest
    /// beyond that is dropped. At least 1.
    pub keep: u32,
}

impl Default for Rotation {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_AUDIT_MAX_BYTES,
            keep: DEFAULT_AUDIT_KEEP,
        }
    }
}

/// An audit log file, shared by every request; rotated by size, reopened on SIGHUP (by
/// `unique-server`).
pub struct AuditFile {
    path: PathBuf,
    rotation: Rotation,
    out: Mutex<Out>,
    commit: GroupCommit,
}

/// The file being written and how large it is.
struct Out {
    appender: Appender<Shared>,
    size: u64,
}

impl AuditFile {
    /// Opens `path` for appending, creating it owner-only (0600) when it is missing, with the
    /// default [`Rotation`].
    ///
    /// # Errors
    ///
    /// The path cannot be opened for appending (or created), is a symbolic link, or is not a
    /// regular file.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::with_rotation(path, Rotation::default())
    }

    /// As [`open`](Self::open), rotated as `rotation` says.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open); `rotation.keep` is 0.
    pub fn with_rotation(path: &Path, rotation: Rotation) -> io::Result<Self> {
        if rotation.keep == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the audit log keeps at least 1 rotated file",
            ));
        }
        let (file, size) = open(path)?;
        Ok(Self {
            path: path.to_owned(),
            rotation,
            out: Mutex::new(Out {
                appender: Appender::new(Shared(Arc::new(file))),
                size,
            }),
            commit: GroupCommit::default(),
        })
    }

    /// The path it writes to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How it is rotated.
    pub fn rotation(&self) -> Rotation {
        self.rotation
    }

    /// Opens the path again and writes every later line there (the file renamed away keeps
    /// the earlier ones, fsynced first). When the path cannot be opened, the current file
    /// stays in use.
    ///
    /// # Errors
    ///
    /// The path cannot be opened (or is a link, or not a regular file); the current file
    /// stays in use.
    pub fn reopen(&self) -> io::Result<()> {
        // Opened before the lock is taken: requests go on writing while the open runs.
        let (file, size) = open(&self.path)?;
        let mut out = self.lock();
        self.replace(&mut out, file, size);
        Ok(())
    }

    /// Puts `file` in place of the current one, which is fsynced first so the lines written
    /// to it are durable for their waiters. Under the mutex.
    fn replace(&self, out: &mut Out, file: File, size: u64) {
        match out.appender.out.0.sync_data() {
            Ok(()) => self.commit.all_durable(),
            // Its waiters' own fsync tells them (the failure is sticky until a fsync works).
            Err(error) => tracing::error!(%error, path = %self.path.display(),
                "audit log: the file being replaced could not be fsynced"),
        }
        *out = Out {
            appender: Appender::new(Shared(Arc::new(file))),
            size,
        };
    }

    /// Moves the file to `PATH.1` (and each older one a number up, the oldest dropped) and
    /// starts a new one at the path. Under the mutex.
    fn rotate(&self, out: &mut Out) -> io::Result<()> {
        let numbered = |n: u32| {
            let mut name = self.path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        for n in (1..self.rotation.keep).rev() {
            match std::fs::rename(numbered(n), numbered(n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        match std::fs::rename(&self.path, numbered(1)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let (file, size) = open(&self.path)?;
        self.replace(out, file, size);
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Out> {
        // A panic while holding the lock cannot leave a half-updated state: the appender
        // is consistent after every write call.
        self.out.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many fsyncs the group commit ran.
    #[cfg(test)]
    pub(super) fn fsyncs(&self) -> u64 {
        self.commit.fsyncs()
    }

    #[cfg(test)]
    pub(super) fn hook_fsync(&self, hook: super::commit::Hook) {
        *self
            .commit
            .hook
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(hook);
    }
}

/// Opens `path` for appending (created 0600, never through a symbolic link), its directory
/// fsynced so a new file's name is durable; returns the file and its size.
fn open(path: &Path) -> io::Result<(File, u64)> {
    let mut options = OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Token names, keys and uids: for the operator, not for every local user.
        options.mode(0o600);
        // O_NONBLOCK: a FIFO at the path fails the open instead of hanging it (and is then
        // refused as not a regular file); it changes nothing for a regular file.
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|error| {
        #[cfg(unix)]
        if error.raw_os_error() == Some(libc::ELOOP) {
            return io::Error::new(
                io::ErrorKind::InvalidInput,
                "it is a symbolic link, which the audit log never follows: name the file itself",
            );
        }
        error
    })?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a regular file",
        ));
    }
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        File::open(dir)?.sync_all()?;
    }
    Ok((file, metadata.len()))
}

impl AuditSink for AuditFile {
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()> {
        let line = record.to_json_line();
        let mut out = self.lock();
        let max = self.rotation.max_bytes;
        if max > 0 && out.size > 0 && out.size + line.len() as u64 > max {
            self.rotate(&mut out)?;
        }
        match out.appender.append(&line) {
            Ok(written) => {
                out.size += written;
                self.commit.wrote();
                Ok(())
            }
            Err(error) => {
                // Part of it may have landed: the file says how much.
                if let Ok(metadata) = out.appender.out.0.metadata() {
                    out.size = metadata.len();
                }
                Err(error)
            }
        }
    }

    fn sync(&self) -> AuditSync<'_> {
        Box::pin(self.commit.sync(|| {
            let out = self.lock();
            (self.commit.written(), Arc::clone(&out.appender.out.0))
        }))
    }
}

/// The open file, shared with the fsync that runs on a blocking thread.
struct Shared(Arc<File>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self.0).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes whole lines to `out`, each with as few `write` calls as the kernel allows (one on
/// a local file), and terminates a line an error cut short before the next one.
struct Appender<W> {
    out: W,
    /// The last line was cut short by an error: the next line starts with `\n`, so it is
    /// not glued onto the torn one and still reads as a line of its own.
    torn: bool,
}

impl<W: Write> Appender<W> {
    fn new(out: W) -> Self {
        Self { out, torn: false }
    }

    /// Appends `line` (which ends with `\n`): the bytes written, a `\n` that ends a torn
    /// line included. `Err` when it is not wholly written.
    fn append(&mut self, line: &[u8]) -> io::Result<u64> {
        let healed;
        let mut rest = if self.torn {
            healed = [b"\n", line].concat();
            &healed[..]
        } else {
            line
        };
        let whole = rest.len();
        while !rest.is_empty() {
            match self.out.write(rest) {
                Ok(0) => {
                    self.torn |= rest.len() < whole;
                    return Err(io::ErrorKind::WriteZero.into());
                }
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.torn |= rest.len() < whole;
                    return Err(e);
                }
            }
        }
        self.torn = false;
        Ok(whole as u64)
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
