//! The storage capability the Arbiter needs: one record per key, fenced writes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::Error;
use crate::fence::{CasOutcome, VacantClaim, VacantClaims};
use crate::types::{CurrentView, Key, Owner, OwnerState, UserKey, UserSession};

/// A linearizable per-key record store.
///
/// # Record
///
/// One record per [`Key`] (slot included) with four attributes: `gen` (number),
/// `owner` (the JSON of [`Owner`]; the empty string for a tombstone), `cid` (the
/// claim_id of the last successful claim; absent on a tombstone) and `won` (the
/// last [`RECENT_CLAIMS`](crate::RECENT_CLAIMS) winning claims as JSON
/// `[["claim_id",gen],…]`, oldest first, C9; absent on records written before
/// it). Records live forever: no TTL, `gen` is never reset or recycled, its
/// domain is `[1, i64::MAX)`.
///
/// Read stored attributes with [`OwnerState::from_record`]: it is the one
/// place a raw record gets its meaning. A record stored at gen 0 was never
/// claimed and reads as absent; an absent or empty `owner` is a tombstone; a
/// non-empty owner that is not an [`Owner`] JSON object (or not a string,
/// [`StoredOwner::NotText`](crate::StoredOwner::NotText)) is corrupt; an
/// absent `cid` is `None` and an empty one `Some("")`; an absent or unreadable
/// `won` is no recent claims, never an error.
///
/// # Writing a backend
///
/// Decide nothing the core already decides. Reads go through
/// [`OwnerState::from_record`] and, for `current`,
/// [`OwnerState::into_current_view`]; a claim takes its condition and the gen
/// it writes from [`Fence::for_snapshot`](crate::Fence::for_snapshot) and
/// [`Fence::next_generation`](crate::Fence::next_generation) (or checks it in
/// process with [`Fence::holds`](crate::Fence::holds)), stores the owner
/// as [`encode_owner`] returns it ([`decode_owner`] is the inverse
/// `from_record` uses) and `won` as [`OwnerState::won_after`] returns it, in
/// the same write. A listing reads the user's key and
/// [`UserKey::slot_range`] and makes each entry with [`listed_session`].
/// Required are `read_owner`, `claim_cas`, `current` and `release`; the
/// others have defaults that stay correct (`read_owners` loops `read_owner`,
/// `check_ready` reads [`ready_key`], `claim_vacant` sends nothing) except
/// `list_sessions`, whose default fails. Then run the contract suite, `unique-store-contract`,
/// on the backend: its test target hands the suite the store and a raw-record
/// hook kept behind a `test-util` feature. The repository's
/// `docs/backend-guide.md` walks through all of it, with a complete
/// out-of-tree example (`examples/out-of-tree-store`).
///
/// # Contract
///
/// Every clause has a case in `unique-store-contract`.
///
/// - **C1** Operations on one key MUST take effect in one total order consistent
///   with real time; every condition sees the latest committed version. A store
///   MUST NOT need cross-key transactions or a global lock.
/// - **C2** [`read_owner`](Store::read_owner) and [`current`](Store::current) MUST
///   read the latest committed write, never a stale replica or cache.
/// - **C3** [`claim_cas`](Store::claim_cas) MUST write under the condition of
///   [`Fence::for_snapshot(snap)`](crate::Fence::for_snapshot), which picks it
///   from `snap.claim_id`, never from `snap.owner`:
///   first login → the record must still not exist (or be stored at gen 0);
///   double pin → `gen == snap.gen && cid == snap.claim_id`;
///   tombstone → `gen == snap.gen && cid absent`.
/// - **C4** The condition check and the write of `gen =`
///   [`Fence::next_generation`](crate::Fence::next_generation) (1 on first
///   login, else `snap.gen + 1`), `owner`, `cid` and `won` (C9) MUST happen in
///   one atomic write; the reported gen is the written value, not a re-read. At most one
///   of concurrent claims on a key succeeds. When the fence refuses the
///   snapshot (the next gen would reach `i64::MAX`) the store MUST return that
///   [`Error::Unavailable`] and write nothing.
/// - **C5** [`release`](Store::release) sets `owner` to the empty string and removes
///   `cid`, keeping `gen`, only when the stored `gen == gen`; it returns whether the
///   condition held (a repeated release at the same gen is `true` again). Gen
///   mismatch, no record or `gen <= 0` → `Ok(false)`, nothing written.
/// - **C6** `read_owner` MUST distinguish no `cid` (`None`) from an empty `cid` (`Some("")`).
/// - **C7** `read_owner` reports an unparseable non-empty owner as `owner = None,
///   owner_corrupt = true` (not an error); `current` reports the same record as
///   [`Error::Unavailable`]. A tombstone reads `exists = true, owner = None`.
/// - **C8** A failed condition MUST be [`CasOutcome::LostRace`] with nothing
///   written (optionally carrying the record that failed it); throttling MUST
///   be [`Error::Throttled`]; every other failure [`Error::Unavailable`]. A
///   store MUST NOT report another failure as a lost race, nor a lost race as
///   an error. An owner that cannot be serialised or has an empty endpoint MUST
///   be refused with [`Error::InvalidParams`] before any write.
/// - **C9** A claim writes the `won` attribute [`OwnerState::won_after`] returns in the same
///   atomic write (C4); a release keeps it.
/// - **C10** [`list_sessions`](Store::list_sessions) lists every record of a user (all its
///   slots) whose owner is present, in one strongly consistent round trip; each entry is
///   what [`listed_session`] makes of the record.
/// - **C11** A store whose [`vacant_claims`](Store::vacant_claims) is not `Unsupported`
///   implements [`claim_vacant`](Store::claim_vacant): one conditional write that claims
///   a vacant record ([`VacantClaim::is_vacant`]) exactly as `claim_cas` from that record
///   would (C4, C9), atomically with the check, and otherwise writes nothing and answers
///   the record it failed on (or [`VacantClaim::Unread`] when it has none).
/// - **C12** A store that wraps another answers every method with the same method of the
///   store it wraps, called once, passing its answer through (it may time, count, delay or
///   fail a call). Write one as a [`StoreLayer`], which forwards every method by
///   construction; `unique-store-contract`'s `wrapper_contract_tests!` checks a wrapper.
/// - **C13** A store whose [`count_online`](Store::count_online) answers `Some` counts
///   exactly the records holding a session: after claims and releases complete, the count
///   moved by the sessions they opened and closed.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Strongly consistent snapshot of the key's record (C2, C6, C7).
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error>;

    /// Fenced claim from `snap` (C3, C4, C8): the gen written, or a lost race.
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error>;

    /// Which vacant records [`claim_vacant`](Store::claim_vacant) writes (C11). The default,
    /// [`VacantClaims::Unsupported`], keeps the Arbiter on read-then-CAS.
    fn vacant_claims(&self) -> VacantClaims {
        VacantClaims::Unsupported
    }

    /// Write-first claim (C11): one conditional write that claims the key for `owner` and
    /// `claim_id` when the record is vacant, so an uncontended login costs one round trip.
    ///
    /// The condition is exactly [`VacantClaim::is_vacant`] of the record the write finds
    /// (for [`VacantClaims::AbsentOnly`]: the record reads absent), checked atomically
    /// with the write (C1, C4). The write is what `claim_cas` would write from that record:
    /// gen 1 over an absent record (or one at gen 0), else the tombstone's gen + 1; the
    /// owner as [`encode_owner`] returns it; `cid`; and `won` as
    /// [`OwnerState::won_after`] computes it from the record's recent claims (C9). It
    /// answers [`VacantClaim::Written`] with the written gen.
    ///
    /// When the condition fails nothing is written, and the answer is
    /// [`VacantClaim::Occupied`] with the record as it stood at one point during the call
    /// (read in the same round trip: a statement's snapshot, DynamoDB's `ALL_OLD`), or
    /// [`VacantClaim::Unread`] when the store has none to hand. A slightly older record
    /// than the one the condition saw is safe: the Arbiter decides on it as on a strong
    /// read, and the fenced CAS that follows loses if it is stale.
    ///
    /// An owner that cannot be serialised or has an empty endpoint is refused with
    /// [`Error::InvalidParams`] before any write (C8); throttling is [`Error::Throttled`],
    /// every other failure [`Error::Unavailable`].
    ///
    /// The default answers [`VacantClaim::Unread`] without a request, so a store written
    /// before this method keeps compiling and the Arbiter reads first, as before.
    async fn claim_vacant(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
    ) -> Result<VacantClaim, Error> {
        let _ = (key, owner, claim_id);
        Ok(VacantClaim::Unread)
    }

    /// The self-eviction baseline (C2, C7: a corrupt owner is `Unavailable`).
    async fn current(&self, key: &Key) -> Result<CurrentView, Error>;

    /// Fenced tombstone at `generation` (C5).
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error>;

    /// Strongly consistent snapshots of several keys' records in one round trip: what a
    /// node's batched heartbeat asks (C2, C6, C7 hold for each key).
    ///
    /// Element `i` of the answer is what [`read_owner`](Store::read_owner)`(&keys[i])` would
    /// return: absent keys, tombstones and gen-0 records read as they do alone, a key given
    /// twice gets its snapshot twice, and an empty `keys` is an empty answer. Keys may mix
    /// projects and envs. There is no snapshot across keys (C1 is per key): each key's
    /// read is linearizable on its own. Callers pass at most [`MAX_BATCH_KEYS`] keys; a
    /// store may refuse more with [`Error::InvalidParams`].
    ///
    /// The outer error fails the whole batch (the round trip failed: `Throttled` or
    /// `Unavailable`); an inner error is one record the store could not decode.
    ///
    /// The default loops [`read_owner`](Store::read_owner), one round trip per key, and
    /// fails the batch on the first error, so a store written before this method keeps
    /// compiling and stays correct. Every in-tree store overrides it with one round trip.
    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        let mut states = Vec::with_capacity(keys.len());
        for key in keys {
            states.push(Ok(self.read_owner(key).await?));
        }
        Ok(states)
    }

    /// The user's online sessions, one per slot whose record holds an owner, in one
    /// strongly consistent round trip (C10): what `POST /v1/sessions` answers.
    ///
    /// Every record of `user` (the default slot's and each other slot's, all keys
    /// [`UserKey::key`] makes) whose owner is present is listed once as
    /// [`UserSession`]; tombstones, gen-0 records and absent slots are not. The order is
    /// the store's; the [`Arbiter`](crate::Arbiter) sorts by slot. Each record is read
    /// linearizably on its own (C1 is per key): a claim or release that completed before
    /// the call is seen. A record whose owner is corrupt fails the listing with
    /// [`Error::Unavailable`], as [`current`](Store::current) does (C7).
    ///
    /// The default answers [`Error::Unavailable`] saying the store cannot list, so a store
    /// written before this method keeps compiling; every in-tree store implements it.
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let _ = user;
        Err(Error::unavailable(
            "this store cannot list a user's sessions (Store::list_sessions is not implemented)",
        ))
    }

    /// How many records hold a session across the whole store (every project, env and
    /// slot), or `None` when the store has no cheap way to count them (C13): what the
    /// server's `unique_sessions_online` gauge reports.
    ///
    /// A record counts when its gen is above 0 and its `owner` attribute is not empty (a
    /// corrupt owner counts: the count does not decode owners); tombstones, gen-0 records
    /// and absent keys do not. The count is one query, not a snapshot of every key: claims
    /// and releases that complete before the call are in it, those running during it may
    /// or may not be. Call it seldom: it may read every record (a scan of the table).
    ///
    /// The default answers `Ok(None)` without a request (a store that cannot count, such
    /// as DynamoDB, where a count is a full table scan billed per item).
    ///
    /// # Errors
    ///
    /// `Unavailable` when the store cannot be read; `Throttled` when it throttled.
    async fn count_online(&self) -> Result<Option<u64>, Error> {
        Ok(None)
    }

    /// Whether the store answers now: what a readiness probe asks.
    ///
    /// The default is one strongly consistent [`read_owner`](Store::read_owner) of
    /// [`ready_key`]: the same kind of read a claim starts with, writing nothing. It
    /// reads the record rather than [`current`](Store::current) so that whatever the
    /// sentinel key holds (it is a valid key anyone may claim) cannot make a healthy
    /// store look unready. A backend overrides it with a cheaper check that still
    /// goes through the path its operations use. It carries no deadline of its own:
    /// the caller bounds it.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the store cannot be read; `Throttled` when it throttled.
    async fn check_ready(&self) -> Result<(), Error> {
        self.read_owner(&ready_key()).await.map(drop)
    }
}

