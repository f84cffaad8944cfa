//! The smoke world: one `unique-server` process, named `smoke-client` processes, and an
//! HTTP transport of the runner's own for checks the clients cannot make.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;
use unique_sessions::Key;
use unique_sessions::node::HttpTransport;

use crate::events::Line;
use crate::smoke::process::Proc;
use crate::smoke::{Options, StoreKind};

/// The bound on every single wait of the runner.
pub const WAIT: Duration = Duration::from_secs(10);

/// The kick signing key of a smoke run (loopback only, in a scratch file).
const KICK_KEY: &str = "smoke-kick-signing-key-0123456789abcdef";

/// Name of the key file in the scratch directory: the server signs with it, every client
/// verifies with it.
const KICK_KEYS_FILE: &str = "kick.keys";

/// One server, its clients, and a scratch directory for the store and the logs.
///
/// Fields drop in order: the clients and the server are killed before the directory goes.
pub struct Harness {
    clients: BTreeMap<String, Proc>,
    _server: Proc,
    /// The server's base URL.
    pub server_url: String,
    /// The runner's own transport to the server (current, stale release, raw claims).
    pub transport: HttpTransport,
    options: Options,
    dir: TempDir,
}

impl Harness {
    /// Starts the server and waits for its `listening` line.
    pub async fn start(options: Options) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("unique-smoke-")
            .tempdir()
            .map_err(|e| format!("cannot create a scratch directory: {e}"))?;
        let keys = dir.path().join(KICK_KEYS_FILE);
        unique_testsupport::write_secret(&keys, &format!("# smoke run\n{KICK_KEY}\n"))
            .map_err(|e| format!("cannot write the kick key file: {e}"))?;
        let mut command = Command::new(options.bin_dir.join("unique-server"));
        command.arg("--kick-signing-keys").arg(&keys);
        command.args(["--listen", "127.0.0.1:0", "--kick-timeout"]);
        command.arg(humantime::format_duration(options.kick_timeout).to_string());
        match options.store {
            StoreKind::Fjall => {
                command.args(["--store", "fjall", "--fjall-dir"]);
                command.arg(dir.path().join("unique.fjall"));
            }
            StoreKind::Sqlite => {
                command.args(["--store", "sqlite", "--db"]);
                command.arg(dir.path().join("unique.db"));
            }
            StoreKind::Memory => {
                command.args(["--store", "memory"]);
            }
        }
        let mut server = Proc::spawn("server", command, dir.path(), options.verbose)?;
        let first = server.next_line(WAIT).await.map_err(|e| {
            format!(
                "{e}: the server did not start (see {})",
                dir.path().join("server.log").display()
            )
        })?;
        let server_url = first
            .raw()
            .strip_prefix("unique-server listening on ")
            .ok_or_else(|| format!("unexpected first line from the server: {:?}", first.raw()))?
            .to_owned();
        let transport = HttpTransport::new(&server_url)
            .map_err(|e| format!("cannot build the runner's transport: {e}"))?;
        Ok(Self {
            options,
            dir,
            _server: server,
            server_url,
            transport,
            clients: BTreeMap::new(),
        })
    }

    /// The heartbeat interval every client runs with.
    pub fn interval(&self) -> Duration {
        self.options.heartbeat_interval
    }

    /// The server's kick timeout.
    pub fn kick_timeout(&self) -> Duration {
        self.options.kick_timeout
    }

    /// Which store the server runs on.
    pub fn store(&self) -> StoreKind {
        self.options.store
    }

    /// Starts client `name` for `key` and waits until its kick receiver listens.
    /// Returns its owner endpoint.
    pub async fn spawn_client(&mut self, name: &str, key: &Key) -> Result<String, String> {
        let mut command = Command::new(self.options.bin_dir.join("smoke-client"));
        command
            .args(["--server", &self.server_url, "--node", name])
            .args(["--project", &key.project, "--env", &key.env])
            .args(["--uid", &key.uid.to_string()])
            .args(["--kick-listen", "127.0.0.1:0", "--heartbeat"])
            .arg(humantime::format_duration(self.options.heartbeat_interval).to_string())
            .arg("--kick-signing-keys")
            .arg(self.dir.path().join(KICK_KEYS_FILE));
        let mut client = Proc::spawn(name, command, self.dir.path(), self.options.verbose)?;
        let listening = client.expect("LISTENING", WAIT).await?;
        let endpoint = listening.field("endpoint")?.to_owned();
        self.clients.insert(name.to_owned(), client);
        Ok(endpoint)
    }

    /// Client `name`.
    pub fn client(&mut self, name: &str) -> Result<&mut Proc, String> {
        self.clients
            .get_mut(name)
            .ok_or_else(|| format!("no client named {name}"))
    }

    /// The last line named `event` that client `name` printed so far.
    pub fn last(&self, name: &str, event: &str) -> Result<Line, String> {
        self.clients
            .get(name)
            .and_then(|c| c.history().iter().rev().find(|l| l.name == event))
            .cloned()
            .ok_or_else(|| format!("{name} printed no {event}"))
    }

    /// Keeps the scratch directory (logs, database) and returns its path.
    pub fn keep_logs(self) -> PathBuf {
        self.dir.keep()
    }

    /// The last lines of every client, for a failure report.
    pub fn tails(&self, n: usize) -> String {
        self.clients
            .values()
            .map(|c| format!("  {}: {}", c.name(), c.tail(n)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}
