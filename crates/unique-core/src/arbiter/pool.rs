//! The pooled claim (`docs/design.md#pooled-sessions`): one decision per attempt, in the
//! user's own claim line, from one strong read of the user's places.

use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::{Arbiter, Deadline, USER_LINE_SLOT, store_fault, until};
use crate::error::Error;
use crate::fence::{CasOutcome, Fence};
use crate::kicker::KickOutcome;
use crate::observer::ShedReason;
use crate::pool::{PoolPolicy, PoolRequest, PooledOutcome, PooledSession, place_slot, pool_limit};
use crate::store::{MAX_BATCH_KEYS, Store};
use crate::types::{ClaimInput, ClaimOutcome, Key, Owner, OwnerState};

/// What one attempt of a pooled claim came to, when it did not fail.
enum PoolAttempt {
    /// Decided: written, replayed.
    Won(PooledOutcome),
    /// The fenced write lost to another: the next attempt reads the places again.
    LostRace,
}

impl<S: Store> Arbiter<S> {
    /// Claims a place in the user's pool for `input.owner`: the lowest free place below the
    /// pool's limit `k`, or at the limit, by `pool.policy`, the oldest login's place
    /// (`evict-oldest`: kick first, then write, exactly a takeover of that place) or nothing
    /// (`deny-new`: [`Error::LimitReached`]). `input.key` names the user: its slot must be
    /// the default `""`. The answer's `slot` is the place taken, the key of the session for
    /// every later call. See `docs/design.md#pooled-sessions`.
    ///
    /// The claims of one user through one arbiter decide one at a time, in the user's claim
    /// line. Per attempt (at most [`ArbiterBuilder::max_claim_attempts`](crate::ArbiterBuilder::max_claim_attempts)):
    /// one strong read of the places `#0` to `#<N-1>` ([`Store::read_owners`], `N` the
    /// project's session limit); a place that holds this claim_id is a replay of it (same
    /// place, nothing written), one whose recent winners hold it without holding it now is
    /// `Superseded` (C9); then the fenced claim of the chosen place from the record read. A
    /// lost race starts the next attempt from a fresh read, so two racers never take one
    /// place and a racer that lost sees the winner's session online. Never more than `k`
    /// places below `k` are online: each has one owner at a time (I3). The login time stored
    /// with the owner (`since`) is this arbiter's wall clock in milliseconds, made strictly
    /// increasing within the arbiter.
    ///
    /// # Errors
    ///
    /// As [`claim`](Arbiter::claim), and: `InvalidParams` for a key with a slot or a
    /// `pool.limit` outside 1 to `N` (the message names `N`); `LimitReached` when
    /// `deny-new` finds all `k` places online; `TooManySlots` when taking a free place
    /// would pass [`ArbiterBuilder::max_slots_per_user`](crate::ArbiterBuilder::max_slots_per_user).
    pub async fn claim_pooled(
        &self,
        input: &ClaimInput,
        pool: &PoolRequest,
    ) -> Result<PooledOutcome, Error> {
        let started = Instant::now();
        let (result, attempts) = match self.validate_pooled(input, pool) {
            Ok((k, n)) => {
                let deadline = Deadline::now() + self.inner.claim_timeout;
                let user_line = input.key.user().key(USER_LINE_SLOT);
                match until(deadline, self.inner.queue.enter(&user_line)).await {
                    // Held until the claim is decided: the next pooled claim of this user
                    // reads what this one wrote.
                    Ok(Ok(_turn)) => self.pool_attempts(input, pool.policy, k, n, deadline).await,
                    Ok(Err(full)) => {
                        self.inner.observer.on_claim_shed(ShedReason::QueueFull);
                        (Err(full), 0)
                    }
                    Err(_) => (Err(self.deadline_passed()), 0),
                }
            }
            Err(e) => (Err(e), 0),
        };
        // The observer sees the claim on its place as it sees any claim.
        let (claim, place) = match result {
            Ok(PooledOutcome {
                slot,
                evicted,
                claim,
            }) => (Ok(claim), Some((slot, evicted))),
            Err(e) => (Err(e), None),
        };
        self.inner
            .observer
            .on_claim(&claim, attempts, started.elapsed());
        let claim = claim?;
        let (slot, evicted) = place.unwrap_or_default();
        Ok(PooledOutcome {
            slot,
            evicted,
            claim,
        })
    }

