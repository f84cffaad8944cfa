//! Unit tests of the file sink: reopen, rotation, links refused, group commit, torn lines.

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
