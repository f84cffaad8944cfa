//! The kick-then-write arbitration.

mod pool;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use tokio::time::Instant as Deadline;

use crate::error::Error;
use crate::fence::{CasOutcome, Fence, VacantClaim, VacantClaims};
use crate::kicker::{KickOutcome, Kicker};
use crate::observer::{NoopObserver, Observer, ShedReason};
use crate::pool::{DEFAULT_SESSION_LIMIT, MAX_POOL_PLACES, place_index};
use crate::queue::{ClaimQueue, Turn};
use crate::store::{MAX_BATCH_KEYS, Store};
use crate::types::{
    ClaimInput, ClaimOutcome, CurrentView, Key, KickDetail, KickPayload, KickReason, LogoutInput,
    LogoutOutcome, Owner, OwnerState, SessionsPage, SlotLogout, UserKey, UserLogoutInput,
    UserSession,
};
use crate::validate::ValidationLimits;

/// Default number of CAS attempts per claim.
pub const DEFAULT_MAX_CLAIM_ATTEMPTS: u32 = 3;
/// Default time the old session's receiver gets to confirm a kick.
pub const DEFAULT_KICK_TIMEOUT: Duration = Duration::from_secs(3);
/// Default most claims that may wait in one key's line behind the one holding its turn.
pub const DEFAULT_MAX_QUEUED_CLAIMS: usize = 16;
/// Default deadline of one claim, from its arrival (its wait in line included).
pub const DEFAULT_CLAIM_TIMEOUT: Duration = Duration::from_secs(10);

/// The most sessions [`Arbiter::logout_all`] logs out (and kicks) at once.
pub const LOGOUT_ALL_CONCURRENCY: usize = 8;

/// The sessions one listing page holds when the caller does not say.
pub const DEFAULT_SESSIONS_PAGE: usize = 100;
/// The most sessions one listing page holds.
pub const MAX_SESSIONS_PAGE: usize = 1000;

/// The slot of a user's own line in the claim queue, which claims for a new slot take
/// while they count the user's sessions: a slot no claim can name (`#` is refused in a
/// slot), so the user's line never meets a slot's.
const USER_LINE_SLOT: &str = "#";

/// Arbitrates logins so that each key has at most one online session.
///
/// Cheap to clone (one `Arc`), `Send + Sync`, no global state. See [`Arbiter::claim`]
/// for the algorithm.
///
/// # Claim queue
///
/// Claims on one key through one arbiter (and its clones) wait in line, first in,
/// first out, instead of racing each other's compare-and-set: each runs its
/// attempts alone and the next starts from what it wrote, so a process does not
/// lose races to itself. The store's fenced CAS still decides between processes
/// and arbiters; the store contract is unchanged. Claims on different keys never
/// wait for each other, and `current`, `release` and `logout` never wait (a logout,
/// like a release, is fenced on the gen it read instead; see [`Arbiter::logout`]).
///
/// The line is bounded: [`ArbiterBuilder::max_queued_claims`] (default
/// [`DEFAULT_MAX_QUEUED_CLAIMS`]) refuses claims beyond it with `Throttled`, and
/// every claim's deadline ([`ArbiterBuilder::claim_timeout`], default
/// [`DEFAULT_CLAIM_TIMEOUT`]) counts its wait in line. The shard a key's line lives
/// in comes from a hash seeded per arbiter, so callers cannot choose uids that
/// crowd one shard's mutex. A claim future dropped while it waits leaves
/// the line; dropped while it holds the turn, it hands the turn on. The queue keeps
/// an entry only for keys with a claim in progress ([`Arbiter::claiming_keys`]).
pub struct Arbiter<S> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    store: S,
    kicker: Option<Box<dyn Kicker>>,
    observer: Box<dyn Observer>,
    max_claim_attempts: u32,
    kick_timeout: Duration,
    claim_timeout: Duration,
    limits: ValidationLimits,
    queue: ClaimQueue,
    max_slots_per_user: Option<usize>,
    /// Every project's session limit but those in `session_limits`.
    session_limit: usize,
    session_limits: HashMap<String, usize>,
    /// The last pooled login time handed out (ms since the epoch), so that this arbiter's
    /// logins are stamped in the order they were decided.
    pool_clock: AtomicU64,
}

impl<S> Clone for Arbiter<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S> std::fmt::Debug for Arbiter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arbiter")
            .field("has_kicker", &self.inner.kicker.is_some())
            .field("max_claim_attempts", &self.inner.max_claim_attempts)
            .field("kick_timeout", &self.inner.kick_timeout)
            .field("claim_timeout", &self.inner.claim_timeout)
            .field("limits", &self.inner.limits)
            .field("max_slots_per_user", &self.inner.max_slots_per_user)
            .field("session_limit", &self.inner.session_limit)
            .field("session_limits", &self.inner.session_limits)
            .finish_non_exhaustive()
    }
}

/// Configures an [`Arbiter`]. Defaults: 3 attempts, 3 s kick timeout, 10 s claim
/// deadline, 16 claims waiting per key, no kicker (fail-open: every kick counts as
/// confirmed), [`NoopObserver`], default limits.
pub struct ArbiterBuilder<S> {
    store: S,
    kicker: Option<Box<dyn Kicker>>,
    observer: Box<dyn Observer>,
    max_claim_attempts: u32,
    kick_timeout: Duration,
    claim_timeout: Duration,
    limits: ValidationLimits,
    max_queued_claims: usize,
    max_slots_per_user: Option<usize>,
    session_limit: usize,
    session_limits: HashMap<String, usize>,
}

