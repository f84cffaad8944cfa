//! Receiving a kick: destroy the local session if, and only if, it is older than the kicker.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, timeout};
use unique_core::{Key, KickPayload, KickReason, MAX_LOGOUT_REASON_CHARS};

/// Kick handling settings. Default: `destroy_timeout` 2 s, `early_kick_memory` 60 s,
/// `max_early_kicks` 4096.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct KickOptions {
    /// How long one kick waits for `destroy` before answering
    /// [`KickAck::TimedOut`]. The destroy itself keeps running.
    pub destroy_timeout: Duration,
    /// How long a kick that found no session here, while a login of its key was expected
    /// ([`KickHandler::expect_login`]), can refuse that login's
    /// [`admit`](PendingLogin::admit). Longer than a login's retry budget (25 s by
    /// default), so a login whose answer was still on its way when the kick came is
    /// refused.
    pub early_kick_memory: Duration,
    /// How many keys at most have an early kick remembered at once (one per key: the
    /// newest gen). Past it an early kick is not remembered, only counted
    /// ([`KickHandler::dropped_early_kicks`]): the login it replaced then goes online and
    /// is removed by its heartbeat instead (I5b). Only keys with a login in flight here
    /// can hold one, so the cap matters only when that many logins are in flight and
    /// kicked at once; 0 remembers none.
    pub max_early_kicks: usize,
}

