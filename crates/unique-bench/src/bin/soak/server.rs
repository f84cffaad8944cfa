//! The server under soak: the release `unique-server` on its default store (fjall), its
//! directory on a small tmpfs the soak mounts, started again on the same directory after a
//! SIGKILL; and what `/proc` says about it.

use std::fs::File;
use std::io::{BufRead, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a fresh server gets to print its address (a restart replays fjall's journal).
const START_LIMIT: Duration = Duration::from_mins(1);

/// A tmpfs of its own, mounted on a fresh directory (root only), unmounted when dropped.
pub(crate) struct Disk {
    pub(crate) mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl Disk {
    pub(crate) fn mount(size: &str) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("unique-soak-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount)
            .map_err(|e| format!("cannot create {}: {e}", mount.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "the soak mounts a {size} tmpfs for the store (the disk-full episode fills it), \
                 which needs root: mount said {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Self { mount, _dir: dir })
    }

    /// Writes `ballast` until the disk is full; returns its path.
    pub(crate) fn fill(&self) -> Result<PathBuf, String> {
        let path = self.mount.join("ballast");
        let mut file =
            File::create(&path).map_err(|e| format!("cannot create the ballast file: {e}"))?;
        let chunk = vec![0_u8; 1 << 20];
        // Whole chunks, then smaller and smaller writes, so nothing is left but fragments.
        let mut size = chunk.len();
        while size >= 512 {
            match file.write_all(&chunk[..size]) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => size /= 2,
                Err(e) => return Err(format!("cannot write the ballast: {e}")),
            }
        }
        Ok(path)
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// How to start the server; the same every time, so a restart opens the same directory.
pub(crate) struct Launch {
    pub(crate) binary: PathBuf,
    pub(crate) fjall_dir: PathBuf,
    pub(crate) tokens: PathBuf,
    pub(crate) signing_keys: PathBuf,
    /// The server's stderr, appended to across restarts.
    pub(crate) log: PathBuf,
    /// The CPU the server is pinned to (`taskset -c`), if any.
    pub(crate) cpu: Option<usize>,
}

/// A running server, SIGKILLed when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) addr: SocketAddr,
    _stdout: BufReader<ChildStdout>,
}

impl Launch {
    pub(crate) fn start(&self) -> Result<Server, String> {
        let mut command = match self.cpu {
            Some(cpu) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", &cpu.to_string()]).arg(&self.binary);
                taskset
            }
            None => Command::new(&self.binary),
        };
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("cannot open {}: {e}", self.log.display()))?;
        // The default store (no --store), and nothing of it outside its directory.
        command
            .args(["--listen", "127.0.0.1:0", "--workers", "1", "--fjall-dir"])
            .arg(&self.fjall_dir)
            .arg("--auth-tokens")
            .arg(&self.tokens)
            .arg("--kick-signing-keys")
            .arg(&self.signing_keys)
            .current_dir(self.fjall_dir.parent().unwrap_or(Path::new("/")))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.binary.display()))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let read = reader.read_line(&mut line);
            let _ = tx.send(read.map(|_| (line, reader)));
        });
        match rx.recv_timeout(START_LIMIT) {
            Ok(Ok((line, stdout))) => match parse_listen_line(&line) {
                Ok(addr) => Ok(Server {
                    child,
                    addr,
                    _stdout: stdout,
                }),
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    Err(e)
                }
            },
            Ok(Err(e)) => Err(format!("cannot read unique-server's output: {e}")),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "unique-server printed no address within {START_LIMIT:?} (its log: {})",
                    self.log.display()
                ))
            }
        }
    }
}

fn parse_listen_line(line: &str) -> Result<SocketAddr, String> {
    line.trim()
        .strip_prefix("unique-server listening on http://")
        .and_then(|addr| addr.parse().ok())
        .ok_or_else(|| {
            format!(
                "unexpected first line from unique-server: {:?}",
                line.trim()
            )
        })
}

impl Server {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and wait until the process is gone.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process has exited (and how), without waiting.
    pub(crate) fn exited(&mut self) -> Option<String> {
        self.child.try_wait().ok().flatten().map(|s| s.to_string())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `VmRSS` of `pid` in bytes.
pub(crate) fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Open file descriptors of `pid` (entries of `/proc/PID/fd`).
pub(crate) fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// Bytes of every file under `dir` (their lengths).
pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => dir_bytes(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// The CPUs this process may run on
/// (`Cpus_allowed_list` of `/proc/self/status`), ascending.
pub(crate) fn allowed_cpus() -> Option<Vec<usize>> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))?;
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Moves every thread of this process to `cpu` (threads started later inherit it).
pub(crate) fn pin_self(cpu: usize) -> Result<(), String> {
    let status = Command::new("taskset")
        .args([
            "-a",
            "-p",
            "-c",
            &cpu.to_string(),
            &std::process::id().to_string(),
        ])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run taskset ({e}): install util-linux, or pass --no-pin"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "taskset failed with {status}; pass --no-pin to run unpinned"
        ))
    }
}
