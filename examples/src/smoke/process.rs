//! A child process whose stdout lines the runner reads as events and whose stdin takes
//! commands. It is killed (and reaped) when dropped, on every exit path of the runner.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc;
use unique_testsupport::ChildGuard;

use crate::events::Line;

/// A running child: its stdin, its stdout as parsed lines, and the kill-on-drop guard.
pub struct Proc {
    name: String,
    guard: ChildGuard,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<Line>,
    /// Received but not yet consumed by an `expect`.
    pending: VecDeque<Line>,
    /// Every line received, in order.
    history: Vec<Line>,
}

impl Proc {
    /// Starts `command` with piped stdin and stdout; its stderr goes to `<log_dir>/<name>.log`.
    /// With `echo`, every stdout line is also printed to the runner's stderr.
    pub fn spawn(
        name: &str,
        mut command: Command,
        log_dir: &Path,
        echo: bool,
    ) -> Result<Self, String> {
        let log = File::create(log_dir.join(format!("{name}.log")))
            .map_err(|e| format!("{name}: cannot create its log file: {e}"))?;
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{name}: cannot start {program}: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        // Guard first, so the child dies even if the rest of this function fails.
        let guard = ChildGuard::new(child, "a smoke child process");
        let stdout = stdout.ok_or_else(|| format!("{name}: its stdout is not piped"))?;
        let (tx, lines) = mpsc::unbounded_channel();
        let who = name.to_owned();
        std::thread::Builder::new()
            .name(format!("{name}-stdout"))
            .spawn(move || {
                for raw in BufReader::new(stdout).lines() {
                    let Ok(raw) = raw else { break };
                    if echo {
                        eprintln!("    {who:>4} | {raw}");
                    }
                    if let Some(line) = Line::parse(&raw)
                        && tx.send(line).is_err()
                    {
                        break;
                    }
                }
            })
            .map_err(|e| format!("{name}: cannot start its reader thread: {e}"))?;
        Ok(Self {
            name: name.to_owned(),
            guard,
            stdin,
            lines,
            pending: VecDeque::new(),
            history: Vec::new(),
        })
    }

    /// Its name in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every line received so far, in order.
    pub fn history(&self) -> &[Line] {
        &self.history
    }

    /// Writes one command line to its stdin.
    pub fn send(&mut self, command: &str) -> Result<(), String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| format!("{}: stdin is closed", self.name))?;
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("{}: cannot send {command:?}: {e}", self.name))
    }

    /// The next line not yet consumed, waiting at most `within`.
    pub async fn next_line(&mut self, within: Duration) -> Result<Line, String> {
        if let Some(line) = self.pending.pop_front() {
            return Ok(line);
        }
        self.receive(within, "a line").await
    }

    /// The first not-yet-consumed line named `name`, waiting at most `within`. Lines it
    /// passes over stay available to later calls.
    pub async fn expect(&mut self, name: &str, within: Duration) -> Result<Line, String> {
        self.expect_any(&[name], within).await
    }

    /// Like [`expect`](Self::expect), for the first line with any of `names`.
    pub async fn expect_any(&mut self, names: &[&str], within: Duration) -> Result<Line, String> {
        let waiting = self
            .pending
            .iter()
            .position(|l| names.contains(&l.name.as_str()));
        if let Some(line) = waiting.and_then(|at| self.pending.remove(at)) {
            return Ok(line);
        }
        let deadline = tokio::time::Instant::now() + within;
        let what = names.join(" or ");
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = self
                .receive(left, &what)
                .await
                .map_err(|e| format!("{e} (within {within:?}; last lines: {})", self.tail(4)))?;
            if names.contains(&line.name.as_str()) {
                return Ok(line);
            }
            self.pending.push_back(line);
        }
    }

    /// Round trip through the child (`ping` → `PONG`): afterwards every line it printed
    /// before reading the ping has been received.
    pub async fn sync(&mut self, within: Duration) -> Result<(), String> {
        self.send("ping")?;
        self.expect("PONG", within).await.map(drop)
    }

    /// Kills it now (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        // The signal first: a client whose stdin closes first reads the end of its input as
        // `quit` and may log out before the signal lands (S4 then saw a tombstone, not a
        // session whose node is gone).
        self.guard.kill();
        self.stdin = None;
    }

    /// Its last `n` lines, for failure messages.
    pub fn tail(&self, n: usize) -> String {
        let start = self.history.len().saturating_sub(n);
        let lines: Vec<&str> = self.history[start..].iter().map(Line::raw).collect();
        if lines.is_empty() {
            "none".to_owned()
        } else {
            lines.join(" | ")
        }
    }

    async fn receive(&mut self, within: Duration, what: &str) -> Result<Line, String> {
        match tokio::time::timeout(within, self.lines.recv()).await {
            Ok(Some(line)) => {
                self.history.push(line.clone());
                Ok(line)
            }
            Ok(None) => Err(format!("{}: exited before printing {what}", self.name)),
            Err(_) => Err(format!("{}: no {what}", self.name)),
        }
    }
}