    /// The pool's limit `k` and the project's `N`, after the claim's own checks.
    fn validate_pooled(
        &self,
        input: &ClaimInput,
        pool: &PoolRequest,
    ) -> Result<(usize, usize), Error> {
        if !input.key.slot.is_empty() {
            return Err(Error::invalid(
                "slot and pool are exclusive: a pooled claim names the user, and the pool picks the slot",
            ));
        }
        self.validate_claim(input)?;
        let n = self.session_limit(&input.key.project);
        Ok((pool_limit(pool, n)?, n))
    }

    async fn pool_attempts(
        &self,
        input: &ClaimInput,
        policy: PoolPolicy,
        k: usize,
        n: usize,
        deadline: Deadline,
    ) -> (Result<PooledOutcome, Error>, u32) {
        let user = input.key.user();
        let places: Vec<Key> = (0..n).map(|i| user.key(place_slot(i))).collect();
        let owner = Owner {
            since: Some(self.login_time()),
            ..input.owner.clone()
        };
        let max = self.inner.max_claim_attempts;
        for attempt in 1..=max {
            // A read writes nothing, so one cut short by the deadline is safe.
            let states = match until(deadline, self.read_places(&places)).await {
                Ok(Ok(states)) => states,
                Ok(Err(e)) => return (Err(e), attempt),
                Err(_) => return (Err(self.deadline_passed()), attempt),
            };
            let decided = self
                .pool_attempt(input, &owner, (policy, k), &places, states, deadline)
                .await;
            match decided {
                Ok(PoolAttempt::Won(outcome)) => return (Ok(outcome), attempt),
                Ok(PoolAttempt::LostRace) => {}
                Err(e) => return (Err(e), attempt),
            }
        }
        let exhausted = Error::unavailable(format!(
            "pooled claim lost the race {max} times; attempt budget exhausted"
        ));
        (Err(exhausted), max)
    }

    /// The records of `places`, in order, in as few [`Store::read_owners`] round trips as the
    /// batch limit allows (one for a limit up to [`MAX_BATCH_KEYS`]).
    async fn read_places(&self, places: &[Key]) -> Result<Vec<OwnerState>, Error> {
        let mut states = Vec::with_capacity(places.len());
        for chunk in places.chunks(MAX_BATCH_KEYS) {
            let read = self
                .inner
                .store
                .read_owners(chunk)
                .await
                .map_err(store_fault)?;
            if read.len() != chunk.len() {
                return Err(Error::unavailable(format!(
                    "store answered {} records for {} keys",
                    read.len(),
                    chunk.len()
                )));
            }
            for state in read {
                states.push(state.map_err(store_fault)?);
            }
        }
        Ok(states)
    }

