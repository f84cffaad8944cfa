//! A real `redis-server` for tests.
//!
//! [`shared`] hands every test of a binary the same running server (started on
//! first use, stopped when the last test holding it lets go); [`RedisServer::start`]
//! gives a test a private one it may stop. Each server listens on a free loopback
//! port with persistence off (`--save "" --appendonly no`) and is killed on drop;
//! [`RedisServer::start_with`] starts one that persists every write before it
//! answers ([`Persistence::AppendFsyncAlways`]), for benchmarks of durable stores.
//!
//! When `redis-server` is not installed, the first caller installs Debian's
//! `redis-server` package with `apt-get` (once per process, and under a lock file so
//! parallel test binaries do not race each other). If that fails the test panics
//! saying what is missing; there is no switch to skip.
//!
//! With [`URL_VAR`] (`UNIQUE_TEST_REDIS_URL`) set, [`shared`] uses that server
//! instead of starting one (for machines without root or apt, such as macOS with a
//! Redis of its own). Tests that stop or disconnect their server still start a
//! private one with [`RedisServer::start`]: killing a server the developer runs is
//! not theirs to do, and `CLIENT KILL` would cut other tests' connections.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::apt::{self, tail};
use crate::{ChildGuard, free_port};

/// The environment variable naming an existing server for [`shared`]
/// (`redis://[user:password@]host:port/[db]`). Tests use their own key prefixes,
/// so the server may hold other data, but use one that nothing else depends on.
pub const URL_VAR: &str = "UNIQUE_TEST_REDIS_URL";

/// How long a fresh server gets to answer `PING`.
const START_LIMIT: Duration = Duration::from_secs(15);

/// What a server writes to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Persistence {
    /// Nothing: `--save "" --appendonly no` (every test server).
    #[default]
    Off,
    /// `--appendonly yes --appendfsync always`: every write is in the append-only
    /// file and fsynced before its answer is sent (Redis groups the writes of one
    /// event-loop pass into one fsync). Snapshots stay off.
    AppendFsyncAlways,
}

impl Persistence {
    fn args(self) -> &'static [&'static str] {
        match self {
            Self::Off => &["--save", "", "--appendonly", "no"],
            Self::AppendFsyncAlways => &[
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
        }
    }
}

/// A running `redis-server` on `127.0.0.1`, killed (and its scratch directory
/// removed) on drop; or, from [`shared`] with [`URL_VAR`] set, an existing server
/// this process does not own.
#[derive(Debug)]
pub struct RedisServer {
    /// The process and its scratch directory; `None` for an existing server.
    own: Option<(ChildGuard, PathBuf)>,
    addr: SocketAddr,
    url: String,
}

impl RedisServer {
    /// Starts a private server on a free loopback port and waits until it answers
    /// `PING`. Installs `redis-server` first when it is missing.
    ///
    /// # Panics
    ///
    /// When `redis-server` cannot be installed or does not come up, with a message
    /// saying what is missing.
    pub fn start() -> Self {
        Self::start_with(Persistence::Off)
    }

    /// As [`start`](Self::start), writing to disk as `persistence` says (the files go to
    /// the server's scratch directory, removed on drop).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(persistence: Persistence) -> Self {
        let binary = redis_server_path();
        let mut last_failure = String::new();
        // A port that was free a moment ago can be taken before the server binds it;
        // a couple of fresh ports make that race harmless.
        for _ in 0..3 {
            match try_start(&binary, persistence) {
                Ok(server) => return server,
                Err(failure) => last_failure = failure,
            }
        }
        panic!("redis-server did not start: {last_failure}");
    }

    /// The server's address (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// An existing server at `url` (see [`URL_VAR`]); nothing is started or stopped.
    ///
    /// # Panics
    ///
    /// When `url` is not `redis://` with a resolvable host, or nothing accepts
    /// connections there.
    pub fn existing(url: &str) -> Self {
        let addr = url_addr(url).unwrap_or_else(|why| panic!("{URL_VAR}: {why}"));
        crate::wait_for_tcp(
            addr,
            Duration::from_secs(2),
            &format!("the redis of {URL_VAR}"),
        );
        Self {
            own: None,
            addr,
            url: url.to_owned(),
        }
    }

    /// The server's process id (e.g. to read its CPU time).
    ///
    /// # Panics
    ///
    /// For an existing server (not started here).
    pub fn pid(&self) -> u32 {
        match &self.own {
            Some((guard, _)) => guard.id(),
            None => panic!("{}", not_ours("pid")),
        }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A connection URL for the `redis` crate: `redis://127.0.0.1:<port>/`, or
    /// the URL of [`URL_VAR`] as given.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Kills the server now (SIGKILL), e.g. to test a dropped connection.
    ///
    /// # Panics
    ///
    /// For an existing server (not started here).
    pub fn stop(&mut self) {
        match &mut self.own {
            Some((guard, _)) => guard.kill(),
            None => panic!("{}", not_ours("stop")),
        }
    }
}