/// The most keys one [`Store::read_owners`] call (and one batched heartbeat request) carries:
/// DynamoDB's `BatchGetItem` limit, so every backend reads a batch in one round trip.
pub const MAX_BATCH_KEYS: usize = 100;

/// The sentinel key of the default [`Store::check_ready`]: project `unique`, env
/// `readyz`, uid 1. A valid key, so every backend can read it; readiness only reads it.
pub fn ready_key() -> Key {
    Key::new("unique", "readyz", 1)
}

/// One call a [`StoreLayer`] sees: which [`Store`] method it is. `vacant_claims`, a
/// capability rather than a call, is not one: a layer answers it as the wrapped store does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOperation {
    /// [`Store::read_owner`].
    ReadOwner,
    /// [`Store::claim_cas`].
    ClaimCas,
    /// [`Store::claim_vacant`].
    ClaimVacant,
    /// [`Store::current`].
    Current,
    /// [`Store::release`].
    Release,
    /// [`Store::read_owners`] (one batch).
    ReadOwners,
    /// [`Store::list_sessions`].
    ListSessions,
    /// [`Store::check_ready`].
    CheckReady,
    /// [`Store::count_online`].
    CountOnline,
}

impl StoreOperation {
    /// Every operation, in declaration order.
    pub const ALL: [Self; 9] = [
        Self::ReadOwner,
        Self::ClaimCas,
        Self::ClaimVacant,
        Self::Current,
        Self::Release,
        Self::ReadOwners,
        Self::ListSessions,
        Self::CheckReady,
        Self::CountOnline,
    ];

