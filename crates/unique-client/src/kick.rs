//! Receiving a kick: destroy the local session if, and only if, it is older than the kicker.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, timeout};
use unique_core::{Key, KickPayload};

/// Kick handling settings. Default: `destroy_timeout` 2 s, `early_kick_memory` 60 s.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct KickOptions {
    /// How long one kick waits for `destroy` before answering
    /// [`KickAck::TimedOut`]. The destroy itself keeps running.
    pub destroy_timeout: Duration,
    /// How long a kick that found no session here is remembered for
    /// [`KickHandler::admit`]. Longer than a login's retry budget (25 s by default),
    /// so a login whose answer was still on its way when the kick came is refused.
    pub early_kick_memory: Duration,
}

impl Default for KickOptions {
    fn default() -> Self {
        Self {
            destroy_timeout: Duration::from_secs(2),
            early_kick_memory: Duration::from_mins(1),
        }
    }
}

impl KickOptions {
    /// Sets [`destroy_timeout`](Self::destroy_timeout).
    #[must_use]
    pub fn destroy_timeout(mut self, timeout: Duration) -> Self {
        self.destroy_timeout = timeout;
        self
    }

    /// Sets [`early_kick_memory`](Self::early_kick_memory).
    #[must_use]
    pub fn early_kick_memory(mut self, memory: Duration) -> Self {
        self.early_kick_memory = memory;
        self
    }
}

/// Why a kick destroyed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IgnoreReason {
    /// This node holds no session for the key.
    NoSession,
    /// The local session's gen is not older than the kick's gen: it is the newer session
    /// (or the kicker's own), and a kick never removes it (I6).
    NotOlder {
        /// The local session's gen.
        local_generation: i64,
    },
}

/// What a kick came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KickAck {
    /// `destroy(key, local_generation)` ran to completion.
    Destroyed {
        /// The gen of the destroyed session.
        local_generation: i64,
    },
    /// Nothing older than the kick was here.
    Ignored(IgnoreReason),
    /// `destroy` did not finish within the destroy timeout (it keeps running).
    TimedOut {
        /// The gen of the session being destroyed.
        local_generation: i64,
    },
    /// `destroy` panicked; the session may still be here.
    Failed {
        /// The gen of the session whose destroy failed.
        local_generation: i64,
    },
}

impl KickAck {
    /// No session older than the kick remains here (destroyed, or there was none): the
    /// kick receiver answers 200 exactly for these.
    pub fn no_older_session(&self) -> bool {
        matches!(self, Self::Destroyed { .. } | Self::Ignored(_))
    }

    /// A stable lower-case name: `destroyed`, `no-session`, `not-older`, `timed-out`, `failed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Destroyed { .. } => "destroyed",
            Self::Ignored(IgnoreReason::NoSession) => "no-session",
            Self::Ignored(IgnoreReason::NotOlder { .. }) => "not-older",
            Self::TimedOut { .. } => "timed-out",
            Self::Failed { .. } => "failed",
        }
    }
}

impl fmt::Display for KickAck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

