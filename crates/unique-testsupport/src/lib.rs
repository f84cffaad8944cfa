#![doc = include_str!("../README.md")]

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// A child process that is killed and reaped when dropped, so a failing test
/// never leaves a server behind.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    what: &'static str,
}

impl ChildGuard {
    /// Guards `child`; `what` names it in panic messages.
    pub fn new(child: Child, what: &'static str) -> Self {
        Self { child, what }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Checks the process is still running.
    ///
    /// # Panics
    ///
    /// With a clear message if the process has already exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited early with {status}", self.what);
        }
    }

    /// The exit status, when the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal` (a name for `kill -s`, e.g. `QUIT`), waits up to `grace` for the
    /// process to exit, then kills it (SIGKILL) if it has not: a server that cleans up
    /// after itself on a signal (PostgreSQL removes its shared memory) gets the chance.
    pub fn stop_with(&mut self, signal: &str, grace: Duration) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = std::process::Command::new("kill")
                .args(["-s", signal, &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.kill();
    }

    /// Kills the process now (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The instance held in `slot` while anyone holds it, else a new one from `start`: how a
/// test binary shares one server among its tests (stopped when the last holder lets go).
pub(crate) fn shared_in<T>(slot: &Mutex<Weak<T>>, start: impl FnOnce() -> T) -> Arc<T> {
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(running) = slot.upgrade() {
        return running;
    }
    let running = Arc::new(start());
    *slot = Arc::downgrade(&running);
    running
}

/// A loopback port that was free a moment ago.
///
/// # Panics
///
/// When no ephemeral loopback port can be bound.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral loopback port")
}

/// Waits until `addr` accepts TCP connections.
///
/// # Panics
///
/// After `limit`, saying `what` did not come up.
pub fn wait_for_tcp(addr: SocketAddr, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} did not accept connections on {addr} within {limit:?}");
}

/// The address of a `scheme://[user:password@]host[:port][/path]` URL (the
/// `default_port` when it names none), resolved; for servers named in environment
/// variables.
pub(crate) fn url_addr(url: &str, scheme: &str, default_port: u16) -> Result<SocketAddr, String> {
    let rest = url
        .strip_prefix(scheme)
        .ok_or_else(|| format!("expected a {scheme} url"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let with_port = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:{default_port}")
    };
    with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| format!("cannot resolve {with_port}"))
}

/// The workspace root (the directory holding the top-level `Cargo.toml`).
///
/// # Panics
///
/// When this crate is not at `crates/<name>` below the root.
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .expect("crate lives in crates/<name>")
        .to_path_buf()
}

/// Runs `cargo build --release -p unique-server` in the workspace and returns the binary's
/// path (under `CARGO_TARGET_DIR` when set): the server the bench and the soak drive.
///
/// # Errors
///
/// When cargo cannot run, the build fails, or it leaves no binary.
pub fn build_release_server() -> Result<PathBuf, String> {
    let root = workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("cargo build --release -p unique-server");
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "-p", "unique-server"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "cargo build --release -p unique-server failed with {status}"
        ));
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let binary = target.join("release").join("unique-server");
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!("the build left no binary at {}", binary.display()))
    }
}

/// `.tools/` under the workspace root: where test tooling installs what it needs.
pub fn tools_dir() -> PathBuf {
    workspace_root().join(".tools")
}

mod apt;
pub mod dynalite;
pub mod faketime;
pub mod fuzz;
pub mod net;
pub mod pki;
pub mod postgres;
pub mod promtool;
pub mod proxy;
pub mod redis;
pub mod schemathesis;
mod secret;
pub mod systemd;

pub use secret::write_secret;