    /// The method's name (`read_owner`, `claim_cas`, …): a metric label or a log field.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadOwner => "read_owner",
            Self::ClaimCas => "claim_cas",
            Self::ClaimVacant => "claim_vacant",
            Self::Current => "current",
            Self::Release => "release",
            Self::ReadOwners => "read_owners",
            Self::ListSessions => "list_sessions",
            Self::CheckReady => "check_ready",
            Self::CountOnline => "count_online",
        }
    }
}

/// What a [`StoreLayer`] may learn of a successful answer without knowing its type: whether
/// it is a lost race (C8: an outcome, not an error). Implemented for the answer of every
/// [`Store`] method.
pub trait StoreAnswer: Send {
    /// Whether the answer is a fenced claim whose condition failed ([`CasOutcome::LostRace`]).
    fn is_lost_race(&self) -> bool {
        false
    }
}

impl StoreAnswer for CasOutcome {
    fn is_lost_race(&self) -> bool {
        matches!(self, CasOutcome::LostRace { .. })
    }
}
impl StoreAnswer for OwnerState {}
impl StoreAnswer for VacantClaim {}
impl StoreAnswer for CurrentView {}
impl StoreAnswer for bool {}
impl StoreAnswer for () {}
impl StoreAnswer for Vec<Result<OwnerState, Error>> {}
impl StoreAnswer for Vec<UserSession> {}
impl StoreAnswer for Option<u64> {}

