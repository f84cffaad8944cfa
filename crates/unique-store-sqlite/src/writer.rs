//! The writer thread: every write goes through one connection, and writes that
//! arrive while a commit is in progress are committed together (group commit).
//!
//! Batching needs no timer: while the writer waits for an fsync, new writes
//! queue up in the channel, and the next transaction takes all of them (up to
//! `max_batch`). Alone, a write is committed at once; under load, one fsync
//! serves many. Each write is still its own conditional statement, applied in
//! queue order, and its caller is answered only after the batch's `COMMIT`
//! returned, so an `Ok` is never sent for data that is not durable.

use std::sync::Arc;
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};
use unique_core::{Error, WriteHealth};

use crate::cache::RecordCache;
use crate::checkpoint::Checkpointer;
use crate::error::{map_shared, writer_stopped};
use crate::records::{Statements, Write, Written, apply};

/// How many writes may wait for the writer before callers wait to enqueue
/// (backpressure instead of unbounded memory).
const QUEUE_CAPACITY: usize = 4096;

type Reply = oneshot::Sender<Result<Written, Error>>;

/// The handle the store keeps: a queue into the writer thread.
#[derive(Debug)]
pub(crate) struct Writer {
    queue: Option<mpsc::Sender<(Write, Reply)>>,
    thread: Option<JoinHandle<()>>,
    /// Whether the last batch committed, for the store's readiness.
    health: Arc<WriteHealth>,
    // Dropped after `thread` is joined: it stops when the writer's connection closes.
    checkpointer: Option<Checkpointer>,
}

impl Writer {
    /// Starts the writer thread, which owns `conn` from now on, and the
    /// checkpoint thread on `checkpoint_conn` (see [`crate::checkpoint`]). The
    /// thread keeps `cache` (when on) equal to what it commits (see [`crate::cache`]).
    pub(crate) fn spawn(
        mut conn: Connection,
        checkpoint_conn: Connection,
        max_batch: usize,
        cache: Option<Arc<RecordCache>>,
    ) -> Result<Self, Error> {
        let checkpointer = Checkpointer::start(&mut conn, checkpoint_conn)?;
        let (queue, rx) = mpsc::channel(QUEUE_CAPACITY);
        let health = Arc::new(WriteHealth::default());
        let thread_health = Arc::clone(&health);
        let thread = std::thread::Builder::new()
            .name("unique-sqlite-writer".into())
            .spawn(move || run(&conn, rx, max_batch, cache.as_deref(), &thread_health))
            .map_err(|e| Error::unavailable_with("cannot start the sqlite writer thread", e))?;
        Ok(Self {
            queue: Some(queue),
            thread: Some(thread),
            health,
            checkpointer: Some(checkpointer),
        })
    }

    /// Whether the last batch committed (see [`crate::SqliteStore::check_ready`]).
    pub(crate) fn health(&self) -> &WriteHealth {
        &self.health
    }

    /// Queues `write` and waits until its batch has committed.
    pub(crate) async fn submit(&self, write: Write) -> Result<Written, Error> {
        let queue = self.queue.as_ref().ok_or_else(writer_stopped)?;
        let (reply, answer) = oneshot::channel();
        queue
            .send((write, reply))
            .await
            .map_err(|_| writer_stopped())?;
        answer.await.map_err(|_| writer_stopped())?
    }
}

impl Drop for Writer {
    /// Closes the queue and waits for the thread to finish what is queued and
    /// close its connection, so the file can be reopened at once.
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            // A panicked writer already answered nobody; nothing more to do.
            let _ = thread.join();
        }
        drop(self.checkpointer.take());
    }
}