impl Default for KickOptions {
    fn default() -> Self {
        Self {
            destroy_timeout: Duration::from_secs(2),
            early_kick_memory: Duration::from_mins(1),
            max_early_kicks: 4096,
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

    /// Sets [`max_early_kicks`](Self::max_early_kicks).
    #[must_use]
    pub fn max_early_kicks(mut self, max: usize) -> Self {
        self.max_early_kicks = max;
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

/// Why a kick destroyed a session: the kick's `reason` and `message`
/// ([`KickPayload::reason`], [`KickPayload::message`]), what
/// [`KickHandler::with_cause`]'s `destroy` and [`Admission::Replaced`] are given.
///
/// A node keeps at most [`MAX_CAUSE_BYTES`] bytes of the message and of an unknown reason's
/// name, cut at a character boundary: what the server sends fits (an admin's reason is at
/// most that long), and a forged or garbled kick cannot make a node hold more.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct KickCause {
    /// Why the kick was sent: [`KickReason::LoginElsewhere`] for a takeover (and for a kick
    /// from a server older than the field), [`KickReason::Admin`] for an admin logout.
    pub reason: KickReason,
    /// Text for the user (an admin logout's reason), if the kick carried one.
    pub message: Option<String>,
}

/// The most bytes of a kick's message (and of an unknown reason's name) a node keeps: the
/// server's own limit on an admin logout's reason ([`MAX_LOGOUT_REASON_CHARS`]
/// characters) at 4 bytes, the most a character takes in UTF-8.
pub const MAX_CAUSE_BYTES: usize = 4 * MAX_LOGOUT_REASON_CHARS;

impl KickCause {
    /// A cause with `reason` and no message.
    pub fn new(reason: KickReason) -> Self {
        Self {
            reason,
            message: None,
        }
    }

    /// The same cause, with `message`.
    #[must_use]
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// The cause `kick` names, each text cut to [`MAX_CAUSE_BYTES`].
    pub fn of(kick: &KickPayload) -> Self {
        let reason = match &kick.reason {
            KickReason::Other(name) => KickReason::Other(bounded(name).to_owned()),
            known => known.clone(),
        };
        Self {
            reason,
            message: kick.message.as_deref().map(|m| bounded(m).to_owned()),
        }
    }
}

impl From<&KickPayload> for KickCause {
    fn from(kick: &KickPayload) -> Self {
        Self::of(kick)
    }
}

/// `text`, cut to at most [`MAX_CAUSE_BYTES`] at a character boundary.
fn bounded(text: &str) -> &str {
    if text.len() <= MAX_CAUSE_BYTES {
        return text;
    }
    let mut end = MAX_CAUSE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

type GetGeneration = dyn Fn(&Key) -> Option<i64> + Send + Sync;
type Destroy =
    dyn Fn(Key, i64, KickCause) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flight {
    Running,
    Done,
    Panicked,
}

/// Applies kicks to this node's sessions, fenced by gen and single-flight per session.
///
/// A kick `{project, env, uid, gen, reason, message?}` announces that a session with that gen
/// is taking the key, or (an admin logout, reason `admin`) that the session before that gen
/// was logged out. The handler asks `get_local_generation(&key)`:
///
/// - `None` → [`IgnoreReason::NoSession`];
/// - `Some(local) if local >= gen` → [`IgnoreReason::NotOlder`]: a newer session is never
///   killed (I6);
/// - otherwise it runs `destroy(key, local)` and waits for it, at most `destroy_timeout`.
///
/// Concurrent kicks for the same session (same key and local gen) share one `destroy`
/// call: later ones wait for the running one's result (single-flight), and the session
/// ends with the first kick's [`KickCause`]. `destroy` runs on
/// its own tokio task, so it completes even if the kick that started it is dropped or times
/// out, and a later kick joins it rather than starting a second one.
///
/// `destroy(key, local)` must remove exactly the session at gen `local` (not a newer one
/// created meanwhile), so that afterwards `get_local_generation` no longer reports it; then
/// each session is destroyed exactly once however many kicks race. `get_local_generation`
/// runs under the handler's internal lock: keep it quick and never call the handler from it.
///
/// # Logins: `expect_login`, then `admit`
///
/// **A kick can arrive before the login it targets has finished here**: the claim was
/// written, a newer login read it and kicked, and the first login's answer is still on
/// its way. There is no session to destroy yet, so the kick is answered
/// [`IgnoreReason::NoSession`] (200: nothing older is online). So that the late session
/// never goes online beside the newer one, every login goes through two steps:
///
/// 1. [`expect_login(&key)`](Self::expect_login) **before its claim is sent**, which returns
///    a [`PendingLogin`];
/// 2. [`PendingLogin::admit`] once the claim answered, which brings the session online
///    unless a kick for a newer gen came meanwhile (or the handler was closed).
///
/// A kick that finds no session is remembered only while a login of its key is expected
/// here, for at most [`KickOptions::early_kick_memory`], and for at most
/// [`KickOptions::max_early_kicks`] keys; it is forgotten when the key's last pending login
/// is admitted or dropped. A kick for a key no login here expects, however many arrive, is
/// answered and forgotten at once: the memory is bounded by this node's own logins in
/// flight, never by what the server sends. Without these steps (a session put online
/// directly) the late session stays online until its heartbeat sees the newer gen (I5b).
///
/// # Closing
///
/// [`close`](Self::close) (what [`Node::shutdown`](crate::Node::shutdown) does) makes
/// every later kick answer [`IgnoreReason::NoSession`] without consulting the table, and
/// every later [`admit`](PendingLogin::admit) refuse; [`closed`](Self::closed) resolves then,
/// so a kick receiver can stop listening. Destroys already running finish.
#[derive(Clone)]
pub struct KickHandler {
    inner: Arc<Inner>,
}

struct Inner {
    get_local_generation: Box<GetGeneration>,
    destroy: Box<Destroy>,
    options: KickOptions,
    table: Mutex<Table>,
    /// Set (under the table lock) when the handler closes.
    closed: watch::Sender<bool>,
}

/// How often at most a full cap triggers a sweep of expired early kicks.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Everything kicks and admissions decide on, under one lock.
#[derive(Default)]
struct Table {
    /// Destroys in progress, by session.
    flights: HashMap<(Key, i64), watch::Receiver<Flight>>,
    /// Logins in flight here, by key. An entry lives exactly as long as a
    /// [`PendingLogin`] of its key, so this map is as large as this node's own logins
    /// in flight, whatever kicks arrive.
    pending: HashMap<Key, Pending>,
    /// How many `pending` entries hold an early kick (at most `max_early_kicks`).
    remembered: usize,
    /// Early kicks not remembered because `remembered` was at the cap.
    dropped: u64,
    /// No sweep of expired early kicks before this.
    next_sweep: Option<Instant>,
    /// [`KickHandler::close`] ran.
    closed: bool,
}

/// The logins of one key in flight here.
#[derive(Default)]
struct Pending {
    /// How many [`PendingLogin`]s of the key are alive.
    logins: usize,
    /// The newest gen a kick that found no session announced while they were.
    kick: Option<EarlyKick>,
}

/// A kick that found no session while a login of its key was expected here.
struct EarlyKick {
    generation: i64,
    /// When the kick that raised `generation` came.
    at: Instant,
    /// Why it was sent, for the login it refuses.
    cause: KickCause,
}

impl Table {
    /// Remembers a kick that found no session, if a login of its key is expected here.
    /// O(1), except that a full cap sweeps expired kicks at most once per [`SWEEP_EVERY`].
    fn remember_early_kick(&mut self, key: &Key, kick: &KickPayload, options: &KickOptions) {
        let generation = kick.generation;
        let Some(pending) = self.pending.get_mut(key) else {
            // No login of this key in flight here: nothing the kick could refuse.
            return;
        };
        let memory = options.early_kick_memory;
        let now = Instant::now();
        if let Some(known) = &mut pending.kick {
            // The newest gen wins; an expired one is replaced by whatever comes.
            if generation >= known.generation || now.duration_since(known.at) >= memory {
                *known = EarlyKick {
                    generation,
                    at: now,
                    cause: KickCause::of(kick),
                };
            }
            return;
        }
        if self.remembered >= options.max_early_kicks {
            self.sweep(now, memory);
        }
        if self.remembered >= options.max_early_kicks {
            self.dropped += 1;
            if self.dropped.is_power_of_two() {
                tracing::warn!(
                    %key,
                    generation,
                    dropped = self.dropped,
                    max_early_kicks = options.max_early_kicks,
                    "early kick not remembered: too many logins in flight were kicked; \
                     the heartbeat removes the session it replaced"
                );
            }
            return;
        }
        if let Some(pending) = self.pending.get_mut(key) {
            pending.kick = Some(EarlyKick {
                generation,
                at: now,
                cause: KickCause::of(kick),
            });
            self.remembered += 1;
        }
    }

    /// Forgets every expired early kick, at most once per [`SWEEP_EVERY`].
    fn sweep(&mut self, now: Instant, memory: Duration) {
        if self.next_sweep.is_some_and(|next| now < next) {
            return;
        }
        self.next_sweep = Some(now + SWEEP_EVERY);
        for pending in self.pending.values_mut() {
            if pending
                .kick
                .as_ref()
                .is_some_and(|kick| now.duration_since(kick.at) >= memory)
            {
                pending.kick = None;
                self.remembered -= 1;
            }
        }
    }

    fn expect_login(&mut self, key: &Key) {
        match self.pending.get_mut(key) {
            Some(pending) => pending.logins += 1,
            None => {
                self.pending.insert(
                    key.clone(),
                    Pending {
                        logins: 1,
                        kick: None,
                    },
                );
            }
        }
    }

    /// One login of `key` ended; the last one takes the key's early kick with it.
    fn end_login(&mut self, key: &Key) {
        let Some(pending) = self.pending.get_mut(key) else {
            return;
        };
        pending.logins -= 1;
        if pending.logins == 0
            && let Some(ended) = self.pending.remove(key)
            && ended.kick.is_some()
        {
            self.remembered -= 1;
        }
    }

    /// The cause of a kick for a gen above `generation` that came while `key`'s login was
    /// expected, within `memory`.
    fn replaced(&self, key: &Key, generation: i64, memory: Duration) -> Option<&KickCause> {
        self.pending
            .get(key)
            .and_then(|pending| pending.kick.as_ref())
            .filter(|kick| kick.generation > generation && kick.at.elapsed() < memory)
            .map(|kick| &kick.cause)
    }
}

impl KickHandler {
    /// A handler over this node's session table (`get_local_generation`) and its way to end
    /// a session (`destroy`). To tell the user why the session ended (a takeover or an admin
    /// logout, and the admin's message), use [`with_cause`](Self::with_cause).
    pub fn new<G, D, Fut>(get_local_generation: G, destroy: D, options: KickOptions) -> Self
    where
        G: Fn(&Key) -> Option<i64> + Send + Sync + 'static,
        D: Fn(Key, i64) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self::with_cause(
            get_local_generation,
            move |key, generation, _: KickCause| destroy(key, generation),
            options,
        )
    }

    /// Like [`new`](Self::new), with a `destroy` that is also told why the session ends:
    /// the [`KickCause`] of the kick that started the destroy (the first one, when several
    /// kicks for one session race).
    pub fn with_cause<G, D, Fut>(get_local_generation: G, destroy: D, options: KickOptions) -> Self
    where
        G: Fn(&Key) -> Option<i64> + Send + Sync + 'static,
        D: Fn(Key, i64, KickCause) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self {
            inner: Arc::new(Inner {
                get_local_generation: Box::new(get_local_generation),
                destroy: Box::new(move |key, generation, cause| {
                    Box::pin(destroy(key, generation, cause))
                }),
                options,
                table: Mutex::new(Table::default()),
                closed: watch::Sender::new(false),
            }),
        }
    }

    /// Its settings.
    pub fn options(&self) -> &KickOptions {
        &self.inner.options
    }

    /// Announces a login of `key`: call it **before the login's claim is sent**, and bring
    /// the session online through the returned guard's [`admit`](PendingLogin::admit).
    ///
    /// While the guard lives, a kick for `key` that finds no session here is remembered
    /// (the newest gen, see [`KickOptions`]), so that `admit` can refuse the session it
    /// replaced. Several logins of one key may be expected at once; the key's early kick is
    /// forgotten when the last of them is admitted or dropped. Dropping the guard abandons
    /// the login (a failed claim).
    pub fn expect_login(&self, key: &Key) -> PendingLogin {
        self.inner.table().expect_login(key);
        PendingLogin {
            inner: Arc::clone(&self.inner),
            key: key.clone(),
            ended: false,
        }
    }

    /// How many keys have an early kick remembered now (at most
    /// [`KickOptions::max_early_kicks`]). An expired one is counted until its key's last
    /// login ends or a sweep drops it.
    pub fn remembered_early_kicks(&self) -> usize {
        self.inner.table().remembered
    }

    /// How many early kicks were not remembered because
    /// [`KickOptions::max_early_kicks`] keys already had one.
    pub fn dropped_early_kicks(&self) -> u64 {
        self.inner.table().dropped
    }

    /// Closes the handler: from now on every kick answers [`IgnoreReason::NoSession`]
    /// without consulting the session table, and every [`PendingLogin::admit`] refuses.
    /// Destroys already running finish. Idempotent.
    pub fn close(&self) {
        self.close_with(|| ());
    }

    /// Closes the handler and runs `f` under the lock kicks and admissions decide under, so
    /// no kick or admission is decided between the two (the node drains its sessions here).
    pub(crate) fn close_with<R>(&self, f: impl FnOnce() -> R) -> R {
        let mut table = self.inner.table();
        table.closed = true;
        let result = f();
        self.inner.closed.send_replace(true);
        drop(table);
        result
    }

    /// [`close`](Self::close) has run.
    pub fn is_closed(&self) -> bool {
        *self.inner.closed.borrow()
    }

    /// Resolves once the handler is closed (at once if it already is). Cancel-safe: a kick
    /// receiver can `select!` on it to stop listening.
    pub async fn closed(&self) {
        let mut closed = self.inner.closed.subscribe();
        // The sender lives in `inner`, which `self` keeps alive: this cannot fail.
        let _ = closed.wait_for(|closed| *closed).await;
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
        if table.closed {
            return Err(IgnoreReason::NoSession);
        }
        let Some(local_generation) = (self.inner.get_local_generation)(&key) else {
            table.remember_early_kick(&key, kick, &self.inner.options);
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
            cause: Some(KickCause::of(kick)),
            tx,
            state: Flight::Panicked,
        };
        tokio::spawn(landing.fly());
        Ok((local_generation, rx))
    }
}

/// A login of one key that [`KickHandler::expect_login`] announced, until it is admitted
/// ([`admit`](Self::admit)) or abandoned (dropped).
///
/// While it lives, a kick for its key that finds no session here is remembered, so that
/// `admit` refuses a session such a kick already replaced.
#[must_use = "a login announced but never admitted only holds memory until dropped"]
pub struct PendingLogin {
    inner: Arc<Inner>,
    key: Key,
    /// [`admit`](Self::admit) ended the login already.
    ended: bool,
}

impl PendingLogin {
    /// The key whose login this is.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Brings the session that just logged in at `generation` online by running
    /// `go_online` (e.g. inserting it into [`Sessions`](crate::Sessions)), and ends the
    /// login. Returns `false`, without running `go_online`, when the session must not go
    /// online:
    ///
    /// - a kick for a newer gen of the key came while no session was here and the login
    ///   was expected (within [`KickOptions::early_kick_memory`]): the session has been
    ///   replaced before it started; end the login as if it had been kicked;
    /// - or the handler is closed ([`KickHandler::is_closed`]).
    ///
    /// `go_online` runs under the same lock as the kick decision, so a kick either comes
    /// first and is seen here, or comes after and finds the session to destroy. Keep it
    /// quick and never call the handler from it.
    pub fn admit(self, generation: i64, go_online: impl FnOnce()) -> bool {
        self.try_admit(generation, go_online) == Admission::Admitted
    }

    /// [`admit`](Self::admit), saying why a session was refused: [`Admission::Closed`] when
    /// the handler is closed, else [`Admission::Replaced`] with the cause of the kick that
    /// replaced it (a newer login's, or an admin logout's).
    pub fn try_admit(mut self, generation: i64, go_online: impl FnOnce()) -> Admission {
        let mut table = self.inner.table();
        let memory = self.inner.options.early_kick_memory;
        let admission = if table.closed {
            Admission::Closed
        } else {
            match table.replaced(&self.key, generation, memory) {
                Some(cause) => Admission::Replaced(cause.clone()),
                None => Admission::Admitted,
            }
        };
        // Ended first, so that a panicking `go_online` leaves the table consistent; the
        // lock is held throughout, so no kick sees the login ended but not yet online.
        table.end_login(&self.key);
        self.ended = true;
        if admission == Admission::Admitted {
            go_online();
        }
        admission
    }
}

/// What [`PendingLogin::try_admit`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission {
    /// The session went online (`go_online` ran).
    Admitted,
    /// A kick for a newer gen came while the login was in flight: the session was replaced
    /// before it started, for this cause.
    Replaced(KickCause),
    /// The handler is closed ([`KickHandler::close`]).
    Closed,
}

impl Drop for PendingLogin {
    fn drop(&mut self) {
        if !self.ended {
            self.inner.table().end_login(&self.key);
        }
    }
}

impl fmt::Debug for PendingLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingLogin")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table stays consistent even if a holder panicked: no user code (neither
        // `get_local_generation` nor `go_online`) runs between the steps of one update.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs one destroy and, whatever happens (even a panic in `destroy`), clears its slot and
/// tells every waiter how it ended.
struct Landing {
    inner: Arc<Inner>,
    slot: Option<(Key, i64)>,
    /// Handed to `destroy` when it starts.
    cause: Option<KickCause>,
    tx: watch::Sender<Flight>,
    state: Flight,
}

impl Landing {
    async fn fly(mut self) {
        let (key, generation) = self.slot.clone().expect("slot set until drop");
        let cause = self.cause.take().unwrap_or_default();
        (self.inner.destroy)(key, generation, cause).await;
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
        let table = self.inner.table();
        f.debug_struct("KickHandler")
            .field("options", &self.inner.options)
            .field("in_flight", &table.flights.len())
            .field("pending_logins", &table.pending.len())
            .field("remembered_early_kicks", &table.remembered)
            .field("closed", &table.closed)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
#[path = "kick_tests.rs"]
mod tests;
