//! The file sink's group commit: one `fsync` makes durable every line written before it
//! started, so concurrent session events share it instead of each paying its own.
//!
//! A writer counts its line ([`GroupCommit::wrote`], under the file's mutex) and then awaits
//! [`GroupCommit::sync`]. The first waiter becomes the leader: it notes how many lines are
//! written, fsyncs (on a blocking thread, so the runtime's workers go on serving and more
//! lines arrive meanwhile), and marks them durable. The waiters queued behind it find their
//! line durable already, or elect the next leader, who fsyncs for all of them at once.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Runs inside every fsync, before it (unit tests hold a fsync open with it).
#[cfg(test)]
pub(super) type Hook = Arc<dyn Fn() + Send + Sync>;

/// Lines written and lines durable, with the leader's lock.
#[derive(Default)]
pub(super) struct GroupCommit {
    /// Lines written so far (counted under the file's mutex, after each write).
    written: AtomicU64,
    /// Lines known durable: every line up to this count was fsynced.
    synced: AtomicU64,
    /// A fsync of the current file failed. Whether the lines it covered reached the disk is
    /// unknown, and a later fsync's success would not say (the kernel may have dropped the
    /// pages it failed to write: "fsyncgate"), so every sync fails until a new file is in
    /// place (a rotation or a reopen, whose fsync of the old file succeeded).
    failed: AtomicBool,
    /// Held by the waiter that fsyncs for the others.
    leader: tokio::sync::Mutex<()>,
    /// fsyncs run (the leaders', not the rotations').
    fsyncs: AtomicU64,
    #[cfg(test)]
    pub(super) hook: std::sync::Mutex<Option<Hook>>,
}

impl GroupCommit {
    /// Counts one line written; called under the file's mutex.
    pub(super) fn wrote(&self) {
        self.written.fetch_add(1, Ordering::AcqRel);
    }

    /// Lines written so far; read under the file's mutex it names the lines in that file.
    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Every line written so far is durable: the caller fsynced the file they were written
    /// to, under the file's mutex, and replaces it (a rotation, a reopen).
    pub(super) fn all_durable(&self) {
        self.synced.fetch_max(self.written(), Ordering::AcqRel);
        self.failed.store(false, Ordering::Release);
    }

    /// How many fsyncs the leaders ran.
    #[cfg(test)]
    pub(super) fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Acquire)
    }

    /// Resolves once every line written before the call is durable. `current` returns,
    /// under the file's mutex, the lines written so far and the file they were written to.
    pub(super) async fn sync(&self, current: impl Fn() -> (u64, Arc<File>)) -> io::Result<()> {
        let mine = self.written();
        if self.synced.load(Ordering::Acquire) >= mine {
            return Ok(());
        }
        let _leader = self.leader.lock().await;
        if self.synced.load(Ordering::Acquire) >= mine {
            // The leader before us fsynced after our line was written.
            return Ok(());
        }
        if self.failed.load(Ordering::Acquire) {
            return Err(io::Error::other(
                "an earlier fsync of the audit log failed; rotate it or send SIGHUP to reopen it",
            ));
        }
        let (upto, file) = current();
        if let Err(error) = self.fsync(file).await {
            self.failed.store(true, Ordering::Release);
            return Err(error);
        }
        self.synced.fetch_max(upto, Ordering::AcqRel);
        Ok(())
    }

    async fn fsync(&self, file: Arc<File>) -> io::Result<()> {
        self.fsyncs.fetch_add(1, Ordering::AcqRel);
        #[cfg(test)]
        let hook = self
            .hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let run = move || {
            #[cfg(test)]
            if let Some(hook) = hook {
                hook();
            }
            // fdatasync: the data and the size the appends grew, not the timestamps.
            file.sync_data()
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime
                .spawn_blocking(run)
                .await
                .map_err(io::Error::other)?,
            Err(_) => run(),
        }
    }
}