type GetGeneration = dyn Fn(&Key) -> Option<i64> + Send + Sync;
type Destroy = dyn Fn(Key, i64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flight {
    Running,
    Done,
    Panicked,
}

/// Applies kicks to this node's sessions, fenced by gen and single-flight per session.
///
/// A kick `{project, env, uid, gen}` announces that a session with that gen is taking the
/// key. The handler asks `get_local_generation(&key)`:
///
/// - `None` → [`IgnoreReason::NoSession`];
/// - `Some(local) if local >= gen` → [`IgnoreReason::NotOlder`]: a newer session is never
///   killed (I6);
/// - otherwise it runs `destroy(key, local)` and waits for it, at most `destroy_timeout`.
///
/// Concurrent kicks for the same session (same key and local gen) share one `destroy`
/// call: later ones wait for the running one's result (single-flight). `destroy` runs on
/// its own tokio task, so it completes even if the kick that started it is dropped or times
/// out, and a later kick joins it rather than starting a second one.
///
/// `destroy(key, local)` must remove exactly the session at gen `local` (not a newer one
/// created meanwhile), so that afterwards `get_local_generation` no longer reports it; then
/// each session is destroyed exactly once however many kicks race. `get_local_generation`
/// runs under the handler's internal lock: keep it quick and never call the handler from it.
///
/// **A kick can arrive before the login it targets has finished here**: the claim was
/// written, a newer login read it and kicked, and the first login's answer is still on
/// its way. There is no session to destroy yet, so the kick is answered
/// [`IgnoreReason::NoSession`] (200: nothing older is online), and the handler remembers
/// its gen for [`KickOptions::early_kick_memory`]. Bring every new session online through
/// [`admit`](Self::admit), which refuses a session such a kick already replaced; without
/// it the late session stays online until its heartbeat sees the newer gen (I5b).
#[derive(Clone)]
pub struct KickHandler {
    inner: Arc<Inner>,
}

struct Inner {
    get_local_generation: Box<GetGeneration>,
    destroy: Box<Destroy>,
    options: KickOptions,
    table: Mutex<Table>,
}

/// Everything kicks and admissions decide on, under one lock.
#[derive(Default)]
struct Table {
    /// Destroys in progress, by session.
    flights: HashMap<(Key, i64), watch::Receiver<Flight>>,
    /// Kicks that found no session: the newest gen per key, and when it came.
    early_kicks: HashMap<Key, (i64, Instant)>,
}

impl Table {
    fn remember_early_kick(&mut self, key: Key, generation: i64, memory: Duration) {
        // Rare (a kick racing a login), so a sweep here keeps the map small.
        self.early_kicks.retain(|_, (_, at)| at.elapsed() < memory);
        let newest = self
            .early_kicks
            .get(&key)
            .map_or(generation, |&(known, _)| known.max(generation));
        self.early_kicks.insert(key, (newest, Instant::now()));
    }
}

impl KickHandler {
    /// A handler over this node's session table (`get_local_generation`) and its way to end
    /// a session (`destroy`).
    pub fn new<G, D, Fut>(get_local_generation: G, destroy: D, options: KickOptions) -> Self
    where
        G: Fn(&Key) -> Option<i64> + Send + Sync + 'static,
        D: Fn(Key, i64) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self {
            inner: Arc::new(Inner {
                get_local_generation: Box::new(get_local_generation),
                destroy: Box::new(move |key, generation| Box::pin(destroy(key, generation))),
                options,
                table: Mutex::new(Table::default()),
            }),
        }
    }

    /// Its settings.
    pub fn options(&self) -> &KickOptions {
        &self.inner.options
    }

    /// Brings a session that just logged in at `generation` online by running
    /// `go_online` (e.g. inserting it into [`Sessions`](crate::Sessions)), unless a kick
    /// for a newer gen of `key` already came while no session was here: then that
    /// session has been replaced before it started, `go_online` does not run, and the
    /// result is `false` (end the login as if it had been kicked).
    ///
    /// `go_online` runs under the same lock as the kick decision, so a kick either
    /// comes first and is seen here, or comes after and finds the session to destroy.
    /// Keep it quick and never call the handler from it.
    pub fn admit(&self, key: &Key, generation: i64, go_online: impl FnOnce()) -> bool {
        let memory = self.inner.options.early_kick_memory;
        let mut table = self.inner.table();
        if let Some(&(kicked, at)) = table.early_kicks.get(key) {
            if kicked > generation && at.elapsed() < memory {
                return false;
            }
            // Older or forgotten: it can never refuse this key's later, newer logins.
            table.early_kicks.remove(key);
        }
        go_online();
        true
    }

    /// Handles one kick. Must run inside a tokio runtime (`destroy` is spawned on it).
    pub async fn handle(&self, kick: &KickPayload) -> KickAck {
        let (local_generation, mut flight) = match self.decide(kick) {
            Ok(joined) => joined,
            Err(ignored) => return KickAck::Ignored(ignored),
        };
        let waited = timeout(
            self.inner.options.destroy_timeout,
            flight.wait_for(|state| *state != Flight::Running),
        )
        .await;
        match waited {
            Ok(Ok(state)) if *state == Flight::Done => KickAck::Destroyed { local_generation },
            // Panicked, or the sender vanished without a verdict.
            Ok(_) => KickAck::Failed { local_generation },
            Err(_) => KickAck::TimedOut { local_generation },
        }
    }

    /// Reads the local gen and joins (or starts) the destroy of an older session.
    ///
    /// Both happen under the flight lock, and a flight leaves the table only after its
    /// `destroy` returned (which removed the session): so a kick either joins the running
    /// destroy or sees the session already gone. One session is destroyed exactly once.
    fn decide(&self, kick: &KickPayload) -> Result<(i64, watch::Receiver<Flight>), IgnoreReason> {
        let key = kick.key();
        let mut table = self.inner.table();
        let Some(local_generation) = (self.inner.get_local_generation)(&key) else {
            let memory = self.inner.options.early_kick_memory;
            table.remember_early_kick(key, kick.generation, memory);
            return Err(IgnoreReason::NoSession);
        };
        if local_generation >= kick.generation {
            return Err(IgnoreReason::NotOlder { local_generation });
        }
        let slot = (key, local_generation);
        if let Some(running) = table.flights.get(&slot) {
            return Ok((local_generation, running.clone()));
        }
        let (tx, rx) = watch::channel(Flight::Running);
        table.flights.insert(slot.clone(), rx.clone());
        drop(table);
        let landing = Landing {
            inner: Arc::clone(&self.inner),
            slot: Some(slot),
            tx,
            state: Flight::Panicked,
        };
        tokio::spawn(landing.fly());
        Ok((local_generation, rx))
    }
}

impl Inner {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // The maps stay consistent even if a holder panicked: every update is one insert,
        // one remove or one retain.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs one destroy and, whatever happens (even a panic in `destroy`), clears its slot and
/// tells every waiter how it ended.
struct Landing {
    inner: Arc<Inner>,
    slot: Option<(Key, i64)>,
    tx: watch::Sender<Flight>,
    state: Flight,
}

impl Landing {
    async fn fly(mut self) {
        let (key, generation) = self.slot.clone().expect("slot set until drop");
        (self.inner.destroy)(key, generation).await;
        self.state = Flight::Done;
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.inner.table().flights.remove(&slot);
        }
        self.tx.send_replace(self.state);
    }
}

impl fmt::Debug for KickHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KickHandler")
            .field("options", &self.inner.options)
            .field("in_flight", &self.inner.table().flights.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_names_and_success() {
        let cases = [
            (
                KickAck::Destroyed {
                    local_generation: 1,
                },
                "destroyed",
                true,
            ),
            (
                KickAck::Ignored(IgnoreReason::NoSession),
                "no-session",
                true,
            ),
            (
                KickAck::Ignored(IgnoreReason::NotOlder {
                    local_generation: 1,
                }),
                "not-older",
                true,
            ),
            (
                KickAck::TimedOut {
                    local_generation: 1,
                },
                "timed-out",
                false,
            ),
            (
                KickAck::Failed {
                    local_generation: 1,
                },
                "failed",
                false,
            ),
        ];
        for (ack, name, ok) in cases {
            assert_eq!(ack.to_string(), name);
            assert_eq!(ack.no_older_session(), ok, "{name}");
        }
    }
}
