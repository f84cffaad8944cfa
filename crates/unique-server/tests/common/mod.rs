//! Shared by the tests that run the `unique-server` binary as a real process.

// Each test file uses some of these helpers, not all.
#![allow(dead_code)]

pub(crate) mod push;

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use unique_testsupport::ChildGuard;
use unique_testsupport::dynalite::{ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY};

use unique_testsupport::net::PATIENCE;

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_unique-server");

/// Reads the server's first stdout line and returns the address it announces
/// (`unique-server listening on http://ADDR`); panics with that line otherwise.
pub(crate) fn announced_addr(child: &mut Child) -> String {
    announced_with_scheme(child, "http")
}

/// As [`announced_addr`], for a server announcing `scheme://ADDR` (`https` with TLS).
pub(crate) fn announced_with_scheme(child: &mut Child, scheme: &str) -> String {
    let stdout = child.stdout.take().expect("spawned with stdout piped");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    line.trim()
        .strip_prefix(&format!("unique-server listening on {scheme}://"))
        .unwrap_or_else(|| panic!("server did not start: {line:?}"))
        .to_owned()
}

/// Spawns `command` (the server, with stdout piped and stderr shown) and waits for the address
/// it announces; the guard kills it when dropped.
pub(crate) fn start(command: &mut Command) -> (String, ChildGuard) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start unique-server");
    let addr = announced_addr(&mut child);
    (addr, ChildGuard::new(child, "unique-server"))
}

/// The server's own log (stderr), read as it is written: how many lines so far, and the
/// first 50 of them once the server has stopped.
pub(crate) struct CountedLog {
    lines: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    reader: std::thread::JoinHandle<Vec<String>>,
}

impl CountedLog {
    /// Lines the server has logged so far.
    pub(crate) fn lines(&self) -> usize {
        self.lines.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The first 50 lines, once the server's stderr is closed (it stopped).
    pub(crate) fn first_lines(self) -> Vec<String> {
        self.reader.join().unwrap()
    }
}

/// As [`start`], with the server's stderr piped and its lines counted.
pub(crate) fn start_counting_log(command: &mut Command) -> (String, ChildGuard, CountedLog) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start unique-server");
    let addr = announced_addr(&mut child);
    let lines = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stderr = child.stderr.take().unwrap();
    let counted = std::sync::Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if kept.len() < 50 {
                kept.push(line);
            }
        }
        kept
    });
    let guard = ChildGuard::new(child, "unique-server");
    (addr, guard, CountedLog { lines, reader })
}

/// The server on `--store dynamodb`, table `table` at `endpoint_url` (a local
/// DynamoDB-compatible server), on any free loopback port, with the test credentials and
/// warnings-only logs.
pub(crate) fn dynamodb_command(endpoint_url: &str, table: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--store",
        "dynamodb",
        "--table",
        table,
    ])
    .args(["--endpoint-url", endpoint_url, "--region", REGION])
    .env("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
    .env("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
    .env("AWS_EC2_METADATA_DISABLED", "true")
    .env("RUST_LOG", "warn");
    cmd
}

/// The server on `--store postgres`, table `table` of the database at `url`, on any free
/// loopback port, the URL passed through the environment as a deployment would (so it is
/// not on the command line), with info logs.
pub(crate) fn postgres_command(url: &str, table: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["--listen", "127.0.0.1:0", "--store", "postgres"])
        .args(["--database-table", table])
        .env("UNIQUE_DATABASE_URL", url)
        .env("RUST_LOG", "info");
    cmd
}

/// Sends one raw HTTP/1.1 request on a fresh connection and returns the whole answer
/// (the request should say `connection: close`).
pub(crate) fn exchange(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// One HTTP/1.1 request on a fresh connection; returns the raw answer. A server that
/// does not answer within [`PATIENCE`] fails the test instead of hanging it.
pub(crate) fn request(addr: &str, method: &str, path: &str, body: &str) -> String {
    request_with(addr, method, path, &[], body)
}

/// As [`request`], with extra header lines (`("authorization", "Bearer …")`).
pub(crate) fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut extra = String::new();
    for (name, value) in headers {
        // Writing to a String cannot fail.
        let _ = write!(extra, "{name}: {value}\r\n");
    }
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .unwrap_or_else(|e| panic!("no answer to {method} {path}: {e}; got {answer:?}"));
    answer
}

/// One HTTP/1.1 POST on a fresh connection; returns the raw answer.
pub(crate) fn http(addr: &str, path: &str, body: &str) -> String {
    request(addr, "POST", path, body)
}

/// One POST of `body` with a bearer `token` on a fresh connection, from async code: the
/// status code and the JSON body (`null` when the body is not JSON).
pub(crate) async fn post_json(
    addr: &str,
    path: &str,
    token: &str,
    body: &serde_json::Value,
) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let raw = format!(
        "POST {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\nauthorization: Bearer {token}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    status_json(&answer)
}

/// The status and the JSON body of a raw answer (`null` when the body is not JSON).
pub(crate) fn status_json(answer: &str) -> (u16, serde_json::Value) {
    let status = answer
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {answer:?}"));
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (
        status,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

/// Writes a secret file (tokens, signing keys) owner-only, as the server accepts it.
pub(crate) fn write_secret(path: &std::path::Path, text: &str) {
    unique_testsupport::write_secret(path, text)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// Sends SIGTERM, asserts a clean exit, and returns what the server wrote to stderr.
pub(crate) fn stop_with_sigterm(mut child: Child) -> String {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "exit after SIGTERM: {status}");
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    logs
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped. Mounting needs
/// root (as CI runs); without it the test fails and says so.
pub(crate) struct SmallDisk {
    pub(crate) mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    pub(crate) fn new(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs, which needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { mount, _dir: dir }
    }

    /// Writes a file that takes all the space left but `keep` bytes.
    pub(crate) fn fill(&self, keep: u64) -> PathBuf {
        let filler = self.mount.join("filler");
        let stat = nix_free_bytes(&self.mount);
        let size = stat.saturating_sub(keep);
        std::fs::write(&filler, vec![0u8; usize::try_from(size).unwrap()]).unwrap();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// Free bytes of the filesystem holding `path`, as `df` reports them.
fn nix_free_bytes(path: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|line| line.trim().parse().ok())
        .expect("df prints the free bytes")
}
