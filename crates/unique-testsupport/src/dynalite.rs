//! A real DynamoDB-compatible server for tests: [dynalite](https://www.npmjs.com/package/dynalite)
//! on a free loopback port.
//!
//! dynalite is installed from the npm registry into `<tools_dir>/dynalite` the
//! first time a test needs it (concurrent test processes serialise the install
//! on a lock file), started with `--createTableMs 0` so tables are `ACTIVE` at
//! once, and waited for until it answers an HTTP request. It runs in memory:
//! nothing survives it.
//!
//! Tests talk to it with fixed credentials ([`ACCESS_KEY_ID`],
//! [`SECRET_ACCESS_KEY`]) and [`REGION`], so an SDK never probes the
//! environment or instance metadata.
//!
//! With [`ENDPOINT_VAR`] (`UNIQUE_TEST_DYNAMODB_ENDPOINT`) set,
//! [`Dynalite::shared`] uses that DynamoDB-compatible server instead (for machines
//! without Node.js, or a DynamoDB Local already running). Some tests expect a
//! server that starts empty (fixed table names, a first claim at gen 1), so give
//! each run a fresh in-memory server, e.g. DynamoDB Local with `-inMemory`.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{ChildGuard, free_port, tools_dir};

/// The dynalite release the tests run (Node.js >= 20).
pub const DYNALITE_VERSION: &str = "4.0.0";
/// Region tests configure their SDK clients with.
pub const REGION: &str = "us-east-1";
/// Access key id tests use (dynalite checks that one is present, not its value).
pub const ACCESS_KEY_ID: &str = "unique-test";
/// Secret access key tests use.
pub const SECRET_ACCESS_KEY: &str = "unique-test-secret";

/// The environment variable naming an existing DynamoDB-compatible server for
/// [`Dynalite::shared`]: `http://HOST:PORT` (plain HTTP: some tests put a proxy in
/// front of it).
pub const ENDPOINT_VAR: &str = "UNIQUE_TEST_DYNAMODB_ENDPOINT";

/// How long a fresh dynalite may take to answer.
const START_LIMIT: Duration = Duration::from_secs(20);
/// Attempts with a new port when the one picked was taken in the meantime.
const START_ATTEMPTS: usize = 3;

/// Preloaded into node: exits when the test process goes away. A shared
/// server lives in a `static`, which Rust never drops, so without this the
/// server would outlive every test run; the test process holds the write end
/// of node's stdin and the kernel closes it however the process ends.
const EXIT_WITH_PARENT_JS: &str = "\
// Exit when the test process that started this server is gone (stdin closes).
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
";

/// A running dynalite, killed when dropped (or, for [`Dynalite::shared`], when
/// the test process exits); or an existing server named by [`ENDPOINT_VAR`].
#[derive(Debug)]
pub struct Dynalite {
    addr: SocketAddr,
    /// node and the write end of its stdin; `None` for an existing server.
    /// Order matters: the guard kills node first, then the pipe closes.
    _own: Option<(ChildGuard, ChildStdin)>,
}

impl Dynalite {
    /// Installs dynalite if needed and starts a fresh server on a free loopback port.
    ///
    /// # Panics
    ///
    /// When Node.js or npm is missing, the install fails, or the server does not
    /// answer within 20 s; the message says what is missing.
    pub fn start() -> Self {
        let cli = install();
        let preload = exit_with_parent_script(&tools_dir().join("dynalite"));
        let mut last_failure = String::new();
        for _ in 0..START_ATTEMPTS {
            match spawn(&cli, &preload) {
                Ok(server) => return server,
                Err(failure) => last_failure = failure,
            }
        }
        panic!("dynalite did not start: {last_failure}");
    }

    /// One server shared by every test of this test binary, started on first use.
    ///
    /// Each test should build its own SDK client: a client's pooled connections
    /// belong to the tokio runtime that opened them, and every `#[tokio::test]`
    /// has its own runtime.
    ///
    /// # Panics
    ///
    /// As [`Dynalite::start`].
    pub fn shared() -> &'static Self {
        static SHARED: OnceLock<Dynalite> = OnceLock::new();
        SHARED.get_or_init(|| match std::env::var(ENDPOINT_VAR) {
            Ok(url) if !url.is_empty() => Self::existing(&url),
            _ => Self::start(),
        })
    }

    /// An existing server at `endpoint` (`http://HOST:PORT`, see [`ENDPOINT_VAR`]);
    /// nothing is started or stopped.
    ///
    /// # Panics
    ///
    /// When `endpoint` is not such a URL with a resolvable host, or the server does
    /// not answer a DynamoDB request.
    pub fn existing(endpoint: &str) -> Self {
        let addr = endpoint_addr(endpoint).unwrap_or_else(|why| panic!("{ENDPOINT_VAR}: {why}"));
        assert!(
            answers(addr),
            "{ENDPOINT_VAR}: no DynamoDB-compatible server answers at {addr}"
        );
        Self { addr, _own: None }
    }

    /// The loopback address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for an SDK's endpoint URL.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Starts node on a free port and waits until dynalite answers. `Err` when the
