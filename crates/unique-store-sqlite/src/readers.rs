//! A small pool of read connections.
//!
//! In WAL mode readers never wait for the writer (nor it for them), so reads
//! run in parallel with a commit's fsync. Each read is one statement in its own
//! implicit transaction, which starts from the latest committed state: a read
//! begun after a claim was answered sees that claim (C2).
//!
//! A read is one primary-key lookup, a few microseconds on pages the OS has
//! cached, so by default it runs on the calling task: handing it to tokio's
//! blocking pool costs two thread wake-ups, more than the read itself (measured:
//! 77 µs → 44 µs of server CPU per claim over HTTP, 1.8x the claims/s).
//! [`ReadsOn::BlockingPool`](crate::ReadsOn::BlockingPool) keeps the hand-off
//! for files much larger than memory on slow disks, where a read can wait for
//! the disk.

use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use unique_core::Error;

use crate::error::read_task_failed;
use crate::options::ReadsOn;

#[derive(Debug)]
pub(crate) struct Readers {
    idle: Mutex<Vec<Connection>>,
    /// One permit per connection: holding a permit guarantees an idle one.
    permits: Arc<Semaphore>,
    reads_on: ReadsOn,
}

impl Readers {
    pub(crate) fn new(connections: Vec<Connection>, reads_on: ReadsOn) -> Arc<Self> {
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(connections.len())),
            idle: Mutex::new(connections),
            reads_on,
        })
    }

    /// Runs `read` on an idle connection, on this task or on tokio's blocking
    /// pool (see the module docs).
    pub(crate) async fn run<T, F>(self: &Arc<Self>, read: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Error> + Send + 'static,
    {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| Error::unavailable("sqlite read pool is closed"))?;
        if self.reads_on == ReadsOn::CallingTask {
            return self.read_leased(permit, read);
        }
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || pool.read_leased(permit, read))
            .await
            .map_err(read_task_failed)?
    }

    /// Runs `read` on an idle connection; `permit` guarantees there is one.
    fn read_leased<T>(
        &self,
        permit: OwnedSemaphorePermit,
        read: impl FnOnce(&Connection) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let lease = Lease::take(self);
        let result = read(lease.conn());
        // The permit goes back only after the connection did.
        drop(lease);
        drop(permit);
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // A panic while holding this lock cannot leave the Vec half-updated.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection taken from the pool, returned on drop (even if the read panics).
struct Lease<'a> {
    pool: &'a Readers,
    conn: Option<Connection>,
}

impl<'a> Lease<'a> {
    fn take(pool: &'a Readers) -> Self {
        let conn = pool.lock().pop();
        Self { pool, conn }
    }

    fn conn(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("a held permit guarantees an idle read connection")
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.lock().push(conn);
        }
    }
}
