//! The file sink (`unique-server --audit-log PATH`): audit records appended to a file.
//!
//! Every record is one line, handed to the kernel with one `write(2)` on a file opened with
//! `O_APPEND`, under a mutex, before the answer is sent: lines of concurrent requests never
//! interleave, and no line waits in a buffer for a later request. Nothing is fsynced: a
//! line survives the process (a crash, `kill -9`), not an OS crash or a power loss that
//! comes before the kernel writes it back.
//!
//! `unique-server`'s SIGHUP reopens the path ([`AuditFile::reopen`]), for logrotate's
//! `create` convention: the rotator renames the file, then signals; lines before the reopen
//! go to the renamed file, lines after to the new one, and none is lost between them.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::{AuditRecord, AuditSink};

/// An audit log file, shared by every request; reopened on SIGHUP (by `unique-server`).
pub struct AuditFile {
    path: PathBuf,
    out: Mutex<Appender<File>>,
}

impl AuditFile {
    /// Opens `path` for appending, creating it owner-only (0600) when it is missing.
    ///
    /// # Errors
    ///
    /// The path cannot be opened for appending (or created).
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = open(path)?;
        Ok(Self {
            path: path.to_owned(),
            out: Mutex::new(Appender::new(file)),
        })
    }

    /// The path it writes to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the path again and writes every later line there (the file renamed away keeps
    /// the earlier ones). When the path cannot be opened, the current file stays in use.
    ///
    /// # Errors
    ///
    /// The path cannot be opened; the current file stays in use.
    pub fn reopen(&self) -> io::Result<()> {
        // Opened before the lock is taken: requests go on writing while the open runs.
        let file = open(&self.path)?;
        *self.lock() = Appender::new(file);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Appender<File>> {
        // A panic while holding the lock cannot leave a half-updated state: the appender
        // is consistent after every write call.
        self.out.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn open(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Token names, keys and uids: for the operator, not for every local user.
        options.mode(0o600);
    }
    options.open(path)
}

impl AuditSink for AuditFile {
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()> {
        let line = record.to_json_line();
        self.lock().append(&line)
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

    /// Appends `line` (which ends with `\n`). `Err` when it is not wholly written.
    fn append(&mut self, line: &[u8]) -> io::Result<()> {
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
        Ok(())
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