fn not_ours(what: &str) -> String {
    format!("{what}: the server of {URL_VAR} is not this test's to control; use RedisServer::start")
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some((guard, dir)) = &mut self.own {
            guard.kill();
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// The `host:port` of a `redis://` URL, resolved (default port 6379).
fn url_addr(url: &str) -> Result<SocketAddr, String> {
    crate::url_addr(url, "redis://", 6379)
}

/// The server shared by the tests of this binary: started by the first caller,
/// stopped when the last [`Arc`] is dropped (a later caller then starts a new one);
/// with [`URL_VAR`] set, the server it names. Tests sharing it must use their own
/// keys, and must not stop it.
///
/// # Panics
///
/// As [`RedisServer::start`].
pub fn shared() -> Arc<RedisServer> {
    static SHARED: Mutex<Weak<RedisServer>> = Mutex::new(Weak::new());
    crate::shared_in(&SHARED, || match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => RedisServer::existing(&url),
        _ => RedisServer::start(),
    })
}

/// The path of `redis-server`, installing Debian's package when it is missing.
///
/// # Panics
///
/// When it is missing and cannot be installed.
pub fn redis_server_path() -> PathBuf {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| apt::locate_or_install("redis-server", "redis-server"))
        .clone()
        .unwrap_or_else(|missing| panic!("{missing}"))
}

fn try_start(binary: &Path, persistence: Persistence) -> Result<RedisServer, String> {
    let port = free_port();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let dir = std::env::temp_dir().join(format!(
        "unique-testsupport-redis-{}-{port}",
        std::process::id()
    ));
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let log = dir.join("redis.log");
    let child = Command::new(binary)
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1"])
        .args(persistence.args())
        .args(["--daemonize", "no"])
        .arg("--dir")
        .arg(&dir)
        .arg("--logfile")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    match wait_for_ping(child, addr) {
        Ok(child) => Ok(RedisServer {
            own: Some((ChildGuard::new(child, "redis-server"), dir)),
            addr,
            url: format!("redis://{addr}/"),
        }),
        Err(failure) => {
            let log = fs::read_to_string(&log).unwrap_or_default();
            let _ = fs::remove_dir_all(&dir);
            Err(format!("{failure}; log: {}", tail(&log, 800)))
        }
    }
}

/// Polls until the server answers `PING` with `+PONG` (not `-LOADING`), or fails
/// when the process exits or the time is up (killing it then).
fn wait_for_ping(mut child: Child, addr: SocketAddr) -> Result<Child, String> {
    let deadline = Instant::now() + START_LIMIT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("redis-server on {addr} exited early with {status}"));
        }
        if ping(addr) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "redis-server did not answer PING on {addr} within {START_LIMIT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ping(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0_u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_server_answers_ping_and_is_one_per_binary() {
        let server = shared();
        assert!(ping(server.addr()), "shared server must answer PING");
        let again = shared();
        assert_eq!(server.addr(), again.addr(), "one server per test binary");
    }

    #[test]
    fn urls_resolve_to_their_host_and_port() {
        let at = |url| url_addr(url).unwrap().to_string();
        assert_eq!(at("redis://127.0.0.1:7000/"), "127.0.0.1:7000");
        assert_eq!(at("redis://user:pw@127.0.0.1:7001/2"), "127.0.0.1:7001");
        assert_eq!(at("redis://127.0.0.1"), "127.0.0.1:6379");
        assert!(url_addr("http://127.0.0.1:7000").is_err());
    }

    #[test]
    fn an_existing_server_is_used_but_never_stopped() {
        let owner = RedisServer::start();
        let mut existing = RedisServer::existing(&owner.url());
        assert_eq!(existing.addr(), owner.addr());
        assert_eq!(existing.url(), owner.url());
        let stop = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| existing.stop()));
        assert!(stop.is_err(), "stopping a server it does not own panics");
        drop(existing);
        assert!(ping(owner.addr()), "dropping it leaves the server running");
    }

    #[test]
    fn private_server_stops_on_drop() {
        let mut server = RedisServer::start();
        let addr = server.addr();
        assert!(ping(addr));
        assert!(server.url().starts_with("redis://127.0.0.1:"));
        server.stop();
        assert!(!ping(addr), "a stopped server must not answer");
        drop(server);
    }

    #[test]
    fn append_fsync_always_is_configured_and_writes_its_file() {
        let server = RedisServer::start_with(Persistence::AppendFsyncAlways);
        let mut stream = TcpStream::connect(server.addr()).unwrap();
        stream.set_read_timeout(Some(START_LIMIT)).unwrap();
        let mut ask = |command: &[u8]| {
            stream.write_all(command).unwrap();
            let mut reply = [0_u8; 128];
            let n = stream.read(&mut reply).unwrap();
            String::from_utf8_lossy(&reply[..n]).into_owned()
        };
        let fsync = ask(b"CONFIG GET appendfsync\r\n");
        assert!(fsync.contains("always"), "{fsync}");
        let aof = ask(b"CONFIG GET appendonly\r\n");
        assert!(aof.contains("yes"), "{aof}");
        assert_eq!(ask(b"SET k v\r\n"), "+OK\r\n");
        let (_, scratch) = server.own.as_ref().expect("a private server");
        let dir = std::fs::read_dir(scratch).unwrap();
        assert!(
            dir.flatten()
                .any(|e| e.file_name().to_string_lossy().contains("appendonly")),
            "no append-only file in {}",
            scratch.display()
        );
    }
}