fn run(
    conn: &Connection,
    mut rx: mpsc::Receiver<(Write, Reply)>,
    max_batch: usize,
    cache: Option<&RecordCache>,
    health: &WriteHealth,
) {
    // Statements that cannot be prepared (they can, on a file `open_writer`
    // accepted) fail every write with the reason instead of stopping the thread.
    let mut stmts = Statements::prepare(conn).map_err(Arc::new);
    let mut writes = Vec::with_capacity(max_batch);
    let mut replies: Vec<Reply> = Vec::with_capacity(max_batch);
    while let Some(first) = rx.blocking_recv() {
        let mut next = Some(first);
        while let Some((write, reply)) = next {
            // A caller that gave up (its future was dropped) is skipped: not
            // writing is as valid an outcome for it as writing.
            if !reply.is_closed() {
                writes.push(write);
                replies.push(reply);
            }
            next = if writes.len() < max_batch {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        if writes.is_empty() {
            continue;
        }
        let results = match &mut stmts {
            Ok(stmts) => commit_batch_cached(conn, stmts, &writes, cache),
            Err(e) => (0..writes.len())
                .map(|_| Err(map_shared("prepare of the write statements", e)))
                .collect(),
        };
        record_health(health, &results);
        for (reply, result) in replies.drain(..).zip(results) {
            let _ = reply.send(result);
        }
        writes.clear();
    }
}

/// A batch none of whose writes committed failed as a whole (its `BEGIN` or `COMMIT` failed,
/// or SQLite rolled it back: a full disk, an I/O error, a lock held past the busy timeout),
/// so the store cannot commit now; one write committed (or lost its race) says it can. A
/// batch of one write whose own statement failed reads as failing too, which costs one
/// probe of the readiness check and nothing else.
fn record_health(health: &WriteHealth, results: &[Result<Written, Error>]) {
    match results.iter().find_map(|r| r.as_ref().err()) {
        Some(e) if results.iter().all(Result::is_err) => health.failing(e.to_string()),
        _ => health.healthy(),
    }
}

/// [`commit_batch`], keeping `cache` right: its keys of the batch are pending
/// from before `BEGIN` until the results are known, and are then set from them
/// before anyone is answered (see [`crate::cache`]).
pub(crate) fn commit_batch_cached(
    conn: &Connection,
    stmts: &mut Statements<'_>,
    writes: &[Write],
    cache: Option<&RecordCache>,
) -> Vec<Result<Written, Error>> {
    let Some(cache) = cache else {
        return commit_batch(conn, stmts, writes);
    };
    cache.begin_batch(writes);
    let results = commit_batch(conn, stmts, writes);
    cache.record_batch(writes, &results);
    results
}

/// Applies `writes` in order in one `BEGIN IMMEDIATE … COMMIT` and returns one
/// result per write, valid only once this returns (after the commit).
///
/// A failed condition is a result like any other (nothing written, the
/// transaction goes on). A statement that fails with an SQL error is undone by
/// SQLite on its own and the others still commit, unless SQLite had to roll the
/// whole transaction back (I/O error, disk full): then nothing of the batch is
/// written and every caller gets `Unavailable`, as when the commit fails.
pub(crate) fn commit_batch(
    conn: &Connection,
    stmts: &mut Statements<'_>,
    writes: &[Write],
) -> Vec<Result<Written, Error>> {
    if let Err(e) = stmts.begin.execute([]) {
        return fail_all(writes.len(), "begin of a write transaction", e);
    }
    let mut results = Vec::with_capacity(writes.len());
    for write in writes {
        results.push(apply(stmts, write));
        if conn.is_autocommit() {
            return rolled_back(results, writes.len());
        }
    }
    match stmts.commit.execute([]) {
        Ok(_) => results,
        Err(e) => {
            // Best effort: a failed COMMIT may leave the transaction open.
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            fail_all(writes.len(), "commit", e)
        }
    }
}

fn fail_all(n: usize, what: &str, e: rusqlite::Error) -> Vec<Result<Written, Error>> {
    let shared = Arc::new(e);
    (0..n).map(|_| Err(map_shared(what, &shared))).collect()
}

/// SQLite rolled the transaction back while applying the last of `results`:
/// that write keeps its own error, every other write of the batch is lost.
fn rolled_back(mut results: Vec<Result<Written, Error>>, n: usize) -> Vec<Result<Written, Error>> {
    let failed = results.pop();
    let lost = || {
        Err(Error::unavailable(
            "sqlite transaction rolled back after an error in the same batch; nothing was written",
        ))
    };
    let mut out: Vec<_> = results.iter().map(|_| lost()).collect();
    out.push(failed.unwrap_or_else(lost));
    out.extend((out.len()..n).map(|_| lost()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::SqliteStoreBuilder;
    use unique_core::{CasOutcome, Fence};

    use crate::cache::RecordCache;
    use crate::records::read_state;
    use crate::schema::open_writer;

    fn writer_conn(dir: &tempfile::TempDir) -> Connection {
        open_writer(&SqliteStoreBuilder::new(&dir.path().join("w.db"))).expect("open")
    }

    fn claim(pk: &str, claim_id: &str, fence: Fence<'_>) -> Write {
        let owner = unique_core::Owner::new("", "", "http://h/k");
        Write::claim(pk.into(), &owner, claim_id.into(), fence.into()).expect("a valid owner")
    }

    fn claimed(generation: i64) -> Written {
        Written::Claim(CasOutcome::Written { generation })
    }

    fn release(pk: &str, generation: i64) -> Write {
        Write::release(pk.into(), generation)
    }

    /// Reads through a separate connection: only committed data is visible there.
    fn committed(dir: &tempfile::TempDir, pk: &str) -> unique_core::OwnerState {
        let conn = Connection::open(dir.path().join("w.db")).expect("open reader");
        read_state(&conn, pk).expect("read")
    }

    /// From now on a `COMMIT` of a transaction that inserted `bad` fails: a deferred
    /// foreign key violation is only detected by `COMMIT`.
    fn fail_commits_that_insert_bad(conn: &Connection) {
        conn.execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TABLE parent (id INTEGER PRIMARY KEY);
             CREATE TABLE child (pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);
             CREATE TRIGGER orphan AFTER INSERT ON records WHEN NEW.pk = 'bad'
             BEGIN INSERT INTO child VALUES (42); END;",
        )
        .expect("schema");
    }

    /// From now on inserting `bad` makes SQLite roll the whole transaction back.
    fn roll_back_transactions_that_insert_bad(conn: &Connection) {
        conn.execute_batch(
            "CREATE TRIGGER boom BEFORE INSERT ON records WHEN NEW.pk = 'bad'
             BEGIN SELECT RAISE(ROLLBACK, 'injected'); END;",
        )
        .expect("trigger");
    }

    /// Runs `writes` as one batch through the cache, then checks that every
    /// key the cache holds equals a read of the committed row.
    fn cached_batch(
        dir: &tempfile::TempDir,
        conn: &Connection,
        cache: &RecordCache,
        writes: &[Write],
    ) -> Vec<Result<Written, Error>> {
        let mut stmts = Statements::prepare(conn).expect("prepare");
        let results = commit_batch_cached(conn, &mut stmts, writes, Some(cache));
        for write in writes {
            if let Some(cached) = cache.get(write.pk()) {
                assert_eq!(cached, committed(dir, write.pk()), "{}", write.pk());
            }
        }
        results
    }

    #[test]
    fn the_cache_holds_what_a_read_of_the_committed_row_returns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = writer_conn(&dir);
        let cache = RecordCache::new(64);
        let cached = |pk: &str| cache.get(pk).expect("cached");
        cached_batch(
            &dir,
            &conn,
            &cache,
            &[
                claim("a", "c1", Fence::FirstLogin),
                // Loses to the first: the cache takes the row it read.
                claim("a", "c2", Fence::FirstLogin),
                claim("b", "", Fence::FirstLogin),
                // Gen 0 reads as absent.
                claim("z", "c", Fence::Tombstone { generation: 0 }),
            ],
        );
        assert_eq!(cached("a").claim_id.as_deref(), Some("c1"));
        assert_eq!(cached("b").claim_id.as_deref(), Some(""));
        assert!(!cached("z").exists);
        cached_batch(
            &dir,
            &conn,
            &cache,
            &[
                release("a", 1),
                claim(
                    "b",
                    "c3",
                    Fence::DoublePin {
                        generation: 1,
                        claim_id: "",
                    },
                ),
                release("b", 2),
                claim("b", "c4", Fence::Tombstone { generation: 2 }),
            ],
        );
        assert_eq!(cached("a"), committed(&dir, "a"));
        assert!(cached("a").exists && cached("a").owner.is_none());
        assert_eq!(
            (cached("b").generation, cached("b").claim_id.as_deref()),
            (3, Some("c4")),
            "the last write of the batch wins"
        );
        // A release that did not hold and a lost race forget / keep the truth.
        cached_batch(&dir, &conn, &cache, &[release("a", 7)]);
        assert_eq!(cache.get("a"), None);
    }

    #[test]
    fn the_batchs_cached_keys_are_pending_until_after_the_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut conn = writer_conn(&dir);
        let cache = Arc::new(RecordCache::new(64));
        cached_batch(&dir, &conn, &cache, &[claim("a", "c1", Fence::FirstLogin)]);
        assert!(cache.get("a").is_some());
        // What a read of the cache gives while COMMIT runs.
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        conn.commit_hook(Some({
            let (cache, seen) = (Arc::clone(&cache), Arc::clone(&seen));
            move || {
                seen.lock().unwrap().push(cache.get("a"));
                false
            }
        }))
        .expect("set the commit hook");
        cached_batch(
            &dir,
            &conn,
            &cache,
            &[claim(
                "a",
                "c2",
                Fence::DoublePin {
                    generation: 1,
                    claim_id: "c1",
                },
            )],
        );
        assert_eq!(
            *seen.lock().unwrap(),
            vec![None],
            "pending during the commit"
        );
        assert_eq!(cache.get("a").unwrap().claim_id.as_deref(), Some("c2"));
    }

    #[test]
    fn a_failed_commit_forgets_the_batchs_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = writer_conn(&dir);
        let cache = RecordCache::new(64);
        cached_batch(&dir, &conn, &cache, &[claim("x", "c1", Fence::FirstLogin)]);
        assert!(cache.get("x").is_some());
        fail_commits_that_insert_bad(&conn);
        let results = cached_batch(
            &dir,
            &conn,
            &cache,
            &[
                claim(
                    "x",
                    "c2",
                    Fence::DoublePin {
                        generation: 1,
                        claim_id: "c1",
                    },
                ),
                claim("bad", "c3", Fence::FirstLogin),
            ],
        );
        assert!(results.iter().all(Result::is_err));
        assert_eq!(cache.get("x"), None, "forgotten, not the claim that failed");
        assert_eq!(cache.get("bad"), None);
        assert_eq!(committed(&dir, "x").claim_id.as_deref(), Some("c1"));
    }

    #[test]
    fn a_rolled_back_batch_forgets_the_batchs_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = writer_conn(&dir);
        let cache = RecordCache::new(64);
        cached_batch(&dir, &conn, &cache, &[claim("x", "c1", Fence::FirstLogin)]);
        roll_back_transactions_that_insert_bad(&conn);
        cached_batch(
            &dir,
            &conn,
            &cache,
            &[
                claim(
                    "x",
                    "c2",
                    Fence::DoublePin {
                        generation: 1,
                        claim_id: "c1",
                    },
                ),
                claim("bad", "c3", Fence::FirstLogin),
            ],
        );
        assert_eq!(cache.get("x"), None);
        assert_eq!(committed(&dir, "x").claim_id.as_deref(), Some("c1"));
    }

    #[test]
    fn batch_applies_in_order_and_a_lost_race_does_not_affect_the_others() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = writer_conn(&dir);
        let results = commit_batch(
            &conn,
            &mut Statements::prepare(&conn).expect("prepare"),
            &[
                claim("a", "c1", Fence::FirstLogin),
                // Same snapshot as the first: loses, and sees the first's write.
                claim("a", "c2", Fence::FirstLogin),
                claim("b", "c3", Fence::FirstLogin),
                release("a", 5),
                release("a", 1),
                claim("a", "c4", Fence::Tombstone { generation: 1 }),
            ],
        );
        let mut results = results.into_iter();
        assert_eq!(results.next().unwrap().unwrap(), claimed(1));
        match results.next().unwrap() {
            Ok(Written::Claim(CasOutcome::LostRace {
                current: Some(current),
            })) => {
                assert_eq!(current.generation, 1);
                assert_eq!(current.claim_id.as_deref(), Some("c1"));
            }
            other => panic!("expected a lost race with the record, got {other:?}"),
        }
        assert_eq!(results.next().unwrap().unwrap(), claimed(1));
        assert_eq!(results.next().unwrap().unwrap(), Written::Released(false));
        assert_eq!(results.next().unwrap().unwrap(), Written::Released(true));
        assert_eq!(results.next().unwrap().unwrap(), claimed(2));
        assert!(results.next().is_none());

        let a = committed(&dir, "a");
        assert_eq!((a.generation, a.claim_id.as_deref()), (2, Some("c4")));
        assert_eq!(committed(&dir, "b").generation, 1);
    }

    #[test]
    fn a_statement_error_is_undone_alone_and_is_not_a_lost_race() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = writer_conn(&dir);
        conn.execute_batch(
            "CREATE TRIGGER boom BEFORE INSERT ON records WHEN NEW.pk = 'bad'
             BEGIN SELECT RAISE(ABORT, 'injected'); END;",
        )
        .expect("trigger");
        let results = commit_batch(
            &conn,
            &mut Statements::prepare(&conn).expect("prepare"),
            &[
                claim("x", "c1", Fence::FirstLogin),
                claim("bad", "c2", Fence::FirstLogin),
                claim("y", "c3", Fence::FirstLogin),
            ],
        );
        assert_eq!(results[0].as_ref().unwrap(), &claimed(1));
        let err = results[1]
            .as_ref()
            .expect_err("an SQL error, not a lost race");
        assert!(err.is_unavailable(), "{err:?}");
        assert_eq!(results[2].as_ref().unwrap(), &claimed(1));
        assert!(committed(&dir, "x").exists);
        assert!(committed(&dir, "y").exists);
        assert!(!committed(&dir, "bad").exists);
    }

    #[test]
    fn a_whole_transaction_rollback_fails_every_write_of_the_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = writer_conn(&dir);
        roll_back_transactions_that_insert_bad(&conn);
        let results = commit_batch(
            &conn,
            &mut Statements::prepare(&conn).expect("prepare"),
            &[
                claim("x", "c1", Fence::FirstLogin),
                claim("bad", "c2", Fence::FirstLogin),
                claim("y", "c3", Fence::FirstLogin),
            ],
        );
        assert_eq!(results.len(), 3);
        for r in &results {
            assert!(r.as_ref().unwrap_err().is_unavailable(), "{r:?}");
        }
        for pk in ["x", "bad", "y"] {
            assert!(!committed(&dir, pk).exists, "{pk} must not be written");
        }
        // The connection is usable for the next batch.
        let next = commit_batch(
            &conn,
            &mut Statements::prepare(&conn).expect("prepare"),
            &[claim("x", "c4", Fence::FirstLogin)],
        );
        assert_eq!(next[0].as_ref().unwrap(), &claimed(1));
    }

    #[test]
    fn a_failed_commit_answers_nobody_with_ok_and_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = writer_conn(&dir);
        fail_commits_that_insert_bad(&conn);
        let results = commit_batch(
            &conn,
            &mut Statements::prepare(&conn).expect("prepare"),
            &[
                claim("x", "c1", Fence::FirstLogin),
                claim("bad", "c2", Fence::FirstLogin),
            ],
        );
        for r in &results {
            let err = r.as_ref().unwrap_err();
            assert!(err.is_unavailable(), "{err:?}");
            assert!(err.to_string().contains("commit"), "{err}");
        }
        assert!(!committed(&dir, "x").exists);
        assert!(
            conn.is_autocommit(),
            "the failed transaction was rolled back"
        );
    }
}
