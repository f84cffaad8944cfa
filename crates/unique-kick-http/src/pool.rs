//! Idle HTTP/1.1 connections, keyed by scheme and authority.
//!
//! A kick hands its connection back only once hyper says the connection is ready
//! for the next request, and *before* the kick returns. So a kick that follows
//! another to the same host always finds the connection idle here: reuse does not
//! depend on a background task winning a race.
//!
//! Whoever claims a session chooses the authority its kick goes to (any port, any
//! name under a wildcard), so the pool is bounded twice: per authority, and across
//! all of them, evicting the least recently used connection first. Every idle
//! connection is also in one check-in order, oldest first; since a connection's
//! age is the time since its check-in, the expired ones are always a prefix of that
//! order, and each pool call drops that prefix: amortised O(1) work per connection,
//! never a scan of the whole pool.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
// tokio's clock (the std clock outside tests) so a paused test clock drives expiry.
use tokio::time::Instant;

pub(crate) type Sender = SendRequest<Full<Bytes>>;

/// Where a connection goes: connections are only shared between equal keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    pub(crate) scheme: Scheme,
    pub(crate) authority: Authority,
}

/// The pool's bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// An idle connection older than this is never handed out (`None`: no limit).
    pub(crate) idle_timeout: Option<Duration>,
    /// Idle connections kept per key; 0 turns reuse off.
    pub(crate) max_idle_per_host: usize,
    /// Idle connections kept across all keys; 0 turns reuse off.
    pub(crate) max_idle: usize,
}

struct Idle {
    /// Its place in [`State::order`].
    seq: u64,
    sender: Sender,
    since: Instant,
}

#[derive(Default)]
struct State {
    /// Per key, least recently checked in first. A key with no idle connection has
    /// no entry, so keys nobody kicks again do not accumulate.
    by_key: HashMap<PoolKey, VecDeque<Idle>>,
    /// Every idle connection by check-in sequence: the first is the least recently
    /// used, and also the oldest.
    order: BTreeMap<u64, PoolKey>,
    next_seq: u64,
    /// How many idle connections sweeps have looked at (tests).
    #[cfg(test)]
    examined: usize,
}

pub(crate) struct Pool {
    state: Mutex<State>,
    limits: Limits,
}

impl Pool {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            state: Mutex::new(State::default()),
            limits,
        }
    }

    /// The most recently used idle connection for `key` that is still usable.
    pub(crate) fn checkout(&self, key: &PoolKey) -> Option<Sender> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.sweep(self.limits.idle_timeout, Instant::now());
        let State { by_key, order, .. } = &mut *state;
        let list = by_key.get_mut(key)?;
        let mut found = None;
        while let Some(entry) = list.pop_back() {
            order.remove(&entry.seq);
            // The sweep left no expired connection; a closed one is dropped here.
            if entry.sender.is_ready() {
                found = Some(entry.sender);
                break;
            }
        }
        if list.is_empty() {
            by_key.remove(key);
        }
        found
    }

    /// Keeps `sender` for the next kick to `key`, unless reuse is off. Past the
    /// per-host cap the oldest idle connection for `key` is closed, past the global
    /// cap the least recently used one of any key; expired idle connections go first.
    pub(crate) fn checkin(&self, key: PoolKey, sender: Sender) {
        let limits = self.limits;
        if limits.max_idle_per_host == 0 || limits.max_idle == 0 || !sender.is_ready() {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // Taken under the lock, so check-in times follow the sequence numbers.
        let now = Instant::now();
        state.sweep(limits.idle_timeout, now);
        let seq = state.next_seq;
        state.next_seq += 1;
        let State { by_key, order, .. } = &mut *state;
        let list = match by_key.entry(key.clone()) {
            Entry::Occupied(list) => list.into_mut(),
            Entry::Vacant(vacant) => vacant.insert(VecDeque::new()),
        };
        if list.len() >= limits.max_idle_per_host
            && let Some(oldest) = list.pop_front()
        {
            order.remove(&oldest.seq);
        }
        list.push_back(Idle {
            seq,
            sender,
            since: now,
        });
        order.insert(seq, key);
        while state.order.len() > limits.max_idle {
            state.evict_oldest();
        }
    }

    /// How many idle connections the pool holds for `key` (tests).
    #[cfg(test)]
    fn idle_count(&self, key: &PoolKey) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .get(key)
            .map_or(0, VecDeque::len)
    }

    /// How many idle connections sweeps have looked at so far (tests).
    #[cfg(test)]
    fn examined(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .examined
    }

    /// How many idle connections the pool holds, and for how many keys (tests).
    #[cfg(test)]
    fn totals(&self) -> (usize, usize) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let per_key: usize = state.by_key.values().map(VecDeque::len).sum();
        assert_eq!(per_key, state.order.len(), "the two indexes disagree");
        (state.order.len(), state.by_key.len())
    }
}