/// process exited (typically: the port was taken meanwhile) so the caller retries.
fn spawn(cli: &Path, preload: &Path) -> Result<Dynalite, String> {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut child = Command::new("node")
        .arg("--require")
        .arg(preload)
        .arg(cli)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--createTableMs", "0", "--deleteTableMs", "0"])
        .args(["--updateTableMs", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node for dynalite: {e}"));
    let stdin = child.stdin.take().expect("stdin is piped");
    let deadline = Instant::now() + START_LIMIT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("node exited with {status} (port {port})"));
        }
        if answers(addr) {
            return Ok(Dynalite {
                addr,
                _own: Some((ChildGuard::new(child, "dynalite"), stdin)),
            });
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dynalite did not answer on {addr} within {START_LIMIT:?}");
        }
        // Polling an external process: there is nothing to wait on instead.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `host:port` of an `http://` endpoint, resolved.
fn endpoint_addr(endpoint: &str) -> Result<SocketAddr, String> {
    crate::url_addr(endpoint, "http://", 80)
}

/// One real DynamoDB request: dynalite answers an unsigned `ListTables` with
/// a JSON error, which proves its HTTP front end and request router are up.
fn answers(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\n\
         Content-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\n\
         Connection: close\r\n\r\n{{}}"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.1 ") && response.contains("__type")
}

/// Installs dynalite under `<tools_dir>/dynalite` unless already there, and
/// returns the path of its `cli.js`.
///
/// # Panics
///
/// When Node.js or npm is missing or `npm install` fails.
pub fn install() -> PathBuf {
    require_node();
    let dir = tools_dir().join("dynalite");
    let cli = dir.join("node_modules/dynalite/cli.js");
    // Written only after npm finished, so a half-done install never counts.
    let marker = dir.join(format!(".installed-{DYNALITE_VERSION}"));
    if marker.exists() {
        return cli;
    }
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    // Parallel test binaries may all find dynalite missing; one installs, the
    // others wait on the lock and then see the marker.
    let lock_path = tools_dir().join("dynalite.lock");
    let lock = File::create(&lock_path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
    if !marker.exists() {
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(format!("dynalite@{DYNALITE_VERSION}"))
            .stdout(Stdio::null())
            .status()
            .unwrap_or_else(|e| {
                panic!("npm is missing: cannot install dynalite for the DynamoDB tests ({e})")
            });
        assert!(
            status.success() && cli.exists(),
            "npm install of dynalite@{DYNALITE_VERSION} into {} failed ({status}): \
             is npm installed and the npm registry reachable?",
            dir.display()
        );
        fs::write(&marker, DYNALITE_VERSION)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", marker.display()));
    }
    drop(lock);
    cli
}

fn require_node() {
    let version = Command::new("node").arg("--version").output();
    match version {
        Ok(out) if out.status.success() => {}
        _ => panic!(
            "node is not installed: the DynamoDB tests run dynalite, which needs Node.js >= 20 \
             and npm (e.g. apt-get install nodejs npm)"
        ),
    }
}

/// Writes the preload script next to dynalite (atomically: parallel test
/// processes may write it at once) and returns its path.
fn exit_with_parent_script(dynalite_dir: &Path) -> PathBuf {
    let path = dynalite_dir.join("exit-with-parent.js");
    if fs::read_to_string(&path).is_ok_and(|s| s == EXIT_WITH_PARENT_JS) {
        return path;
    }
    let tmp = dynalite_dir.join(format!("exit-with-parent.{}.tmp", std::process::id()));
    fs::write(&tmp, EXIT_WITH_PARENT_JS)
        .and_then(|()| fs::rename(&tmp, &path))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_answers_and_stops_on_drop() {
        let server = Dynalite::start();
        let addr = server.addr();
        assert!(answers(addr), "a started dynalite answers");
        assert!(server.endpoint_url().starts_with("http://127.0.0.1:"));
        drop(server);
        assert!(!answers(addr), "a dropped dynalite no longer answers");
    }

    #[test]
    fn endpoints_resolve_to_their_host_and_port() {
        let at = |url| endpoint_addr(url).unwrap().to_string();
        assert_eq!(at("http://127.0.0.1:8000"), "127.0.0.1:8000");
        assert_eq!(at("http://127.0.0.1:8001/"), "127.0.0.1:8001");
        assert_eq!(at("http://127.0.0.1"), "127.0.0.1:80");
        assert!(endpoint_addr("https://127.0.0.1:8000").is_err());
    }

    #[test]
    fn an_existing_server_is_used_and_left_running() {
        let owner = Dynalite::start();
        let existing = Dynalite::existing(&owner.endpoint_url());
        assert_eq!(existing.addr(), owner.addr());
        drop(existing);
        assert!(
            answers(owner.addr()),
            "dropping it leaves the server running"
        );
    }

    #[test]
    fn shared_is_one_server() {
        assert_eq!(Dynalite::shared().addr(), Dynalite::shared().addr());
        assert!(answers(Dynalite::shared().addr()));
    }
}