/// The future of one call of the wrapped store, as a [`StoreLayer`] receives it.
pub type StoreCall<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// A [`Store`] that wraps another: metrics, a test double, `Arc`, `Box`. Every `StoreLayer`
/// is a `Store` that forwards every method to [`inner`](StoreLayer::inner) (C12).
///
/// A layer names the store it wraps and may put [`around`](StoreLayer::around) each call:
/// time it, count it, delay it, fail it. It cannot answer a call itself (it has no `T` to
/// answer with but the wrapped store's), and it cannot leave a method out: the `Store`
/// implementation is the one blanket implementation below, which spells every method of
/// the trait (`clippy::missing_trait_methods` is denied on it, so a method added to `Store`
/// without a forward fails clippy). The trait's defaults (`vacant_claims`, `claim_vacant`,
/// `read_owners`, `list_sessions`, `check_ready`, `count_online`) are for backends; through a layer each
/// method is the wrapped store's own. Write a wrapper as a `StoreLayer`, never as an
/// `impl Store` of its own: `MeteredStore` lost two forwards that way.
///
/// A layer costs what a hand-written forward costs: the one boxed future of the outer
/// `Store` call; the wrapped store's future runs inside it.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use unique_core::{Error, Store, StoreAnswer, StoreCall, StoreLayer, StoreOperation};
///
/// /// Counts the calls of the store it wraps.
/// struct Counted<S> {
///     inner: S,
///     calls: AtomicU64,
/// }
///
/// impl<S: Store> StoreLayer for Counted<S> {
///     type Inner = S;
///
///     fn inner(&self) -> &S {
///         &self.inner
///     }
///
///     async fn around<'a, T: StoreAnswer + 'a>(
///         &'a self,
///         _: StoreOperation,
///         call: StoreCall<'a, T>,
///     ) -> Result<T, Error> {
///         self.calls.fetch_add(1, Ordering::Relaxed);
///         call.await
///     }
/// }
/// ```
pub trait StoreLayer: Send + Sync + 'static {
    /// The store this one wraps.
    type Inner: Store + ?Sized;

    /// The store this one wraps.
    fn inner(&self) -> &Self::Inner;

    /// Runs `call`, the wrapped store's `operation`, and answers what it answered or an
    /// error. The default awaits it.
    fn around<'a, T: StoreAnswer + 'a>(
        &'a self,
        operation: StoreOperation,
        call: StoreCall<'a, T>,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'a {
        let _ = operation;
        call
    }
}

