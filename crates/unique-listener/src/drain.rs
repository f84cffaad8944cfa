//! Graceful shutdown: each connection is told to finish its request and close, and the loop
//! waits until every connection is gone.
//!
//! hyper-util's `GracefulShutdown` does this by polling a `watch` receiver inside every
//! connection future, so each wake-up of a connection (twice per request) polled it too: about
//! 450 instructions of a claim's 24 500 (callgrind). Here the connection's task only loads an
//! atomic flag per poll; the signal is awaited by the connection's watchdog task, which runs
//! only on its timer or when the signal comes, and wakes the connection's task.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use hyper::rt::{Read, Write};
use hyper::server::conn::http1::Connection;
use hyper::service::HttpService;
use tokio::sync::watch;

/// The accept loop's side: one [`Drain::watcher`] per connection.
#[derive(Debug)]
pub(crate) struct Drain {
    tx: watch::Sender<()>,
}

impl Drain {
    pub(crate) fn new() -> Self {
        Self {
            tx: watch::Sender::new(()),
        }
    }

    /// A connection's share: held for as long as the connection lives.
    pub(crate) fn watcher(&self) -> DrainWatcher {
        DrainWatcher {
            rx: self.tx.subscribe(),
        }
    }

    /// Signals every connection, then waits until each has dropped its watcher.
    pub(crate) async fn shutdown(self) {
        let _ = self.tx.send(());
        self.tx.closed().await;
    }
}

/// A connection's part of the drain: resolves [`signalled`](Self::signalled) when shutdown
/// begins, and counts the connection as open until dropped.
#[derive(Debug)]
pub(crate) struct DrainWatcher {
    rx: watch::Receiver<()>,
}

impl DrainWatcher {
    /// Resolves when shutdown begins (never, if the drain is dropped without one).
    pub(crate) async fn signalled(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Tells one connection's task to shut down gracefully.
#[derive(Debug, Default)]
pub(crate) struct ShutdownSignal {
    requested: AtomicBool,
    /// The connection task's waker, stored at its first poll (a task's waker stays valid
    /// for the task's life).
    waker: Mutex<Option<Waker>>,
}

impl ShutdownSignal {
    pub(crate) fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        let waker = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(waker) = waker.as_ref() {
            waker.wake_by_ref();
        }
    }
}

/// A hyper connection that turns to a graceful shutdown once its [`ShutdownSignal`] is
/// requested: the request in flight is answered, then the connection closes (an idle one at
/// once).
pub(crate) struct Graceful<I, S>
where
    S: HttpService<hyper::body::Incoming>,
{
    conn: Pin<Box<Connection<I, S>>>,
    signal: Arc<ShutdownSignal>,
    registered: bool,
    shutting_down: bool,
}

impl<I, S> Graceful<I, S>
where
    S: HttpService<hyper::body::Incoming>,
{
    pub(crate) fn new(conn: Connection<I, S>, signal: Arc<ShutdownSignal>) -> Self {
        Self {
            conn: Box::pin(conn),
            signal,
            registered: false,
            shutting_down: false,
        }
    }
}

impl<I, S, B> Future for Graceful<I, S>
where
    I: Read + Write + Unpin,
    S: HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Output = hyper::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if !this.registered {
            // Stored before the flag is read: a request after this finds the waker, one
            // before it is seen just below.
            *this
                .signal
                .waker
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
            this.registered = true;
        }
        if !this.shutting_down && this.signal.requested.load(Ordering::SeqCst) {
            this.shutting_down = true;
            this.conn.as_mut().graceful_shutdown();
        }
        this.conn.as_mut().poll(cx)
    }
}
