//! A real `redis-server` for tests.
//!
//! [`shared`] hands every test of a binary the same running server (started on
//! first use, stopped when the last test holding it lets go); [`RedisServer::start`]
//! gives a test a private one it may stop. Each server listens on a free loopback
//! port with persistence off (`--save "" --appendonly no`) and is killed on drop.
//!
//! When `redis-server` is not installed, the first caller installs Debian's
//! `redis-server` package with `apt-get` (once per process, and under a lock file so
//! parallel test binaries do not race each other). If that fails the test panics
//! saying what is missing; there is no switch to skip.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::apt::{self, tail};
use crate::{ChildGuard, free_port};

/// How long a fresh server gets to answer `PING`.
const START_LIMIT: Duration = Duration::from_secs(15);

/// A running `redis-server` on `127.0.0.1`, killed (and its scratch directory
/// removed) on drop.
#[derive(Debug)]
pub struct RedisServer {
    guard: ChildGuard,
    addr: SocketAddr,
    dir: PathBuf,
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
        let binary = redis_server_path();
        let mut last_failure = String::new();
        // A port that was free a moment ago can be taken before the server binds it;
        // a couple of fresh ports make that race harmless.
        for _ in 0..3 {
            match try_start(&binary) {
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

    /// The server's process id (e.g. to read its CPU time).
    pub fn pid(&self) -> u32 {
        self.guard.id()
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A connection URL for the `redis` crate: `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Kills the server now (SIGKILL), e.g. to test a dropped connection.
    pub fn stop(&mut self) {
        self.guard.kill();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.guard.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The server shared by the tests of this binary: started by the first caller,
/// stopped when the last [`Arc`] is dropped (a later caller then starts a new one).
/// Tests sharing it must use their own keys.
///
/// # Panics
///
/// As [`RedisServer::start`].
pub fn shared() -> Arc<RedisServer> {
    static SHARED: Mutex<Weak<RedisServer>> = Mutex::new(Weak::new());
    crate::shared_in(&SHARED, RedisServer::start)
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

fn try_start(binary: &Path) -> Result<RedisServer, String> {
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
        .args(["--save", ""])
        .args(["--appendonly", "no"])
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
            guard: ChildGuard::new(child, "redis-server"),
            addr,
            dir,
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
    fn private_server_stops_on_drop() {
        let mut server = RedisServer::start();
        let addr = server.addr();
        assert!(ping(addr));
        assert!(server.url().starts_with("redis://127.0.0.1:"));
        server.stop();
        assert!(!ping(addr), "a stopped server must not answer");
        drop(server);
    }
}
