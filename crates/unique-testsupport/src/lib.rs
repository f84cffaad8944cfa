#![doc = include_str!("../README.md")]

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::Child;
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

/// `.tools/` under the workspace root: where test tooling installs what it needs.
pub fn tools_dir() -> PathBuf {
    workspace_root().join(".tools")
}

mod apt;
pub mod dynalite;
pub mod fuzz;
pub mod net;
pub mod pki;
pub mod promtool;
pub mod proxy;
pub mod redis;
