//! Idle HTTP/1.1 connections, keyed by scheme and authority.
//!
//! A kick hands its connection back only once hyper says the connection is ready
//! for the next request, and *before* the kick returns. So a kick that follows
//! another to the same host always finds the connection idle here: reuse does not
//! depend on a background task winning a race.

use std::collections::HashMap;
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

struct Idle {
    sender: Sender,
    since: Instant,
}

pub(crate) struct Pool {
    idle: Mutex<HashMap<PoolKey, Vec<Idle>>>,
    idle_timeout: Option<Duration>,
    max_idle_per_host: usize,
}

impl Pool {
    pub(crate) fn new(idle_timeout: Option<Duration>, max_idle_per_host: usize) -> Self {
        Self {
            idle: Mutex::new(HashMap::new()),
            idle_timeout,
            max_idle_per_host,
        }
    }

    /// The most recently used idle connection for `key` that is still usable.
    pub(crate) fn checkout(&self, key: &PoolKey) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = idle.get_mut(key)?;
        while let Some(entry) = list.pop() {
            if self.usable(&entry) {
                return Some(entry.sender);
            }
        }
        None
    }

    /// Keeps `sender` for the next kick to `key`, unless the pool is full or off.
    /// Also drops every expired or closed idle connection, so hosts that are
    /// never kicked again do not hold sockets past the idle timeout for long.
    pub(crate) fn checkin(&self, key: PoolKey, sender: Sender) {
        if self.max_idle_per_host == 0 || !sender.is_ready() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.retain(|_, list| {
            list.retain(|entry| self.usable(entry));
            !list.is_empty()
        });
        let list = idle.entry(key).or_default();
        if list.len() < self.max_idle_per_host {
            list.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    /// How many idle connections the pool holds for `key` (tests).
    #[cfg(test)]
    fn idle_count(&self, key: &PoolKey) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .map_or(0, Vec::len)
    }

    fn usable(&self, entry: &Idle) -> bool {
        let fresh = self
            .idle_timeout
            .is_none_or(|timeout| entry.since.elapsed() < timeout);
        fresh && entry.sender.is_ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::rt::TokioIo;
    use tokio::io::{DuplexStream, duplex};
    use tokio::task::JoinHandle;

    fn key(authority: &'static str) -> PoolKey {
        PoolKey {
            scheme: Scheme::HTTP,
            authority: Authority::from_static(authority),
        }
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

    #[tokio::test]
    async fn a_checked_in_connection_is_checked_out_for_the_same_key_only() {
        let pool = Pool::new(None, 4);
        let (s, _far) = sender().await;
        pool.checkin(key("a:1"), s);
        assert!(pool.checkout(&key("b:1")).is_none());
        assert!(pool.checkout(&key("a:1")).is_some());
        assert!(pool.checkout(&key("a:1")).is_none(), "checked out twice");
    }

    #[tokio::test]
    async fn max_idle_per_host_caps_the_pool_and_zero_turns_it_off() {
        let pool = Pool::new(None, 2);
        let mut pipes = Vec::new();
        for _ in 0..3 {
            let (s, far) = sender().await;
            pipes.push(far);
            pool.checkin(key("a:1"), s);
        }
        assert_eq!(pool.idle_count(&key("a:1")), 2);

        let off = Pool::new(None, 0);
        let (s, _far) = sender().await;
        off.checkin(key("a:1"), s);
        assert_eq!(off.idle_count(&key("a:1")), 0);
    }

    #[tokio::test]
    async fn a_closed_connection_is_never_handed_out() {
        let pool = Pool::new(None, 4);
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
        let pool = Pool::new(Some(Duration::from_secs(30)), 4);
        let (s, _far) = sender().await;
        pool.checkin(key("a:1"), s);
        tokio::time::advance(Duration::from_secs(29)).await;
        let s = pool.checkout(&key("a:1")).expect("fresh at 29 s");
        pool.checkin(key("a:1"), s);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(pool.checkout(&key("a:1")).is_none(), "expired at 31 s");
    }
}