impl<S: Store> ArbiterBuilder<S> {
    /// The kicker that delivers kicks to old sessions.
    #[must_use]
    pub fn kicker(mut self, kicker: impl Kicker) -> Self {
        self.kicker = Some(Box::new(kicker));
        self
    }

    /// The observer of claims, kicks and releases.
    #[must_use]
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.observer = Box::new(observer);
        self
    }

    /// CAS attempts per claim; values below 1 clamp to 1.
    #[must_use]
    pub fn max_claim_attempts(mut self, attempts: u32) -> Self {
        self.max_claim_attempts = attempts.max(1);
        self
    }

    /// How long a kick may take before the old session is presumed offline.
    #[must_use]
    pub fn kick_timeout(mut self, timeout: Duration) -> Self {
        self.kick_timeout = timeout;
        self
    }

    /// Overrides the validation byte limits.
    #[must_use]
    pub fn validation_limits(mut self, limits: ValidationLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Most claims that may wait in one key's line behind the claim holding its
    /// turn; one more is refused at once with `Throttled` (retryable: back off),
    /// with no store call. Default [`DEFAULT_MAX_QUEUED_CLAIMS`]: one user's
    /// devices never queue that many logins, so a longer line is a retry storm
    /// or an attack on one key, and each waiter holds a request and a connection.
    #[must_use]
    pub fn max_queued_claims(mut self, waiters: usize) -> Self {
        self.max_queued_claims = waiters;
        self
    }

    /// The deadline of one claim, counted from its arrival (its wait in line
    /// included). A claim past it stops before its next kick or write and fails
    /// with `Unavailable`; a write already sent is waited for, never abandoned,
    /// so a claim never writes after it answered. The answer therefore comes at
    /// most one store write after the deadline. Values below 1 ms clamp to 1 ms.
    /// Default [`DEFAULT_CLAIM_TIMEOUT`].
    #[must_use]
    pub fn claim_timeout(mut self, timeout: Duration) -> Self {
        self.claim_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Most online sessions one user may hold across its slots (`docs/design.md#device-slots`).
    /// A claim that would take a slot the user has no online session in, while the user
    /// already holds `limit`, is refused with `TooManySlots`, nothing kicked or written; a
    /// login in a slot that is online (a takeover, a replay) is never refused. Counting
    /// costs one [`Store::list_sessions`] round trip, made only by a claim that would take
    /// a vacant slot (on a store that writes first, C11, by every claim: it cannot know
    /// the slot is vacant before its write). Claims for new slots of one user through one
    /// arbiter count and write one at a time, so the limit is exact within a process;
    /// across `k` processes a user can reach `limit - 1 + k`. Values below 1 clamp to 1.
    /// Unset by default: a store written before [`Store::list_sessions`] cannot list, and
    /// would then refuse every new slot.
    #[must_use]
    pub fn max_slots_per_user(mut self, limit: usize) -> Self {
        self.max_slots_per_user = Some(limit.max(1));
        self
    }

    /// The session limit `N` of every project not named by
    /// [`session_limit_for`](Self::session_limit_for): the most pooled sessions one user may
    /// hold (`docs/design.md#pooled-sessions`), places `#0` to `#<N-1>`. A pooled claim may
    /// ask for fewer, never more. Places are slots: with
    /// [`max_slots_per_user`](Self::max_slots_per_user) they count toward that cap too.
    /// Lowering it leaves sessions on higher places online until they end; new pooled claims
    /// use the lower places only. Clamped to 1..=[`MAX_POOL_PLACES`]. Default
    /// [`DEFAULT_SESSION_LIMIT`].
    #[must_use]
    pub fn session_limit(mut self, limit: usize) -> Self {
        self.session_limit = limit.clamp(1, MAX_POOL_PLACES);
        self
    }

    /// The session limit of one project, over [`session_limit`](Self::session_limit)'s.
    /// Clamped like it.
    #[must_use]
    pub fn session_limit_for(mut self, project: impl Into<String>, limit: usize) -> Self {
        self.session_limits
            .insert(project.into(), limit.clamp(1, MAX_POOL_PLACES));
        self
    }

    /// Builds the arbiter.
    pub fn build(self) -> Arbiter<S> {
        Arbiter {
            inner: Arc::new(Inner {
                store: self.store,
                kicker: self.kicker,
                observer: self.observer,
                max_claim_attempts: self.max_claim_attempts,
                kick_timeout: self.kick_timeout,
                claim_timeout: self.claim_timeout,
                limits: self.limits,
                queue: ClaimQueue::new(self.max_queued_claims),
                max_slots_per_user: self.max_slots_per_user,
                session_limit: self.session_limit,
                session_limits: self.session_limits,
                pool_clock: AtomicU64::new(0),
            }),
        }
    }
}

impl<S: Store> Arbiter<S> {
    /// Starts configuring an arbiter over `store`.
    pub fn builder(store: S) -> ArbiterBuilder<S> {
        ArbiterBuilder {
            store,
            kicker: None,
            observer: Box::new(NoopObserver),
            max_claim_attempts: DEFAULT_MAX_CLAIM_ATTEMPTS,
            kick_timeout: DEFAULT_KICK_TIMEOUT,
            claim_timeout: DEFAULT_CLAIM_TIMEOUT,
            limits: ValidationLimits::default(),
            max_queued_claims: DEFAULT_MAX_QUEUED_CLAIMS,
            max_slots_per_user: None,
            session_limit: DEFAULT_SESSION_LIMIT,
            session_limits: HashMap::new(),
        }
    }

    /// An arbiter with every default (no kicker: fail-open).
    pub fn new(store: S) -> Self {
        Self::builder(store).build()
    }

    /// The store this arbiter writes to.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The most online sessions one user may hold, when limited
    /// ([`ArbiterBuilder::max_slots_per_user`]).
    pub fn max_slots_per_user(&self) -> Option<usize> {
        self.inner.max_slots_per_user
    }

    /// The session limit `N` of `project`: the most pooled sessions one of its users may hold
    /// ([`ArbiterBuilder::session_limit`], [`ArbiterBuilder::session_limit_for`]).
    pub fn session_limit(&self, project: &str) -> usize {
        self.inner
            .session_limits
            .get(project)
            .copied()
            .unwrap_or(self.inner.session_limit)
    }

    /// The session limit of every project not given its own ([`ArbiterBuilder::session_limit`]).
    pub fn default_session_limit(&self) -> usize {
        self.inner.session_limit
    }

    /// The projects whose session limit differs from the default
    /// ([`ArbiterBuilder::session_limit_for`]), each with its limit, in no particular order.
    pub fn project_session_limits(&self) -> impl Iterator<Item = (&str, usize)> {
        self.inner
            .session_limits
            .iter()
            .map(|(project, limit)| (project.as_str(), *limit))
    }

    /// The validation limits in force.
    pub fn validation_limits(&self) -> &ValidationLimits {
        &self.inner.limits
    }

    /// How many keys have a claim in progress or waiting through this arbiter.
    /// The claim queue keeps an entry only for those, so this is also the
    /// queue's size; it falls back to 0 when the claims end.
    pub fn claiming_keys(&self) -> usize {
        self.inner.queue.keys()
    }

    /// Claims `input.key` for `input.owner`: kick the old session first, then write.
    ///
    /// A valid claim first waits for its key's turn (see [Claim queue](Arbiter#claim-queue)).
    /// When the store writes first ([`Store::vacant_claims`], C11), the claim starts with
    /// [`Store::claim_vacant`]: a vacant record is claimed in that one round trip, and an
    /// occupied one's record stands in for the first attempt's read.
    /// Per attempt: (1) strong read; (2) if the record already holds this
    /// claim_id with an owner, return it as a replay (no kick, no write, I4); if
    /// the claim_id won an earlier gen and no longer holds the key, answer
    /// `Superseded` (no kick, no write, C9); (3) if the record holds a session,
    /// kick it and wait for confirmation or failure (bounded by the kick
    /// timeout); (4) fenced CAS from the snapshot.
    /// A lost race starts the next attempt, from the record the store returned
    /// with it when it did, else from a fresh read.
    ///
    /// # Errors
    ///
    /// `InvalidParams` before any store call, for an invalid input or a new endpoint
    /// the kicker refuses ([`Kicker::check_endpoint`]); `Throttled` when the store throttled;
    /// `Unavailable` for any other store fault, an exhausted attempt budget, an
    /// exhausted gen (fail-closed) or a passed claim deadline; `Throttled` also
    /// for a full line of waiting claims on the key; `Superseded` when this
    /// claim_id's login was replaced or logged out while it was in flight (C9).
    pub async fn claim(&self, input: &ClaimInput) -> Result<ClaimOutcome, Error> {
        let started = Instant::now();
        // A login time is the arbiter's to stamp, on pooled claims only.
        let unstamped;
        let input = if input.owner.since.is_some() {
            unstamped = ClaimInput {
                owner: Owner {
                    since: None,
                    ..input.owner.clone()
                },
                ..input.clone()
            };
            &unstamped
        } else {
            input
        };
        let (result, attempts) = match self.validate_claim(input) {
            Ok(()) => {
                let deadline = Deadline::now() + self.inner.claim_timeout;
                match until(deadline, self.inner.queue.enter(&input.key)).await {
                    // Held until the claim is decided, so the next claim on this key
                    // reads what this one wrote.
                    Ok(Ok(_turn)) => self.claim_attempts(input, deadline).await,
                    Ok(Err(full)) => {
                        self.inner.observer.on_claim_shed(ShedReason::QueueFull);
                        (Err(full), 0)
                    }
                    Err(_) => (Err(self.deadline_passed()), 0),
                }
            }
            Err(e) => (Err(e), 0),
        };
        self.inner
            .observer
            .on_claim(&result, attempts, started.elapsed());
        result
    }

    /// The current record as a self-eviction baseline.
    ///
    /// # Errors
    ///
    /// `InvalidParams` for a bad key; `Unavailable` for a store fault or a corrupt owner;
    /// `Throttled` when the store throttled.
    pub async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.inner.limits.check_key(key)?;
        self.inner.store.current(key).await.map_err(store_fault)
    }

    /// The self-eviction baselines of several keys, in the order given, from one
    /// [`Store::read_owners`] round trip: what a node's batched heartbeat asks.
    ///
    /// Element `i` is what [`current`](Arbiter::current)`(&keys[i])` would answer: a corrupt
    /// owner is an `Unavailable` for that key alone, so one bad record does not blind the
    /// heartbeats of the others.
    ///
    /// # Errors
    ///
    /// `InvalidParams` before any store call when there are more than [`MAX_BATCH_KEYS`]
    /// keys or any key is invalid (the message names its index); `Throttled` /
    /// `Unavailable` when the store's round trip failed.
    pub async fn current_batch(
        &self,
        keys: &[Key],
    ) -> Result<Vec<Result<CurrentView, Error>>, Error> {
        if keys.len() > MAX_BATCH_KEYS {
            return Err(Error::invalid(format!(
                "keys: at most {MAX_BATCH_KEYS} per batch, got {}",
                keys.len()
            )));
        }
        for (i, key) in keys.iter().enumerate() {
            self.inner.limits.check_key(key).map_err(|e| match e {
                Error::InvalidParams(reason) => Error::invalid(format!("keys[{i}]: {reason}")),
                other => other,
            })?;
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let states = self
            .inner
            .store
            .read_owners(keys)
            .await
            .map_err(store_fault)?;
        if states.len() != keys.len() {
            return Err(Error::unavailable(format!(
                "store answered {} records for {} keys",
                states.len(),
                keys.len()
            )));
        }
        Ok(states
            .into_iter()
            .map(|state| {
                state
                    .map_err(store_fault)
                    .and_then(OwnerState::into_current_view)
            })
            .collect())
    }

    /// The user's online sessions, one per slot, sorted by slot (the default slot `""`
    /// first), from one [`Store::list_sessions`] round trip: what `POST /v1/sessions`
    /// answers. Empty when the user has none.
    ///
    /// # Errors
    ///
    /// `InvalidParams` for a bad user key; `Unavailable` for a store fault or a corrupt
    /// stored owner; `Throttled` when the store throttled.
    pub async fn sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        self.inner.limits.check_user(user)?;
        let mut sessions = self
            .inner
            .store
            .list_sessions(user)
            .await
            .map_err(store_fault)?;
        sessions.sort_unstable_by(|a, b| a.slot.cmp(&b.slot));
        Ok(sessions)
    }

    /// One page of [`sessions`](Arbiter::sessions): the user's online sessions whose slot
    /// sorts after `after` (all of them for `None`; `Some("")` skips only the default slot),
    /// at most `limit`, with `next` set to the last one's slot when more remain (pass it as
    /// `after` for the next page). Paged here over the store's one listing round trip (C10),
    /// which holds all of a user's slots: the slot limit keeps that small. Pages are not a
    /// snapshot: a session that comes or goes between two calls may be missed or seen.
    ///
    /// # Errors
    ///
    /// `InvalidParams` for a bad user key, a `limit` outside 1 to [`MAX_SESSIONS_PAGE`], or an
    /// `after` that is not a valid slot; otherwise as [`sessions`](Arbiter::sessions).
    pub async fn sessions_page(
        &self,
        user: &UserKey,
        after: Option<&str>,
        limit: usize,
    ) -> Result<SessionsPage, Error> {
        if !(1..=MAX_SESSIONS_PAGE).contains(&limit) {
            return Err(Error::invalid(format!(
                "limit must be from 1 to {MAX_SESSIONS_PAGE}, got {limit}"
            )));
        }
        if let Some(after) = after {
            self.inner
                .limits
                .check_key(&user.key(after))
                .map_err(|e| match e {
                    Error::InvalidParams(reason) => {
                        Error::invalid(format!("after must be a slot: {reason}"))
                    }
                    other => other,
                })?;
        }
        let mut sessions = self.sessions(user).await?;
        if let Some(after) = after {
            sessions.retain(|s| s.slot.as_str() > after);
        }
        let next = (sessions.len() > limit).then(|| {
            sessions.truncate(limit);
            sessions[limit - 1].slot.clone()
        });
        Ok(SessionsPage { sessions, next })
    }

    /// Tombstones the session at `generation` (clean logout). `generation <= 0` is
    /// a no-op returning `false` without a store call; a stale gen returns `false`.
    ///
    /// # Errors
    ///
    /// `InvalidParams` for a bad key (checked even when `generation <= 0`);
    /// `Throttled` / `Unavailable` from the store.
    pub async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.inner.limits.check_key(key)?;
        let released = if generation <= 0 {
            false
        } else {
            self.inner
                .store
                .release(key, generation)
                .await
                .map_err(store_fault)?
        };
        self.inner.observer.on_release(key, released);
        Ok(released)
    }

    /// Ends the key's current session for an operator: an admin logout
    /// (`docs/design.md#admin-logout`).
    ///
    /// One strong read. When it finds a session (an owner, or a corrupt owner) at gen
    /// `g`, the record is tombstoned on the condition that its gen is still `g`, exactly
    /// as [`release`](Arbiter::release)`(key, g)` writes it (C5: the gen is kept, the next
    /// login gets `g + 1`); then the session's endpoint is kicked with
    /// [`KickReason::Admin`], the input's reason as the kick's `message`, and gen `g + 1`,
    /// which the logged-out session (gen `g`) yields to and no newer session does (a newer
    /// one has at least `g + 1`, I6). The kick is bounded by the kick timeout and never
    /// fails the logout: a kick that does not confirm leaves the session to its
    /// heartbeat, which reads the tombstone (`owner-empty`, I5b). A corrupt or
    /// endpoint-less owner is released and reported `no-endpoint`; without a kicker
    /// every kick counts as confirmed, as for a claim.
    ///
    /// Nothing is written and nobody kicked when the read finds no session, or when a
    /// newer login writes between the read and the tombstone (the fence fails, so a newer
    /// session is never logged out): `released` is `false`. A logout does not wait in
    /// the claim line: the fence alone orders it against claims, here and in other
    /// processes.
    ///
    /// # Errors
    ///
    /// `InvalidParams` before any store call for a bad key or reason
    /// ([`ValidationLimits::check_logout_reason`]); `Throttled` / `Unavailable` when the
    /// read or the tombstone failed. Nobody was kicked then, and whether a failed
    /// tombstone landed is unknown: repeating the logout is safe, and when the tombstone
    /// had landed the repeat finds no session (`released: false`, no kick) and the
    /// session's heartbeat evicts it (`owner-empty`).
    pub async fn logout(&self, input: &LogoutInput) -> Result<LogoutOutcome, Error> {
        let limits = &self.inner.limits;
        limits.check_key(&input.key)?;
        if let Some(reason) = &input.reason {
            limits.check_logout_reason(reason)?;
        }
        let store = &self.inner.store;
        let snap = store.read_owner(&input.key).await.map_err(store_fault)?;
        let generation = snap.generation;
        // Fenced on the gen read: a login that wrote since makes this `false`.
        let released = snap.holds_session()
            && store
                .release(&input.key, generation)
                .await
                .map_err(store_fault)?;
        let (kicked, kick_detail) = if released {
            match self
                .kick_logged_out(input, snap.owner.as_ref(), generation)
                .await
            {
                KickOutcome::Confirmed => (true, None),
                KickOutcome::Failed(detail) => (false, Some(detail)),
            }
        } else {
            (false, None)
        };
        let outcome = LogoutOutcome {
            released,
            generation,
            kicked,
            kick_detail,
        };
        self.inner.observer.on_logout(&input.key, &outcome);
        Ok(outcome)
    }

    /// Ends every online session of a user for an operator: the default slot, named slots
    /// and pool places (`docs/design.md#admin-logout`, "All of a user's sessions").
    ///
    /// One listing ([`sessions`](Arbiter::sessions), one store round trip), then each
    /// session it found is logged out exactly as [`logout`](Arbiter::logout) of its slot
    /// does: its own strong read, the fenced tombstone at the gen read, the kick announcing
    /// gen + 1 with [`KickReason::Admin`] and the reason as `message`, and one
    /// [`Observer::on_logout`]. So a login that takes a slot between the listing (or the
    /// slot's read) and its tombstone is `released: false` and not kicked. At most
    /// [`LOGOUT_ALL_CONCURRENCY`] slots are logged out at once, so the kicks of a user with
    /// many sessions overlap without one slow node holding up the rest for long.
    ///
    /// The answer holds one [`SlotLogout`] per listed session, in listing order (by slot,
    /// the default slot first); empty when the user has none. A slot's store failure is that
    /// slot's `Err`, and the other slots are logged out all the same.
    ///
    /// # Errors
    ///
    /// Before any store call, `InvalidParams` for a bad user key or reason; `Throttled` /
    /// `Unavailable` when the listing failed (nothing was logged out then).
    pub async fn logout_all(&self, input: &UserLogoutInput) -> Result<Vec<SlotLogout>, Error> {
        let limits = &self.inner.limits;
        limits.check_user(&input.user)?;
        if let Some(reason) = &input.reason {
            limits.check_logout_reason(reason)?;
        }
        let sessions = self.sessions(&input.user).await?;
        let logouts = sessions.into_iter().map(|session| async move {
            let logout = LogoutInput {
                key: input.user.key(session.slot.as_str()),
                reason: input.reason.clone(),
            };
            SlotLogout {
                result: self.logout(&logout).await,
                slot: session.slot,
            }
        });
        Ok(join_bounded(logouts.collect(), LOGOUT_ALL_CONCURRENCY).await)
    }

    fn validate_claim(&self, input: &ClaimInput) -> Result<(), Error> {
        let limits = &self.inner.limits;
        limits.check_key(&input.key)?;
        if place_index(&input.key.slot).is_some() {
            return Err(Error::invalid(format!(
                "slot '{}' is a pool place: claim with \"pool\" instead",
                input.key.slot
            )));
        }
        limits.check_claim_id(&input.claim_id)?;
        limits.check_owner(&input.owner)?;
        // An endpoint the kicker refuses could never be kicked: refuse the session
        // before it is written. The reason names the rule, never the endpoint.
        // A node owner has no endpoint: its kicks go over the stream it opened.
        if let Some(kicker) = self
            .inner
            .kicker
            .as_ref()
            .filter(|_| input.owner.node.is_empty())
        {
            kicker
                .check_endpoint(&input.owner.endpoint)
                .map_err(|reason| Error::invalid(format!("owner.endpoint is refused: {reason}")))?;
        }
        Ok(())
    }

    async fn claim_attempts(
        &self,
        input: &ClaimInput,
        deadline: Deadline,
    ) -> (Result<ClaimOutcome, Error>, u32) {
        let inner = &*self.inner;
        // A snapshot handed back by a lost race saves the next attempt's read.
        let mut carried: Option<OwnerState> = None;
        let user_line = input.key.user().key(USER_LINE_SLOT);
        let mut room = Room::Unchecked;
        let write_first = inner.store.vacant_claims() != VacantClaims::Unsupported;
        // A store that writes first would take a vacant slot before the claim knew it was
        // one: with a slot limit, count first.
        if write_first && let Some(limit) = inner.max_slots_per_user {
            room = match self.count_slots(input, &user_line, limit, deadline).await {
                Ok(room) => room,
                Err(e) => return (Err(e), 1),
            };
        }
        // Write first where the store can (C11): a vacant key is claimed in one round
        // trip, and an occupied one hands back its record instead of a read. Not when the
        // count found the slot online or the user full: the read path decides those (a
        // replay, a superseded retry, a takeover, or the refusal).
        if write_first && matches!(room, Room::Unchecked | Room::Held(_)) {
            // A write: once sent it is waited for, like the CAS.
            if let Err(e) = self.before_deadline(deadline) {
                return (Err(e), 1);
            }
            match inner
                .store
                .claim_vacant(&input.key, &input.owner, &input.claim_id)
                .await
            {
                Ok(VacantClaim::Written { generation }) => {
                    return (Ok(vacant_outcome(generation)), 1);
                }
                Ok(VacantClaim::Occupied(snap)) => carried = Some(snap),
                Ok(VacantClaim::Unread) => {}
                Err(e) => return (Err(store_fault(e)), 1),
            }
        }
        for attempt in 1..=inner.max_claim_attempts {
            let snap = match carried.take() {
                Some(snap) => snap,
                // A read writes nothing, so one cut short by the deadline is safe.
                None => match until(deadline, inner.store.read_owner(&input.key)).await {
                    Ok(Ok(snap)) => snap,
                    Ok(Err(e)) => return (Err(store_fault(e)), attempt),
                    Err(_) => return (Err(self.deadline_passed()), attempt),
                },
            };
            match self
                .attempt(input, snap, deadline, (&user_line, &mut room))
                .await
            {
                Ok(Attempt::Won(outcome)) => return (Ok(outcome), attempt),
                Ok(Attempt::LostRace(current)) => carried = current,
                Err(e) => return (Err(e), attempt),
            }
        }
        let exhausted = Error::unavailable(format!(
            "claim lost the race {} times; attempt budget exhausted",
            inner.max_claim_attempts
        ));
        (Err(exhausted), inner.max_claim_attempts)
    }

    /// Steps 2–4 of one attempt. Takes the snapshot by value so the winning
    /// outcome moves the previous owner out instead of cloning it.
    async fn attempt<'a>(
        &'a self,
        input: &ClaimInput,
        snap: OwnerState,
        deadline: Deadline,
        (user_line, room): (&'a Key, &mut Room<'a>),
    ) -> Result<Attempt, Error> {
        let current = snap.claim_id.as_deref() == Some(input.claim_id.as_str());
        if current && snap.owner.is_some() {
            return Ok(Attempt::Won(ClaimOutcome {
                generation: snap.generation,
                prev_generation: 0,
                has_prev: false,
                prev_owner: None,
                kicked: false,
                kick_detail: None,
                replayed: true,
            }));
        }
        // A claim_id that won an earlier gen and no longer holds the key was
        // replaced (or logged out) while this retry was in flight: kicking now
        // would log out the newer session (C9).
        if !current && let Some(generation) = snap.recent_claims.won(&input.claim_id) {
            return Err(Error::Superseded {
                generation,
                current: snap.generation,
            });
        }
        // Refuse an exhausted gen before kicking: a session we cannot replace
        // must not be kicked.
        Fence::for_snapshot(&snap)?;
        // A claim that takes a vacant slot must find the user with room for one more.
        if !snap.holds_session()
            && let Some(limit) = self.inner.max_slots_per_user
        {
            if matches!(room, Room::Unchecked | Room::Online) {
                *room = self.count_slots(input, user_line, limit, deadline).await?;
            }
            if let Room::Full(limit) = room {
                return Err(Error::TooManySlots { limit: *limit });
            }
        }
        let (kicked, kick_detail) = if snap.holds_session() {
            self.before_deadline(deadline)?;
            match self.kick_old_session(input, &snap, deadline).await {
                KickOutcome::Confirmed => (true, None),
                KickOutcome::Failed(detail) => (false, Some(detail)),
            }
        } else {
            (false, None)
        };
        // The last point a claim may stop: once sent, the write is waited for.
        self.before_deadline(deadline)?;
        let written = self
            .inner
            .store
            .claim_cas(&input.key, &input.owner, &input.claim_id, &snap)
            .await
            .map_err(store_fault)?;
        Ok(match written {
            CasOutcome::Written { generation } => Attempt::Won(ClaimOutcome {
                generation,
                prev_generation: if snap.exists { snap.generation } else { 0 },
                has_prev: snap.holds_session(),
                prev_owner: snap.owner,
                kicked,
                kick_detail,
                replayed: false,
            }),
            CasOutcome::LostRace { current } => Attempt::LostRace(current),
        })
    }

    /// Counts the user's online sessions for a claim that may take a new slot, in the
    /// user's own line: claims for new slots of one user through this arbiter count and
    /// write one at a time, so two of them cannot both find room for the last slot. The
    /// turn is held in the answer until the claim ends.
    async fn count_slots<'a>(
        &'a self,
        input: &ClaimInput,
        user_line: &'a Key,
        limit: usize,
        deadline: Deadline,
    ) -> Result<Room<'a>, Error> {
        let inner = &*self.inner;
        let turn = match until(deadline, inner.queue.enter(user_line)).await {
            Ok(Ok(turn)) => turn,
            Ok(Err(full)) => {
                inner.observer.on_claim_shed(ShedReason::QueueFull);
                return Err(full);
            }
            Err(_) => return Err(self.deadline_passed()),
        };
        // A listing writes nothing, so one cut short by the deadline is safe.
        let sessions = match until(deadline, inner.store.list_sessions(&input.key.user())).await {
            Ok(listed) => listed.map_err(store_fault)?,
            Err(_) => return Err(self.deadline_passed()),
        };
        Ok(if sessions.iter().any(|s| s.slot == input.key.slot) {
            Room::Online
        } else if sessions.len() >= limit {
            Room::Full(limit)
        } else {
            Room::Held(turn)
        })
    }

    async fn kick_old_session(
        &self,
        input: &ClaimInput,
        snap: &OwnerState,
        deadline: Deadline,
    ) -> KickOutcome {
        self.kick_replaced(&input.key, &input.owner, snap, deadline, None)
            .await
    }

    /// The kick of the session `snap` holds on `key`, which `new_owner`'s claim replaces:
    /// `login-elsewhere`, announcing `snap`'s gen + 1, with `message` when given.
    async fn kick_replaced(
        &self,
        key: &Key,
        new_owner: &Owner,
        snap: &OwnerState,
        deadline: Deadline,
        message: Option<String>,
    ) -> KickOutcome {
        let inner = &*self.inner;
        let outcome = match &snap.owner {
            None => KickOutcome::Failed(KickDetail::NoEndpoint),
            Some(old) if old.endpoint.is_empty() && old.node.is_empty() => {
                KickOutcome::Failed(KickDetail::NoEndpoint)
            }
            Some(old) if old.same_kick_target(new_owner) => {
                KickOutcome::Failed(KickDetail::SelfReplaceSkipped)
            }
            Some(old) => {
                // The kick gets its timeout, or what is left of the claim's.
                let budget = inner
                    .kick_timeout
                    .min(deadline.saturating_duration_since(Deadline::now()));
                let payload = || KickPayload {
                    message,
                    ..KickPayload::new(key, snap.generation + 1, KickReason::LoginElsewhere)
                };
                self.deliver_kick(old, payload, budget).await
            }
        };
        self.report_kick(outcome);
        outcome
    }

    /// The admin logout's kick of the session it tombstoned at `generation`: announces
    /// `generation + 1`, the gen the next login gets, so the node destroys exactly the
    /// logged-out session and never a newer one (I6).
    async fn kick_logged_out(
        &self,
        input: &LogoutInput,
        owner: Option<&Owner>,
        generation: i64,
    ) -> KickOutcome {
        let outcome = match owner {
            Some(owner) if !owner.endpoint.is_empty() || !owner.node.is_empty() => {
                let payload = || KickPayload {
                    message: input.reason.clone(),
                    // The store's gens stay below i64::MAX (C4); saturating all the
                    // same, so a damaged record cannot overflow here.
                    ..KickPayload::new(&input.key, generation.saturating_add(1), KickReason::Admin)
                };
                self.deliver_kick(owner, payload, self.inner.kick_timeout)
                    .await
            }
            // A corrupt owner, or one without an endpoint or node: nobody to tell.
            _ => KickOutcome::Failed(KickDetail::NoEndpoint),
        };
        self.report_kick(outcome);
        outcome
    }

    /// Sends one kick to `owner` within `budget` through the kicker: pushed to its node
    /// ([`Kicker::kick_node`]) when it names one, else POSTed to its endpoint. Without a
    /// kicker every kick counts as confirmed. The payload is built only when a kicker
    /// sends it.
    async fn deliver_kick(
        &self,
        owner: &Owner,
        payload: impl FnOnce() -> KickPayload,
        budget: Duration,
    ) -> KickOutcome {
        let Some(kicker) = &self.inner.kicker else {
            return KickOutcome::Confirmed;
        };
        let payload = payload();
        let kick = async {
            if owner.node.is_empty() {
                kicker.kick(&owner.endpoint, &payload, budget).await
            } else {
                kicker.kick_node(&owner.node, &payload, budget).await
            }
        };
        tokio::time::timeout(budget, kick)
            .await
            .unwrap_or(KickOutcome::Failed(KickDetail::Timeout))
    }

    fn report_kick(&self, outcome: KickOutcome) {
        match outcome {
            KickOutcome::Confirmed => self.inner.observer.on_kick(None, true),
            KickOutcome::Failed(detail) => self.inner.observer.on_kick(Some(detail), false),
        }
    }

    /// `Ok` while the claim's deadline has not passed; else the error it answers.
    fn before_deadline(&self, deadline: Deadline) -> Result<(), Error> {
        if Deadline::now() >= deadline {
            return Err(self.deadline_passed());
        }
        Ok(())
    }

    /// The claim's deadline passed: reported to the observer, answered `Unavailable`.
    fn deadline_passed(&self) -> Error {
        self.inner.observer.on_claim_shed(ShedReason::Deadline);
        Error::unavailable("claim deadline passed before it could finish; retry")
    }
}

