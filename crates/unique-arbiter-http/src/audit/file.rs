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
mod tests {
    use std::sync::Arc;

    use serde_json::Value;
    use unique_core::Key;

    use super::*;
    use crate::AuditEvent;

    fn record(file: &AuditFile, generation: i64) {
        let key = Key::new("game", "prod", 7);
        let event = AuditEvent::Replay { generation };
        file.record(&AuditRecord::new(event, Some(&key), Some("t"), "r"))
            .unwrap();
    }

    fn gens(path: &Path) -> Vec<i64> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|line| {
                let value: Value = serde_json::from_str(line).unwrap();
                value["gen"].as_i64().unwrap()
            })
            .collect()
    }

    #[test]
    fn a_reopen_moves_later_lines_to_a_new_file_at_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let rotated = dir.path().join("audit.log.1");
        let file = AuditFile::open(&path).unwrap();
        record(&file, 1);
        std::fs::rename(&path, &rotated).unwrap();
        record(&file, 2); // before the reopen: still the renamed file
        file.reopen().unwrap();
        record(&file, 3);
        assert_eq!(gens(&rotated), [1, 2]);
        assert_eq!(gens(&path), [3]);
    }

    #[test]
    fn a_reopen_that_fails_keeps_the_current_file() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("logs");
        std::fs::create_dir(&sub).unwrap();
        let path = sub.join("audit.log");
        let file = AuditFile::open(&path).unwrap();
        record(&file, 1);
        let moved = dir.path().join("moved");
        std::fs::rename(&sub, &moved).unwrap(); // the path's directory is gone
        assert!(file.reopen().is_err());
        record(&file, 2);
        assert_eq!(gens(&moved.join("audit.log")), [1, 2]);
    }

    #[test]
    fn an_existing_file_is_appended_to_and_a_new_one_is_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        record(&AuditFile::open(&path).unwrap(), 1);
        record(&AuditFile::open(&path).unwrap(), 2);
        assert_eq!(gens(&path), [1, 2]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
    }

    #[test]
    fn concurrent_records_never_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let file = Arc::new(AuditFile::open(&path).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let file = Arc::clone(&file);
                std::thread::spawn(move || {
                    for n in 0..500 {
                        record(&file, t * 1000 + n + 1);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let mut seen = gens(&path); // every line parses
        seen.sort_unstable();
        let mut expected: Vec<i64> = (0..8)
            .flat_map(|t| (0..500).map(move |n| t * 1000 + n + 1))
            .collect();
        expected.sort_unstable();
        assert_eq!(seen, expected);
    }

    /// Takes `room` bytes, then fails every write with `StorageFull` until given more room.
    struct Disk {
        bytes: Vec<u8>,
        room: usize,
    }

    impl Write for Disk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::ErrorKind::StorageFull.into());
            }
            let n = buf.len().min(self.room);
            self.bytes.extend_from_slice(&buf[..n]);
            self.room -= n;
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_file_past_its_size_is_rotated_and_the_oldest_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let one = {
            let mut line = Vec::new();
            let key = Key::new("game", "prod", 7);
            let event = AuditEvent::Replay { generation: 100 };
            AuditRecord::new(event, Some(&key), Some("t"), "r").write_json_line(&mut line);
            line.len() as u64
        };
        // Three lines a file (gens 100..=999 keep the line's length).
        let rotation = Rotation {
            max_bytes: one * 3 + one / 2,
            keep: 2,
        };
        let file = AuditFile::with_rotation(&path, rotation).unwrap();
        for generation in 100..111 {
            record(&file, generation);
        }
        let numbered = |n: u32| dir.path().join(format!("audit.log.{n}"));
        assert_eq!(gens(&path), [109, 110]);
        assert_eq!(gens(&numbered(1)), [106, 107, 108]);
        assert_eq!(gens(&numbered(2)), [103, 104, 105]);
        assert!(
            !numbered(3).exists(),
            "100..=102 were dropped with the oldest file"
        );
        for path in [path.clone(), numbered(1), numbered(2)] {
            assert!(std::fs::metadata(&path).unwrap().len() <= rotation.max_bytes);
        }
        // A reopen after an external rename still works beside the rotation.
        std::fs::rename(&path, dir.path().join("moved")).unwrap();
        file.reopen().unwrap();
        record(&file, 111);
        assert_eq!(gens(&path), [111]);
    }

    #[test]
    fn keeping_no_rotated_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let rotation = Rotation {
            max_bytes: 1000,
            keep: 0,
        };
        let error = AuditFile::with_rotation(&dir.path().join("a.log"), rotation)
            .err()
            .unwrap();
        assert!(
            error.to_string().contains("at least 1 rotated file"),
            "{error}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_or_a_file_that_is_not_regular_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.log");
        std::fs::write(&target, "").unwrap();
        let link = dir.path().join("audit.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = AuditFile::open(&link).err().expect("a link is refused");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        // A link to a missing file is refused too: nothing is created through it.
        let dangling = dir.path().join("dangling.log");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(AuditFile::open(&dangling).is_err());
        assert!(!dir.path().join("nowhere").exists());
        // Reopen refuses a link put at the path meanwhile, and keeps the current file.
        let path = dir.path().join("real.log");
        let file = AuditFile::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(
            file.reopen()
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
        for device in ["/dev/full", "/dev/null"] {
            let error = AuditFile::open(Path::new(device)).err().unwrap();
            assert!(error.to_string().contains("not a regular file"), "{error}");
        }
    }

    /// Eight writers: the first one's fsync is held open until the other seven have written
    /// their lines and are waiting; then one more fsync serves all seven.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_waiters_share_one_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(AuditFile::open(&dir.path().join("audit.log")).unwrap());
        let (entered, first_entered) = std::sync::mpsc::channel::<()>();
        let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let held = Arc::clone(&gate);
        let entered = Mutex::new(entered);
        file.hook_fsync(Arc::new(move || {
            let _ = entered.lock().unwrap().send(());
            let (open, opened) = &*held;
            let mut open = open.lock().unwrap();
            while !*open {
                open = opened.wait(open).unwrap();
            }
        }));
        let sync = |file: &Arc<AuditFile>| {
            let file = Arc::clone(file);
            tokio::spawn(async move { file.sync().await })
        };
        record(&file, 1);
        let mut waiters = vec![sync(&file)];
        tokio::task::spawn_blocking(move || first_entered.recv().unwrap())
            .await
            .unwrap();
        for generation in 2..=8 {
            record(&file, generation);
            waiters.push(sync(&file));
        }
        {
            let (open, opened) = &*gate;
            *open.lock().unwrap() = true;
            opened.notify_all();
        }
        for waiter in waiters {
            waiter.await.unwrap().unwrap();
        }
        assert_eq!(
            file.fsyncs(),
            2,
            "one fsync for line 1, one for lines 2..=8"
        );
        // Everything is durable now: a later sync with nothing new written runs none.
        file.sync().await.unwrap();
        assert_eq!(file.fsyncs(), 2);
    }

    #[test]
    fn a_line_cut_short_is_terminated_before_the_next() {
        let mut appender = Appender::new(Disk {
            bytes: Vec::new(),
            room: 10,
        });
        appender.append(b"{\"n\":1}\n").unwrap();
        let cut = appender.append(b"{\"n\":2}\n").unwrap_err();
        assert_eq!(cut.kind(), io::ErrorKind::StorageFull);
        // A write that fails whole leaves nothing to terminate; the torn line still is.
        assert!(appender.append(b"{\"n\":3}\n").is_err());
        appender.out.room = 100;
        appender.append(b"{\"n\":4}\n").unwrap();
        appender.append(b"{\"n\":5}\n").unwrap();
        let text = String::from_utf8(appender.out.bytes).unwrap();
        assert_eq!(text, "{\"n\":1}\n{\"\n{\"n\":4}\n{\"n\":5}\n");
        let whole: Vec<&str> = text
            .lines()
            .filter(|l| serde_json::from_str::<Value>(l).is_ok())
            .collect();
        assert_eq!(whole, ["{\"n\":1}", "{\"n\":4}", "{\"n\":5}"]);
    }
}
