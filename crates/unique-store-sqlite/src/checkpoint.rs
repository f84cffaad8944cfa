//! WAL checkpoints on their own thread, off the writer's commit path.
//!
//! SQLite's automatic checkpoint runs inside the `COMMIT` that takes the WAL
//! past 1000 pages: that commit copies the WAL's pages into the database file
//! and fsyncs it before its callers are answered, and every batch queued
//! behind it waits as well. Here the writer's WAL hook (which replaces the
//! automatic checkpoint) only signals this thread, which runs
//! `PRAGMA wal_checkpoint(PASSIVE)` on its own connection while the writer goes
//! on committing.
//!
//! A commit asks for a checkpoint every 1000 new pages of WAL. Under steady
//! load a passive checkpoint rarely lets the WAL start over (that needs no
//! commit between the checkpoint's end and the next write), so once the WAL
//! holds more than [`RESTART_PAGES`] the thread follows its passive checkpoint
//! with a `RESTART` one, which waits for the writer's current transaction and
//! holds the next one back only while it copies what the passive one left: the
//! WAL stays bounded.
//!
//! Durability is unchanged: a commit's frames are fsynced in the WAL by the
//! `COMMIT` itself (with `FULL`) before anyone is answered; a checkpoint only
//! copies committed pages into the main file, and SQLite fsyncs them there
//! before the WAL may be reused. A checkpoint that cannot finish (a reader still
//! uses old frames) is retried after the next commit.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use rusqlite::Connection;
use unique_core::Error;

/// WAL size, in pages, from which a commit asks for a checkpoint (SQLite's own
/// `wal_autocheckpoint` default).
pub(crate) const CHECKPOINT_PAGES: i32 = 1000;

/// WAL size, in pages, past which a checkpoint makes the WAL start over (10 MB
/// with the 1 KiB pages of a new file, 40 MB with SQLite's default 4 KiB).
pub(crate) const RESTART_PAGES: i64 = 10 * CHECKPOINT_PAGES as i64;

/// What the checkpoint thread is asked to do.
#[derive(Debug)]
enum Signal {
    Checkpoint,
    Stop,
}

/// The checkpoint thread; dropping this stops it (after the checkpoints already
/// asked for) and waits for it.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    // Stop is sent on our own sender: the hook's copy lives as long as SQLite
    // keeps the writer's connection data, which is not tied to this drop.
    stop: SyncSender<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Hooks `writer` so its commits signal a new thread that checkpoints
    /// through `conn`.
    pub(crate) fn start(writer: &mut Connection, conn: Connection) -> Result<Self, Error> {
        Self::start_gated(writer, conn, || {})
    }

    /// [`start`](Self::start), with `gate` called before each checkpoint (tests hold the
    /// thread there to see what the writer alone did).
    fn start_gated(
        writer: &mut Connection,
        conn: Connection,
        gate: impl Fn() + Send + 'static,
    ) -> Result<Self, Error> {
        // One pending signal is enough: a checkpoint covers every commit before it.
        let (signal, rx) = sync_channel::<Signal>(1);
        let stop = signal.clone();
        // WAL size at which the next checkpoint is asked for.
        let mut next_at = CHECKPOINT_PAGES;
        let mut last = 0;
        writer
            .wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages| {
                if pages < last {
                    // The WAL started over.
                    next_at = CHECKPOINT_PAGES;
                }
                last = pages;
                if pages >= next_at {
                    next_at = pages.saturating_add(CHECKPOINT_PAGES);
                    notify(&signal);
                }
                Ok(())
            }))
            .map_err(|e| crate::error::map_sqlite("wal hook setup", e))?;
        let thread = std::thread::Builder::new()
            .name("unique-sqlite-checkpoint".into())
            .spawn(move || run(&conn, &rx, &gate))
            .map_err(|e| Error::unavailable_with("cannot start the sqlite checkpoint thread", e))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

fn notify(signal: &SyncSender<Signal>) {
    match signal.try_send(Signal::Checkpoint) {
        // Full: a checkpoint is already asked for. Disconnected: the thread is
        // gone, and the WAL only grows until the store is reopened.
        Ok(()) | Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {}
    }
}

impl Drop for Checkpointer {
    /// Stops the thread and waits for it, so the file is closed when the
    /// store's drop returns.
    fn drop(&mut self) {
        // Fails only if the thread is already gone.
        let _ = self.stop.send(Signal::Stop);
        if let Some(thread) = self.thread.take() {
            // A panicked checkpoint thread leaves nothing to clean up.
            let _ = thread.join();
        }
    }
}

fn run(conn: &Connection, signals: &Receiver<Signal>, gate: &dyn Fn()) {
    while let Ok(Signal::Checkpoint) = signals.recv() {
        gate();
        // PASSIVE never waits for the writer or readers. A failure (busy, I/O)
        // leaves the WAL as it is, which stays valid; the next signal retries.
        let wal_pages = checkpoint(conn, "PASSIVE");
        if wal_pages.is_some_and(|pages| pages > RESTART_PAGES) {
            let _ = checkpoint(conn, "RESTART");
        }
    }
}

/// Runs one checkpoint; the WAL's size in pages, when it ran.
fn checkpoint(conn: &Connection, mode: &str) -> Option<i64> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        row.get(1)
    })
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::SqliteStoreBuilder;
    use crate::schema::{open_checkpointer, open_reader, open_writer};

    #[test]
    fn a_commit_past_the_threshold_is_checkpointed_by_the_thread_not_the_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.db");
        let options = SqliteStoreBuilder::new(&path);
        let mut writer = open_writer(&options).expect("writer");
        // Kept open, so closing the others is not the last close (which checkpoints).
        let bystander = open_reader(&options).expect("reader");
        // The thread waits at its gate until the commit has been looked at: without it, the
        // thread's own checkpoint could land before the check below (it did, on a loaded CI run).
        let (open_gate, gate) = std::sync::mpsc::channel::<()>();
        let gate = std::sync::Mutex::new(gate);
        let checkpointer = Checkpointer::start_gated(
            &mut writer,
            open_checkpointer(&options).expect("conn"),
            move || {
                let _ = gate.lock().expect("gate").recv();
            },
        )
        .expect("start");
        let before = std::fs::metadata(&path).expect("stat").len();
        // About 5.4 MB of pages in one commit, past the checkpoint threshold.
        writer
            .execute(
                "INSERT INTO records (pk, gen, owner, cid)
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 6000)
                 SELECT 'k' || i, 1, printf('%.900c', 'x'), NULL FROM n",
                [],
            )
            .expect("insert");
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            before,
            "the commit itself copied nothing into the database file"
        );
        // The thread runs the checkpoint already asked for before it takes the
        // stop that dropping sends, and dropping waits for it.
        drop(open_gate);
        drop(writer);
        drop(checkpointer);
        assert!(
            std::fs::metadata(&path).expect("stat").len() > before + 4_000_000,
            "the checkpoint thread copied the pages into the database file"
        );
        drop(bystander);
    }
}