/// The one `Store` implementation of every wrapper: each method is the wrapped store's,
/// through [`StoreLayer::around`]. Denying `missing_trait_methods` keeps it whole.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<L: StoreLayer> Store for L {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.around(StoreOperation::ReadOwner, self.inner().read_owner(key))
            .await
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        let call = self.inner().claim_cas(key, owner, claim_id, snap);
        self.around(StoreOperation::ClaimCas, call).await
    }
    fn vacant_claims(&self) -> VacantClaims {
        self.inner().vacant_claims()
    }
    async fn claim_vacant(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
    ) -> Result<VacantClaim, Error> {
        let call = self.inner().claim_vacant(key, owner, claim_id);
        self.around(StoreOperation::ClaimVacant, call).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.around(StoreOperation::Current, self.inner().current(key))
            .await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        let call = self.inner().release(key, generation);
        self.around(StoreOperation::Release, call).await
    }
    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        self.around(StoreOperation::ReadOwners, self.inner().read_owners(keys))
            .await
    }
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        self.around(
            StoreOperation::ListSessions,
            self.inner().list_sessions(user),
        )
        .await
    }
    async fn check_ready(&self) -> Result<(), Error> {
        self.around(StoreOperation::CheckReady, self.inner().check_ready())
            .await
    }
    async fn count_online(&self) -> Result<Option<u64>, Error> {
        self.around(StoreOperation::CountOnline, self.inner().count_online())
            .await
    }
}