/// Runs `future` until `deadline`: `Err(Elapsed)` when it passes first (the
/// future is dropped). A future that is ready at once (a free key's turn, a
/// memory store's read) never touches the timer, so the Arbiter needs a
/// runtime with time enabled only when it has to wait.
async fn until<F: Future>(
    deadline: Deadline,
    future: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    let mut future = std::pin::pin!(future);
    let first = std::future::poll_fn(|cx| match future.as_mut().poll(cx) {
        std::task::Poll::Ready(output) => std::task::Poll::Ready(Some(output)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await;
    match first {
        Some(output) => Ok(output),
        None => tokio::time::timeout_at(deadline, future).await,
    }
}

/// Runs `tasks` at most `bound` at a time and answers their outputs in the order given.
/// Only the first `bound` unfinished tasks are polled, so a task starts when an earlier one
/// ends (an async block does nothing before its first poll) and a started one is never left
/// unpolled. The core has no `futures` dependency; a user has at most 1000 slots, so
/// polling the window again on each wake costs little.
async fn join_bounded<F: Future>(tasks: Vec<F>, bound: usize) -> Vec<F::Output> {
    let bound = bound.max(1);
    let mut tasks: Vec<_> = tasks.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = tasks.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = 0;
        for (task, output) in tasks.iter_mut().zip(outputs.iter_mut()) {
            if output.is_some() {
                continue;
            }
            if pending == bound {
                break;
            }
            match task.as_mut().poll(cx) {
                std::task::Poll::Ready(done) => *output = Some(done),
                std::task::Poll::Pending => pending += 1,
            }
        }
        // The loop stops early only with `bound` tasks pending, so none pending means
        // every task has its output.
        if pending == 0 {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|output| output.expect("every task finished"))
        .collect()
}

/// The outcome of a claim written over a vacant record (C11): an absent record (gen 1)
/// or a tombstone at `generation - 1`, so no session was replaced and nobody kicked.
fn vacant_outcome(generation: i64) -> ClaimOutcome {
    ClaimOutcome {
        generation,
        prev_generation: generation - 1,
        has_prev: false,
        prev_owner: None,
        kicked: false,
        kick_detail: None,
        replayed: false,
    }
}

/// What a claim learnt of its user's slots ([`ArbiterBuilder::max_slots_per_user`]).
enum Room<'a> {
    /// Not counted (no limit, or not yet needed).
    Unchecked,
    /// The slot was online when counted: not a new slot.
    Online,
    /// Room for one more slot, the user's line held until the claim ends (read by
    /// nobody: holding it is the point).
    Held(#[allow(dead_code)] Turn<'a>),
    /// The user held this many online sessions, the limit, and not in this slot.
    Full(usize),
}

/// How one attempt ended, when it did not fail.
enum Attempt {
    /// The claim is decided (written or replayed).
    Won(ClaimOutcome),
    /// Another write came first; the next attempt starts from this record when
    /// the store returned it, else from a fresh read.
    LostRace(Option<OwnerState>),
}

/// Classifies a store error for callers: `Throttled` and `Unavailable` pass
/// through; `InvalidParams` from a store, after the Arbiter validated the input,
/// is a store fault (fail-closed).
fn store_fault(e: Error) -> Error {
    match e {
        Error::Throttled | Error::Unavailable { .. } => e,
        Error::InvalidParams(_)
        | Error::Superseded { .. }
        | Error::TooManySlots { .. }
        | Error::LimitReached { .. }
        | Error::Unauthenticated(_)
        | Error::Forbidden(_) => Error::unavailable_with("store returned an unexpected error", e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn _send_sync<S: Store>() {
        fn check<T: Send + Sync + Clone>() {}
        check::<Arbiter<S>>();
    }

    /// `join_bounded` keeps its tasks' order and never runs more than `bound` at once.
    #[tokio::test]
    async fn joins_in_order_at_most_bound_at_a_time() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let tasks = (0..20u32).map(|i| {
            let (running, most) = (&running, &most);
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Later tasks end sooner, so completion order differs from the input's.
                for _ in 0..(20 - i) {
                    tokio::task::yield_now().await;
                }
                running.fetch_sub(1, Ordering::SeqCst);
                i
            }
        });
        let outputs = join_bounded(tasks.collect(), 3).await;
        assert_eq!(outputs, (0..20).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 3);
        assert!(
            join_bounded(Vec::<std::future::Ready<()>>::new(), 3)
                .await
                .is_empty()
        );
    }
}