    /// One decision from the places as read: replay, superseded, a free place, or the
    /// policy at the limit.
    async fn pool_attempt(
        &self,
        input: &ClaimInput,
        owner: &Owner,
        (policy, k): (PoolPolicy, usize),
        places: &[Key],
        states: Vec<OwnerState>,
        deadline: Deadline,
    ) -> Result<PoolAttempt, Error> {
        let claim_id = input.claim_id.as_str();
        // A retry of a login that holds a place is that login (I4), on whichever place.
        let held = states
            .iter()
            .position(|s| s.owner.is_some() && s.claim_id.as_deref() == Some(claim_id));
        if let Some(i) = held {
            return Ok(PoolAttempt::Won(PooledOutcome {
                slot: places[i].slot.clone(),
                evicted: false,
                claim: replayed(states[i].generation),
            }));
        }
        // A login that won a place and lost it since was evicted or logged out (C9).
        for state in &states {
            let current = state.claim_id.as_deref() == Some(claim_id);
            if !current && let Some(generation) = state.recent_claims.won(claim_id) {
                return Err(Error::Superseded {
                    generation,
                    current: state.generation,
                });
            }
        }
        let free =
            (0..k).find(|&i| !states[i].holds_session() && Fence::for_snapshot(&states[i]).is_ok());
        let mut states = states;
        if let Some(i) = free {
            self.room_for_one_more(input).await?;
            let snap = std::mem::take(&mut states[i]);
            return self
                .claim_place(input, owner, &places[i], snap, None, deadline)
                .await;
        }
        let online = (0..k).filter(|&i| states[i].holds_session());
        match policy {
            PoolPolicy::DenyNew => Err(Error::LimitReached {
                limit: k,
                sessions: online
                    .map(|i| PooledSession {
                        slot: places[i].slot.clone(),
                        generation: states[i].generation,
                        since: states[i].owner.as_ref().and_then(|o| o.since),
                    })
                    .collect(),
            }),
            PoolPolicy::EvictOldest => {
                // Records without a login time count as the oldest; ties go to the lower place.
                let since = |i: usize| states[i].owner.as_ref().and_then(|o| o.since);
                let oldest = online
                    .min_by_key(|&i| (since(i).unwrap_or(0), i))
                    .ok_or_else(|| Error::unavailable("no place of the pool can be claimed"))?;
                let snap = std::mem::take(&mut states[oldest]);
                let message = format!("session limit {k} reached");
                self.claim_place(input, owner, &places[oldest], snap, Some(message), deadline)
                    .await
            }
        }
    }

    /// Refuses a new session past [`max_slots_per_user`](crate::ArbiterBuilder::max_slots_per_user),
    /// counted from one listing (places are slots and count toward it).
    async fn room_for_one_more(&self, input: &ClaimInput) -> Result<(), Error> {
        let Some(limit) = self.inner.max_slots_per_user else {
            return Ok(());
        };
        let sessions = self
            .inner
            .store
            .list_sessions(&input.key.user())
            .await
            .map_err(store_fault)?;
        if sessions.len() >= limit {
            return Err(Error::TooManySlots { limit });
        }
        Ok(())
    }

    /// The claim of one place from its record: a vacant one is written at once; an online
    /// one (an eviction, `message` the kick's) is kicked first, then written, as a takeover.
    async fn claim_place(
        &self,
        input: &ClaimInput,
        owner: &Owner,
        place: &Key,
        snap: OwnerState,
        message: Option<String>,
        deadline: Deadline,
    ) -> Result<PoolAttempt, Error> {
        // Refuse an exhausted gen before kicking: a session we cannot replace must not be
        // kicked.
        Fence::for_snapshot(&snap)?;
        let evicted = snap.holds_session();
        let (kicked, kick_detail) = if evicted {
            self.before_deadline(deadline)?;
            match self
                .kick_replaced(place, owner, &snap, deadline, message)
                .await
            {
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
            .claim_cas(place, owner, &input.claim_id, &snap)
            .await
            .map_err(store_fault)?;
        Ok(match written {
            CasOutcome::Written { generation } => PoolAttempt::Won(PooledOutcome {
                slot: place.slot.clone(),
                evicted,
                claim: ClaimOutcome {
                    generation,
                    prev_generation: if snap.exists { snap.generation } else { 0 },
                    has_prev: evicted,
                    prev_owner: snap.owner,
                    kicked,
                    kick_detail,
                    replayed: false,
                },
            }),
            CasOutcome::LostRace { .. } => PoolAttempt::LostRace,
        })
    }

    /// Now, in milliseconds since the Unix epoch, and later than every login time this
    /// arbiter stamped before: logins decided in one millisecond keep their order.
    fn login_time(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let clock = &self.inner.pool_clock;
        let mut last = clock.load(Ordering::Relaxed);
        loop {
            let next = now.max(last.saturating_add(1));
            match clock.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }
}

/// The answer to a retry of a login that holds its place (I4).
fn replayed(generation: i64) -> ClaimOutcome {
    ClaimOutcome {
        generation,
        prev_generation: 0,
        has_prev: false,
        prev_owner: None,
        kicked: false,
        kick_detail: None,
        replayed: true,
    }
}