impl State {
    /// Drops the expired or closed connections at the old end of the order, and
    /// stops at the first live one: those behind it are younger, so none of them
    /// has expired (a closed one among them goes when it is checked out or evicted).
    fn sweep(&mut self, idle_timeout: Option<Duration>, now: Instant) {
        while let Some(oldest) = self.oldest() {
            let expired =
                idle_timeout.is_some_and(|timeout| now.duration_since(oldest.since) >= timeout);
            let live = !expired && oldest.sender.is_ready();
            #[cfg(test)]
            {
                self.examined += 1;
            }
            if live {
                break;
            }
            self.evict_oldest();
        }
    }

    /// The least recently used idle connection.
    fn oldest(&self) -> Option<&Idle> {
        let (_, key) = self.order.first_key_value()?;
        self.by_key.get(key)?.front()
    }

    /// Closes the least recently used idle connection: the first in the order,
    /// which is also the first of its key's list.
    fn evict_oldest(&mut self) {
        let Some((seq, key)) = self.order.pop_first() else {
            return;
        };
        if let Entry::Occupied(mut list) = self.by_key.entry(key) {
            let evicted = list.get_mut().pop_front();
            debug_assert_eq!(evicted.map(|idle| idle.seq), Some(seq), "out of order");
            if list.get().is_empty() {
                list.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::rt::TokioIo;
    use tokio::io::{DuplexStream, duplex};
    use tokio::task::JoinHandle;

    fn key(authority: &str) -> PoolKey {
        PoolKey {
            scheme: Scheme::HTTP,
            authority: authority.parse().expect("an authority"),
        }
    }

    fn pool(idle_timeout: Option<Duration>, max_idle_per_host: usize, max_idle: usize) -> Pool {
        Pool::new(Limits {
            idle_timeout,
            max_idle_per_host,
            max_idle,
        })
    }

    /// A ready sender over an in-memory pipe, the pipe's far end (the connection
    /// stays open while the test holds it) and the connection task.
    async fn connection() -> (Sender, DuplexStream, JoinHandle<hyper::Result<()>>) {
        let (near, far) = duplex(1024);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(near))
            .await
            .expect("handshake over a pipe");
        let task = tokio::spawn(conn);
        sender.ready().await.expect("a fresh connection is ready");
        (sender, far, task)
    }

    async fn sender() -> (Sender, DuplexStream) {
        let (sender, far, _task) = connection().await;
        (sender, far)
    }

    /// Checks in one fresh connection for each of `keys`, in order; the pipes keep
    /// them open.
    async fn checkin_each(pool: &Pool, keys: &[&str], pipes: &mut Vec<DuplexStream>) {
        for k in keys {
            let (s, far) = sender().await;
            pipes.push(far);
            pool.checkin(key(k), s);
        }
    }

    #[tokio::test]
    async fn a_checked_in_connection_is_checked_out_for_the_same_key_only() {
        let pool = pool(None, 4, 16);
        let (s, _far) = sender().await;
        pool.checkin(key("a:1"), s);
        assert!(pool.checkout(&key("b:1")).is_none());
        assert!(pool.checkout(&key("a:1")).is_some());
        assert!(pool.checkout(&key("a:1")).is_none(), "checked out twice");
        assert_eq!(pool.totals(), (0, 0), "an emptied key leaves no entry");
    }

    #[tokio::test]
    async fn max_idle_per_host_caps_the_pool_and_zero_turns_it_off() {
        let pool = pool(None, 2, 16);
        let mut pipes = Vec::new();
        checkin_each(&pool, &["a:1", "a:1", "a:1"], &mut pipes).await;
        assert_eq!(pool.idle_count(&key("a:1")), 2);
        assert_eq!(pool.totals(), (2, 1));

        let off = self::pool(None, 0, 16);
        let (s, _far) = sender().await;
        off.checkin(key("a:1"), s);
        assert_eq!(off.idle_count(&key("a:1")), 0);
    }

    /// The global cap holds across keys, and what goes first is the least recently
    /// used connection, whichever key it belongs to.
    #[tokio::test]
    async fn max_idle_caps_all_hosts_together_evicting_the_least_recently_used() {
        let pool = pool(None, 8, 3);
        let mut pipes = Vec::new();
        checkin_each(&pool, &["a:1", "b:1", "c:1"], &mut pipes).await;
        // a is used again: b is now the least recently used.
        let a = pool.checkout(&key("a:1")).expect("a is idle");
        pool.checkin(key("a:1"), a);
        checkin_each(&pool, &["d:1"], &mut pipes).await;
        assert_eq!(pool.totals(), (3, 3));
        for (k, idle) in [("a:1", 1), ("b:1", 0), ("c:1", 1), ("d:1", 1)] {
            assert_eq!(pool.idle_count(&key(k)), idle, "{k}");
        }
        // Many more keys than the cap: only the last three stay.
        let many: Vec<String> = (0..50).map(|port| format!("many:{port}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        checkin_each(&pool, &many, &mut pipes).await;
        assert_eq!(pool.totals(), (3, 3));
        for k in &many[47..] {
            assert_eq!(pool.idle_count(&key(k)), 1, "{k}");
        }

        let off = self::pool(None, 8, 0);
        let (s, _far) = sender().await;
        off.checkin(key("a:1"), s);
        assert_eq!(off.totals(), (0, 0));
    }

    #[tokio::test]
    async fn a_closed_connection_is_never_handed_out() {
        let pool = pool(None, 4, 16);
        let (s, far, task) = connection().await;
        pool.checkin(key("a:1"), s);
        // The peer goes away; hyper's connection task sees the end of stream and ends.
        drop(far);
        // (hyper reports an idle end of stream as an incomplete message; either way
        // the connection is over.)
        let _ended = task.await.expect("connection task");
        assert!(pool.checkout(&key("a:1")).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_connection_is_dropped() {
        let pool = pool(Some(Duration::from_secs(30)), 4, 16);
        let (s, _far) = sender().await;
        pool.checkin(key("a:1"), s);
        tokio::time::advance(Duration::from_secs(29)).await;
        let s = pool.checkout(&key("a:1")).expect("fresh at 29 s");
        pool.checkin(key("a:1"), s);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(pool.checkout(&key("a:1")).is_none(), "expired at 31 s");
    }

    /// Any pool call drops every expired connection, of every key, and keeps the
    /// fresh ones: keys nobody kicks again do not hold sockets past the timeout.
    #[tokio::test(start_paused = true)]
    async fn any_call_sweeps_the_expired_connections_of_every_key() {
        let pool = pool(Some(Duration::from_secs(30)), 4, 16);
        let mut pipes = Vec::new();
        checkin_each(&pool, &["a:1", "b:1", "b:1"], &mut pipes).await;
        tokio::time::advance(Duration::from_secs(20)).await;
        checkin_each(&pool, &["c:1"], &mut pipes).await;
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(pool.totals(), (4, 3), "nothing swept between calls");

        // a and b are 35 s old, c is 15 s old.
        assert!(pool.checkout(&key("other:1")).is_none());
        assert_eq!(pool.totals(), (1, 1));
        assert_eq!(pool.idle_count(&key("c:1")), 1);

        // A check-in sweeps too.
        tokio::time::advance(Duration::from_secs(15)).await;
        checkin_each(&pool, &["d:1"], &mut pipes).await;
        assert_eq!(pool.totals(), (1, 1));
        assert_eq!(pool.idle_count(&key("d:1")), 1);
    }

    /// The sweep looks at the old end of the pool only: with many fresh idle
    /// connections, each call looks at one of them (and at each it drops), never at
    /// all of them.
    #[tokio::test(start_paused = true)]
    async fn a_sweep_looks_at_one_live_connection_per_call_however_many_are_idle() {
        const IDLE: usize = 200;
        const CALLS: usize = 100;
        let pool = pool(Some(Duration::from_secs(30)), 4, 2 * IDLE);
        let mut pipes = Vec::new();
        let keys: Vec<String> = (0..IDLE).map(|port| format!("idle:{port}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        checkin_each(&pool, &keys, &mut pipes).await;
        let (mut s, _far) = sender().await;
        let before = pool.examined();
        for _ in 0..CALLS {
            pool.checkin(key("busy:1"), s);
            s = pool.checkout(&key("busy:1")).expect("checked in just now");
        }
        assert_eq!(pool.examined() - before, 2 * CALLS);
        assert_eq!(pool.totals(), (IDLE, IDLE));
    }
}
