//! Building and running the `unique-server` binary under test.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tempfile::TempDir;
use unique_testsupport::ChildGuard;

/// How long a fresh server gets to print its address.
const START_LIMIT: Duration = Duration::from_secs(30);

/// The store a server runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServerStore {
    /// `--store memory`.
    Memory,
    /// `--store sqlite --db-sync <sync>` on a fresh file in a temporary directory.
    Sqlite(DbSync),
    /// `--store fjall` on a fresh directory in a temporary directory.
    Fjall,
    /// `--store postgres --create-table` on the database at this URL (passed in the
    /// environment, as a deployment would).
    Postgres(String),
}

/// `--db-sync` of the sqlite store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DbSync {
    /// fsync every commit (the server's default).
    Full,
    /// fsync at checkpoints only.
    Normal,
}

/// The SQLite store's file, in the server's directory ([`UniqueServer::dir`]).
pub(crate) const SQLITE_FILE: &str = "bench.db";

/// The fjall store's directory, in the server's directory ([`UniqueServer::dir`]).
pub(crate) const FJALL_DIR: &str = "bench.fjall";

/// The bearer token a guarded server requires (a bench secret, not a real one).
const BENCH_TOKEN: &str = "unique-bench-token-0123456789abcdef";

/// The kick-signing key of a guarded server (a bench secret, not a real one).
const BENCH_SIGNING_KEY: &str = "unique-bench-signing-key-0123456789abcdef";

/// How a server is configured beyond its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    /// The binary's defaults (metrics recorded, no authentication, kicks unsigned).
    Default,
    /// `--no-metrics`: nothing recorded, no `/metrics`.
    NoMetrics,
    /// Caller authentication (`--auth-tokens`) and kick signing (`--kick-signing-keys`).
    Guarded,
}

/// A running `unique-server`, killed on drop (its database directory removed).
pub(crate) struct UniqueServer {
    addr: SocketAddr,
    guarded: bool,
    // Field order is drop order: the process dies before its files go.
    guard: ChildGuard,
    _stdout: BufReader<ChildStdout>,
    dir: Option<TempDir>,
}

impl UniqueServer {
    /// Starts `binary` on a free loopback port with logging at `warn`, and waits
    /// for the address it prints, configured as `variant` says (with `--audit-log` in its
    /// directory when `audit_log`).
    pub(crate) fn start(
        binary: &Path,
        store: ServerStore,
        workers: Option<usize>,
        variant: Variant,
        audit_log: bool,
    ) -> Result<Self, String> {
        let guarded = variant == Variant::Guarded;
        let mut command = Command::new(binary);
        command
            .args(["--listen", "127.0.0.1:0"])
            // Logging per request would measure the logger, not the server.
            .env("RUST_LOG", "warn");
        if let Some(workers) = workers {
            command.args(["--workers", &workers.to_string()]);
        }
        let dir = tempfile::Builder::new()
            .prefix("unique-bench-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        if variant == Variant::NoMetrics {
            command.arg("--no-metrics");
        }
        if audit_log {
            command.arg("--audit-log").arg(dir.path().join("audit.log"));
        }
        if guarded {
            let write = |name: &str, text: String| {
                let path = dir.path().join(name);
                unique_testsupport::write_secret(&path, &text)
                    .map(|()| path)
                    .map_err(|e| format!("cannot write {name}: {e}"))
            };
            let tokens = write(
                "tokens.json",
                format!(
                    r#"{{"tokens": [{{"name": "bench", "token": "{BENCH_TOKEN}", "projects": ["bench"]}}]}}"#
                ),
            )?;
            let keys = write("kick-keys", format!("{BENCH_SIGNING_KEY}\n"))?;
            command
                .arg("--auth-tokens")
                .arg(tokens)
                .arg("--kick-signing-keys")
                .arg(keys);
        }
        match store {
            ServerStore::Memory => {
                command.args(["--store", "memory"]);
            }
            ServerStore::Sqlite(sync) => {
                command
                    .args(["--store", "sqlite", "--db"])
                    .arg(dir.path().join(SQLITE_FILE))
                    .args([
                        "--db-sync",
                        match sync {
                            DbSync::Full => "full",
                            DbSync::Normal => "normal",
                        },
                    ]);
            }
            ServerStore::Fjall => {
                command
                    .args(["--store", "fjall", "--fjall-dir"])
                    .arg(dir.path().join(FJALL_DIR));
            }
            ServerStore::Postgres(url) => {
                command
                    .args(["--store", "postgres", "--create-table"])
                    .env("UNIQUE_DATABASE_URL", url);
            }
        }
        Self::launch(command, "unique-server", guarded, Some(dir))
    }

    /// Starts this program as the HTTP floor server (`--serve-floor`, see `floor.rs`).
    pub(crate) fn start_floor() -> Result<Self, String> {
        let this = std::env::current_exe()
            .map_err(|e| format!("cannot find the bench's own binary: {e}"))?;
        let mut command = Command::new(this);
        command.arg("--serve-floor");
        Self::launch(command, "unique-bench --serve-floor", false, None)
    }

    /// Runs `command` with its stdout piped and waits for the address it prints; `name`
    /// names the process in messages, `dir` lives as long as it.
    fn launch(
        mut command: Command,
        name: &'static str,
        guarded: bool,
        dir: Option<TempDir>,
    ) -> Result<Self, String> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                let program = Path::new(command.get_program()).display();
                format!("cannot run {program}: {e}")
            })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let guard = ChildGuard::new(child, name);
        let (addr, stdout) = read_listen_line(stdout)?;
        Ok(Self {
            addr,
            guarded,
            guard,
            _stdout: stdout,
            dir,
        })
    }

    /// The address the server listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bearer token requests must carry, when the server is guarded.
    pub(crate) fn bearer_token(&self) -> Option<&'static str> {
        self.guarded.then_some(BENCH_TOKEN)
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.guard.id()
    }

    /// The temporary directory holding the server's files (the SQLite file at
    /// [`SQLITE_FILE`], the fjall store at [`FJALL_DIR`]), for a server of [`UniqueServer::start`].
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(TempDir::path)
    }
}

/// Reads `unique-server listening on http://ADDR` from the server's stdout, on a
/// helper thread so a silent server cannot hang the bench.
fn read_listen_line(stdout: ChildStdout) -> Result<(SocketAddr, BufReader<ChildStdout>), String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let read = reader.read_line(&mut line);
        let _ = tx.send(read.map(|_| (line, reader)));
    });
    let (line, reader) = match rx.recv_timeout(START_LIMIT) {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => return Err(format!("cannot read unique-server's output: {e}")),
        Err(_) => {
            return Err(format!(
                "unique-server printed no address within {START_LIMIT:?}"
            ));
        }
    };
    parse_listen_line(&line).map(|addr| (addr, reader))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_line() {
        assert_eq!(
            parse_listen_line("unique-server listening on http://127.0.0.1:4242\n").unwrap(),
            "127.0.0.1:4242".parse::<SocketAddr>().unwrap()
        );
        assert!(parse_listen_line("").is_err());
        assert!(parse_listen_line("unique-server listening on http://nowhere").is_err());
    }
}
