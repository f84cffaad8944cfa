//! The two episodes the load runs through: a full disk under fjall (claims must fail
//! closed, then recover once space returns, without a restart), and a SIGKILL mid-load with
//! a restart on the same directory (nothing acknowledged may be lost).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::check::{Checked, check};
use crate::http::Conn;
use crate::load::Shared;
use crate::server::{Disk, Launch, Server};

/// Claims refused before the disk counts as full for the soak.
const REFUSED_WHEN_FULL: u64 = 5;
/// Claims answered 200 after the space returned for the store to count as recovered.
const RECOVERED_AFTER: u64 = 50;
/// How long the disk gets to fill the store, and the store to recover.
const EPISODE_LIMIT: Duration = Duration::from_mins(1);

/// One episode of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Episode {
    DiskFull,
    Kill,
}

/// Where the episodes stand: the server they may kill and restart.
pub(crate) struct Episodes {
    pub(crate) shared: Arc<Shared>,
    pub(crate) launch: Arc<Launch>,
    pub(crate) server: Server,
    pub(crate) disk: Arc<Disk>,
    pub(crate) start: Instant,
    /// What went wrong (each also printed when it happened).
    pub(crate) failures: Vec<String>,
    pub(crate) checks: Vec<Checked>,
    /// How long the disk stays full once claims fail.
    pub(crate) full_hold: Duration,
}

/// `m:ss` since `start`.
pub(crate) fn clock(start: Instant) -> String {
    let secs = start.elapsed().as_secs();
    format!("{}:{:02}", secs / 60, secs % 60)
}

impl Episodes {
    fn note(&self, text: &str) {
        println!("  {:>5}  {text}", clock(self.start));
    }

    fn fail(&mut self, text: String) {
        self.note(&format!("FAILED: {text}"));
        self.failures.push(text);
    }

    /// Runs `episode`; false when the server is gone for good (the run must stop).
    pub(crate) async fn run(&mut self, episode: Episode) -> bool {
        match episode {
            Episode::DiskFull => {
                self.disk_full().await;
                self.restart_if_dead("the disk-full episode").await
            }
            Episode::Kill => self.kill_and_restart().await,
        }
    }

    async fn disk_full(&mut self) {
        let refused = self.shared.claims_refused.load(Ordering::Relaxed);
        let disk = Arc::clone(&self.disk);
        let filled = tokio::task::spawn_blocking(move || disk.fill()).await;
        let ballast: PathBuf = match filled {
            Ok(Ok(path)) => path,
            Ok(Err(e)) => return self.fail(e),
            Err(e) => return self.fail(format!("the ballast writer panicked: {e}")),
        };
        let size = std::fs::metadata(&ballast).map_or(0, |m| m.len());
        let filled_at = Instant::now();
        let full = self
            .wait(|s| s.claims_refused.load(Ordering::Relaxed) >= refused + REFUSED_WHEN_FULL)
            .await;
        let ready_full = self.readyz().await;
        if full {
            self.note(&format!(
                "disk full: ballast {} MiB; claims refused {:.1} s later; /readyz {ready_full}",
                size >> 20,
                filled_at.elapsed().as_secs_f64()
            ));
            tokio::time::sleep(self.full_hold).await;
        } else {
            self.fail(format!(
                "the disk is full (ballast {} MiB) but fewer than {REFUSED_WHEN_FULL} claims \
                 were refused within {EPISODE_LIMIT:?}",
                size >> 20
            ));
        }
        if let Err(e) = std::fs::remove_file(&ballast) {
            return self.fail(format!("cannot remove the ballast: {e}"));
        }
        let freed = Instant::now();
        let ok = self.shared.claims_ok.load(Ordering::Relaxed);
        if self
            .wait(|s| s.claims_ok.load(Ordering::Relaxed) >= ok + RECOVERED_AFTER)
            .await
        {
            let took = freed.elapsed().as_secs_f64();
            let ready = self.readyz().await;
            self.note(&format!(
                "space returned: {RECOVERED_AFTER} claims answered 200 within {took:.1} s, no \
                 restart; /readyz {ready}"
            ));
        } else {
            self.fail(format!(
                "claims did not recover within {EPISODE_LIMIT:?} of the space returning \
                 (no restart)"
            ));
        }
    }

    /// Polls `done` until it holds or [`EPISODE_LIMIT`] passes.
    async fn wait(&self, done: impl Fn(&Shared) -> bool) -> bool {
        let deadline = Instant::now() + EPISODE_LIMIT;
        while Instant::now() < deadline {
            if done(&self.shared) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        done(&self.shared)
    }

    async fn readyz(&self) -> String {
        let addr = *self
            .shared
            .addr
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match Conn::connect(addr).await {
            Ok(mut conn) => match conn.send("/readyz", None, None).await {
                Ok(answer) => answer.status.to_string(),
                Err(broken) => broken.0,
            },
            Err(broken) => broken.0,
        }
    }

    async fn kill_and_restart(&mut self) -> bool {
        let pid = self.server.pid();
        self.server.kill();
        let killed = Instant::now();
        self.note(&format!("SIGKILL to unique-server (pid {pid}) mid-load"));
        if !self.start_again().await {
            return false;
        }
        let up = killed.elapsed().as_secs_f64();
        match check(&self.shared).await {
            Ok(checked) => {
                let lost = checked.losses.len();
                self.note(&format!(
                    "restarted on the same directory in {up:.1} s; read back {} sessions, {} \
                     rooms, {} nodes: {}",
                    checked.sessions,
                    checked.rooms,
                    checked.nodes,
                    if lost == 0 {
                        "nothing acknowledged lost".to_owned()
                    } else {
                        format!("{lost} acknowledgements LOST")
                    }
                ));
                for loss in checked.losses.iter().take(10) {
                    self.note(&format!("LOST: {}", loss.0));
                }
                self.checks.push(checked);
                true
            }
            Err(e) => {
                self.fail(format!("the check after the restart: {e}"));
                true
            }
        }
    }

    /// Starts the server again on the same directory and points the load at it.
    async fn start_again(&mut self) -> bool {
        let launch = Arc::clone(&self.launch);
        match tokio::task::spawn_blocking(move || launch.start()).await {
            Ok(Ok(server)) => {
                *self
                    .shared
                    .addr
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = server.addr;
                self.shared.pid.store(server.pid(), Ordering::Relaxed);
                self.shared.lives.fetch_add(1, Ordering::Relaxed);
                self.server = server;
                true
            }
            Ok(Err(e)) => {
                self.fail(format!("the server did not start again: {e}"));
                false
            }
            Err(e) => {
                self.fail(format!("starting the server panicked: {e}"));
                false
            }
        }
    }

    /// A server that died during `what` is a failure; it is started again so the run goes on.
    async fn restart_if_dead(&mut self, what: &str) -> bool {
        match self.server.exited() {
            None => true,
            Some(status) => {
                self.fail(format!("unique-server exited during {what}: {status}"));
                self.start_again().await
            }
        }
    }
}