impl<T: Store + ?Sized> StoreLayer for Arc<T> {
    type Inner = T;
    fn inner(&self) -> &T {
        self
    }
}

impl<T: Store + ?Sized> StoreLayer for Box<T> {
    type Inner = T;
    fn inner(&self) -> &T {
        self
    }
}

/// The owner as it is stored: its JSON, refused when it has neither an endpoint nor a
/// node (C8): nobody could kick it. Backends call this before any write so an empty owner
/// is never written by accident.
pub fn encode_owner(owner: &Owner) -> Result<String, Error> {
    if owner.endpoint.is_empty() && owner.node.is_empty() {
        return Err(Error::invalid("owner must name an endpoint or a node"));
    }
    serde_json::to_string(owner)
        .map_err(|e| Error::invalid(format!("owner cannot be serialised: {e}")))
}

/// The listing entry of one stored record of a user (C10): `Ok(Some(..))` when the record
/// holds a session, `Ok(None)` for a tombstone or a gen-0 record, `Unavailable` for a corrupt
/// owner. `state` is the record as [`OwnerState::from_record`] read it; backends call this
/// for each record their range read returns.
///
/// # Errors
///
/// `Unavailable` when the stored owner is corrupt (C7).
pub fn listed_session(slot: &str, state: OwnerState) -> Result<Option<UserSession>, Error> {
    if state.owner_corrupt {
        return Err(Error::unavailable(format!(
            "stored owner of slot {slot:?} is corrupt"
        )));
    }
    Ok(state.owner.map(|owner| UserSession {
        slot: slot.to_owned(),
        generation: state.generation,
        owner,
    }))
}

/// Decodes a stored owner attribute for `read_owner` (C7): `Ok(None)` for a
/// tombstone (empty), `Err(())` for a corrupt value.
#[allow(clippy::result_unit_err)]
pub fn decode_owner(raw: &str) -> Result<Option<Owner>, ()> {
    if raw.is_empty() {
        return Ok(None);
    }
    // Fast path, straight into `Owner` (going through a `Value` map was 3 200
    // instructions per read, measured). Only for text that opens an object,
    // since the derive would also take an array; anything it refuses (such as a
    // repeated field) goes through the `Value` path, which decides as before.
    if raw.trim_start().starts_with('{')
        && let Ok(owner) = serde_json::from_str::<Owner>(raw)
    {
        return Ok(Some(owner));
    }
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(value @ serde_json::Value::Object(_)) => {
            serde_json::from_value(value).map(Some).map_err(|_| ())
        }
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn _object_safe(_: Box<dyn Store>) {}

    /// Implements `Store` for `$ty` with `read_owner` answered by `$read` and every other
    /// required method failing the test (readiness never writes); `$extra` adds overrides.
    macro_rules! reading_store {
        ($ty:ty, $read:expr, { $($extra:tt)* }) => {
            #[async_trait]
            impl Store for $ty {
                async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
                    ($read)(self, key)
                }
                async fn claim_cas(
                    &self,
                    _: &Key,
                    _: &Owner,
                    _: &str,
                    _: &OwnerState,
                ) -> Result<CasOutcome, Error> {
                    unreachable!("readiness never writes")
                }
                async fn current(&self, _: &Key) -> Result<CurrentView, Error> {
                    unreachable!("readiness reads with read_owner")
                }
                async fn release(&self, _: &Key, _: i64) -> Result<bool, Error> {
                    unreachable!("readiness never writes")
                }
                $($extra)*
            }
        };
    }

    /// Reads through the default `check_ready`, counting the reads.
    #[derive(Default)]
    struct Sentinel(AtomicUsize);

    reading_store!(
        Sentinel,
        |store: &Sentinel, key: &Key| {
            assert_eq!(*key, ready_key(), "readiness reads only the sentinel");
            store.0.fetch_add(1, Ordering::SeqCst);
            Ok(OwnerState::default())
        },
        {}
    );

    /// Overrides `check_ready` with its own answer.
    struct OwnCheck;

    reading_store!(
        OwnCheck,
        |_: &OwnCheck, _: &Key| unreachable!("the override does not read"),
        {
            async fn check_ready(&self) -> Result<(), Error> {
                Err(Error::unavailable("own check"))
            }
        }
    );

    #[tokio::test]
    async fn the_default_vacant_claim_is_unsupported_and_sends_nothing() {
        let arc: Arc<dyn Store> = Arc::new(Sentinel::default());
        let boxed: Box<dyn Store> = Box::new(Sentinel::default());
        let owner = Owner::new("", "", "http://h");
        for store in [&arc as &dyn Store, &boxed as &dyn Store] {
            assert_eq!(store.vacant_claims(), VacantClaims::Unsupported);
            let answer = store.claim_vacant(&ready_key(), &owner, "c").await.unwrap();
            assert_eq!(answer, VacantClaim::Unread);
        }
    }

    #[test]
    fn ready_key_is_a_valid_key() {
        crate::ValidationLimits::default()
            .check_key(&ready_key())
            .unwrap();
    }

    #[tokio::test]
    async fn default_check_ready_reads_the_sentinel_once_through_arc_and_box() {
        let arc = Arc::new(Sentinel::default());
        arc.check_ready().await.unwrap();
        assert_eq!(arc.0.load(Ordering::SeqCst), 1);
        let boxed: Box<dyn Store> = Box::new(Arc::clone(&arc));
        boxed.check_ready().await.unwrap();
        assert_eq!(arc.0.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn default_read_owners_reads_each_key_in_order() {
        let store = Sentinel::default();
        let keys = [ready_key(), ready_key()];
        let states = store.read_owners(&keys).await.unwrap();
        assert_eq!(states.len(), 2);
        assert!(states.iter().all(|s| s.as_ref().is_ok_and(|s| !s.exists)));
        assert_eq!(store.0.load(Ordering::SeqCst), 2);
        assert!(store.read_owners(&[]).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn arc_and_box_forward_an_overridden_check_ready() {
        let arc = Arc::new(OwnCheck);
        let boxed: Box<dyn Store> = Box::new(OwnCheck);
        for err in [
            arc.check_ready().await.unwrap_err(),
            boxed.check_ready().await.unwrap_err(),
        ] {
            assert_eq!(err.to_string(), "unavailable: own check");
        }
    }

    #[test]
    fn owner_codec() {
        assert!(
            encode_owner(&Owner::default())
                .unwrap_err()
                .is_invalid_params()
        );
        let raw = encode_owner(&Owner::new("r", "", "http://h")).unwrap();
        assert_eq!(
            decode_owner(&raw),
            Ok(Some(Owner::new("r", "", "http://h")))
        );
        assert_eq!(decode_owner(""), Ok(None));
        for corrupt in [
            "{",
            "[]",
            r#"["r","c","http://h"]"#,
            "\"s\"",
            "42",
            "null",
            r#"{"endpoint":5}"#,
            r#"{"endpoint":"http://h"} x"#,
        ] {
            assert_eq!(decode_owner(corrupt), Err(()), "{corrupt}");
        }
        // The slow path's answers where the direct one refuses or differs:
        // a repeated field keeps its last value, unknown fields are ignored.
        assert_eq!(
            decode_owner(r#" {"endpoint":"http://a","endpoint":"http://b","x":[1]}"#),
            Ok(Some(Owner::new("", "", "http://b")))
        );
    }
}
