//! Helpers shared by the cases: per-case keys, owners, raw records, and the
//! checks that name the clause a failure breaks.

use std::sync::Arc;

use unique_core::{
    CasOutcome, CurrentView, Error, Key, Owner, OwnerState, RecentClaims, Store, UserKey,
    UserSession,
};

use crate::check::violated;
use crate::{RawRecord, RawWriter, Subject};

/// One case's view of the subject, with a key space no other case or run uses.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) store: Arc<dyn Store>,
    raw: Arc<dyn RawWriter>,
    project: String,
    env: String,
}

impl Ctx {
    /// Keys are `sc<random>#<case>#uid`: backends may share one table across
    /// cases and runs, so no case ever sees another's records.
    pub(crate) fn new(subject: Subject, case: &str) -> Self {
        Self {
            store: subject.store,
            raw: subject.raw,
            project: format!("sc{:016x}", fastrand::u64(..)),
            env: case.chars().filter(|c| *c != '#').take(60).collect(),
        }
    }

    pub(crate) fn key(&self, uid: i64) -> Key {
        Key::new(self.project.clone(), self.env.clone(), uid)
    }

    /// The user of [`key`](Self::key)`(uid)`, across its slots.
    pub(crate) fn user(&self, uid: i64) -> UserKey {
        UserKey::new(self.project.clone(), self.env.clone(), uid)
    }

    /// `list_sessions` as the store answers it.
    pub(crate) async fn list_result(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        self.store.list_sessions(user).await
    }

    /// `list_sessions` on a user none of whose owners is corrupt: it must
    /// answer (C10), and is returned sorted by slot, as the Arbiter sorts it.
    pub(crate) async fn list(&self, user: &UserKey) -> Vec<UserSession> {
        match self.list_result(user).await {
            Ok(mut sessions) => {
                sessions.sort_by(|a, b| a.slot.cmp(&b.slot));
                sessions
            }
            Err(e) => violated(
                "C10",
                "list_sessions must answer unless a stored owner is corrupt",
                format_args!("list_sessions({user}) failed: {e}"),
            ),
        }
    }

    /// The record without its recent claims: what every case but C9's
    /// compares (their expected states name gen, owner and cid only). A claim
    /// from such a snapshot writes a list of one win, which C1–C8 do not look at.
    pub(crate) async fn read(&self, key: &Key) -> OwnerState {
        without_recent_claims(self.read_all(key).await)
    }

    /// The whole record, recent claims included (C9).
    pub(crate) async fn read_all(&self, key: &Key) -> OwnerState {
        match self.store.read_owner(key).await {
            Ok(state) => state,
            Err(e) => violated(
                "C2",
                "read_owner must answer on a healthy store",
                format_args!("read_owner({key}) failed: {e}"),
            ),
        }
    }

    /// The snapshot of a key this case has not written yet: it must be
    /// absent, or a write on some other key (another slot, another user)
    /// showed on this one (C1).
    pub(crate) async fn unwritten(&self, key: &Key) -> OwnerState {
        let snap = self.read(key).await;
        ensure!(
            !snap.exists,
            "C1",
            "each key is its own: a key never written has no record, whatever was written on other slots or users",
            "{key} read {snap:?} before any write on it"
        );
        snap
    }

    pub(crate) async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.store.current(key).await
    }

    /// `current` on a record whose owner is not corrupt: it must answer (C7).
    pub(crate) async fn current_ok(&self, key: &Key) -> CurrentView {
        match self.current(key).await {
            Ok(view) => view,
            Err(e) => violated(
                "C7",
                "current must answer unless the stored owner is corrupt",
                format_args!("current({key}) failed: {e}"),
            ),
        }
    }

    /// `claim_cas` with the owner derived from `claim_id`.
    pub(crate) async fn claim(&self, key: &Key, claim_id: &str, snap: &OwnerState) -> Claimed {
        match self
            .store
            .claim_cas(key, &owner_for(claim_id), claim_id, snap)
            .await
        {
            Ok(CasOutcome::Written { generation }) => Ok(generation),
            Ok(CasOutcome::LostRace { current }) => Err(NotWritten::LostRace(current)),
            Err(e) => Err(NotWritten::Failed(e)),
        }
    }

    /// A claim from `snap` whose condition holds: it must write `expected`
    /// (`snap.gen + 1`, or 1 on first login) and leave the claim's record.
    pub(crate) async fn win(&self, key: &Key, claim_id: &str, snap: &OwnerState, expected: i64) {
        let result = self.claim(key, claim_id, snap).await;
        self.ensure_won(key, claim_id, snap, result, expected).await;
    }

    /// Checks that `result`, of a claim by `claim_id` from `snap` whose
    /// condition held, wrote `expected` and left the claim's record. A
    /// failure names the clause it breaks: an error (C8), another gen (C4), a
    /// record that is not the claim's (C4, or C2 when the read shows the
    /// record from before the claim), a lost race (see [`Ctx::lost_holding`]).
    pub(crate) async fn ensure_won(
        &self,
        key: &Key,
        claim_id: &str,
        snap: &OwnerState,
        result: Claimed,
        expected: i64,
    ) {
        let what = format!("claim {claim_id:?} {}", form(snap));
        match result {
            Ok(generation) => ensure!(
                generation == expected,
                "C4",
                "a claim must write and return snap.gen + 1",
                "{what}: expected gen {expected}, returned {generation}"
            ),
            Err(NotWritten::LostRace(_)) => self.lost_holding(key, claim_id, snap, &what).await,
            Err(NotWritten::Failed(e)) => violated(
                "C8",
                "a claim on a healthy store fails only on a fault",
                format_args!("{what} failed: {e}"),
            ),
        }
        let stored = self.read(key).await;
        // Reading back the record from before the claim is a stale read,
        // the likelier bug than a write that reported success and wrote nothing.
        let (clause, rule) = if stored == *snap {
            ("C2", "read_owner sees the latest committed write")
        } else {
            ("C4", "a claim writes gen, owner and cid together")
        };
        ensure_record(
            &stored,
            &claimed(expected, claim_id),
            (clause, rule),
            &format!("read after {what}"),
        );
    }

    /// Fails the case for a claim from `snap` that lost the race although its
    /// condition held (nothing else wrote the key). The same claim is tried
    /// once more to tell the two bugs apart: a lost race that goes away on a
    /// retry was not a failed condition but a fault reported as one (C8, a
    /// throttle mapped to a lost race); one that stays is a wrong condition
    /// (C3, such as a form chosen by owner).
    pub(crate) async fn lost_holding(
        &self,
        key: &Key,
        claim_id: &str,
        snap: &OwnerState,
        what: &str,
    ) -> ! {
        let stored = self.read(key).await;
        match self.claim(key, claim_id, snap).await {
            Ok(_) => violated(
                "C8",
                "a lost race only when the condition failed",
                format_args!("{what} lost the race, then won on a retry; stored {stored:?}"),
            ),
            retry => violated(
                "C3",
                "a claim whose condition holds must win",
                format_args!("{what} lost the race (a retry: {retry:?}); stored {stored:?}"),
            ),
        }
    }

    /// `release` as the store answers it; an error breaks C5 (release
    /// answers `true` or `false`).
    pub(crate) async fn release(&self, key: &Key, generation: i64) -> bool {
        match self.store.release(key, generation).await {
            Ok(released) => released,
            Err(e) => violated(
                "C5",
                "release answers true or false, never an error on a healthy store",
                format_args!("release({key}, {generation}) failed: {e}"),
            ),
        }
    }

    /// A release that must answer `false` and write nothing (C5): another
    /// gen than the stored one, no record, or a gen <= 0.
    pub(crate) async fn release_refused(&self, key: &Key, generation: i64, why: &str) {
        let before = self.read(key).await;
        ensure!(
            !self.release(key, generation).await,
            "C5",
            "a release answers true only when the stored gen equals its gen, and gen > 0",
            "{why}: release at {generation} answered true over {before:?}"
        );
        ensure_eq!(
            self.read(key).await,
            before,
            "C5",
            "a release that answers false writes nothing",
            "{why}: release at {generation}"
        );
    }

    /// A release at the stored gen: it must answer `true` and leave the
    /// tombstone at that gen (C5: keep gen, empty owner, no cid).
    pub(crate) async fn release_keeps_gen(&self, key: &Key, generation: i64) {
        ensure!(
            self.release(key, generation).await,
            "C5",
            "a release at the stored gen must answer true",
            "release({key}, {generation}) answered false over {:?}",
            self.read(key).await
        );
        self.ensure_tombstone(key, generation).await;
    }

    /// After a release at `generation` answered `true`, the record must be
    /// the tombstone at that gen.
    pub(crate) async fn ensure_tombstone(&self, key: &Key, generation: i64) {
        let stored = self.read(key).await;
        ensure!(
            stored == tombstoned(generation),
            "C5",
            "release must keep gen, empty the owner and remove the cid",
            "released gen {generation}, read back gen {} ({stored:?})",
            stored.generation
        );
    }

    /// Writes a raw record through the harness hook (bypassing every fence).
    pub(crate) async fn put(
        &self,
        key: &Key,
        generation: i64,
        owner: Option<&str>,
        claim_id: Option<&str>,
    ) {
        self.put_with_won(key, generation, owner, claim_id, None)
            .await;
    }

    /// [`put`](Self::put) with a raw `won` attribute (`None`: absent).
    pub(crate) async fn put_with_won(
        &self,
        key: &Key,
        generation: i64,
        owner: Option<&str>,
        claim_id: Option<&str>,
        won: Option<&str>,
    ) {
        let record = RawRecord {
            generation,
            owner: owner.map(str::to_owned),
            claim_id: claim_id.map(str::to_owned),
            won: won.map(str::to_owned),
        };
        if let Err(e) = self.raw.put_raw(key, record).await {
            violated(
                "harness",
                "the raw-record hook must write any record",
                format_args!("put_raw({key}) failed: {e}"),
            );
        }
    }

    /// Writes an online session (valid owner, cid) and returns its snapshot.
    pub(crate) async fn session(&self, key: &Key, generation: i64, claim_id: &str) -> OwnerState {
        let owner = owner_json(claim_id);
        self.put(key, generation, Some(&owner), Some(claim_id))
            .await;
        let state = self.read(key).await;
        ensure_record(
            &state,
            &claimed(generation, claim_id),
            ("C2", "read_owner returns the record just written"),
            &format!("raw session at gen {generation}"),
        );
        state
    }

    /// Writes a tombstone (owner empty, no cid) and returns its snapshot.
    pub(crate) async fn tombstone(&self, key: &Key, generation: i64) -> OwnerState {
        self.put(key, generation, Some(""), None).await;
        let state = self.read(key).await;
        ensure_record(
            &state,
            &tombstoned(generation),
            ("C2", "read_owner returns the record just written"),
            &format!("raw tombstone at gen {generation}"),
        );
        state
    }

    /// Asserts `result` is a lost race and that the record is still `before`;
    /// a record carried by the lost race must be that record too.
    pub(crate) async fn assert_refused(
        &self,
        key: &Key,
        result: Claimed,
        before: &OwnerState,
        what: &str,
    ) {
        match result {
            Err(NotWritten::LostRace(current)) => {
                if let Some(carried) = current {
                    ensure_record(
                        &without_recent_claims(carried),
                        before,
                        ("C8", "a lost race carries the record as it stands"),
                        &format!("{what}: carried by the lost race"),
                    );
                }
            }
            Ok(generation) => violated(
                "C3",
                "a claim whose condition fails must lose the race",
                format_args!("{what}: wrote gen {generation} over {before:?}"),
            ),
            Err(NotWritten::Failed(e)) => violated(
                "C8",
                "a failed condition is a lost race, not an error",
                format_args!("{what}: failed with {e}"),
            ),
        }
        ensure_eq!(
            self.read(key).await,
            *before,
            "C8",
            "a failed condition must write nothing",
            "{what}"
        );
    }
}

/// Checks a record (read back, or carried by a lost race) against the one it
/// must be. A difference in one attribute's reading names that attribute's
/// clause (cid presence C6, owner parsing C7), whoever read it; any other
/// difference names `otherwise`, the clause and rule of the caller's check.
pub(crate) fn ensure_record(
    got: &OwnerState,
    want: &OwnerState,
    otherwise: (&'static str, &str),
    at: &str,
) {
    if got == want {
        return;
    }
    let same_pins = got.exists == want.exists && got.generation == want.generation;
    let same_owner = got.owner == want.owner && got.owner_corrupt == want.owner_corrupt;
    let empty_vs_absent = |a: &Option<String>, b: &Option<String>| {
        a.as_deref() == Some("") && b.is_none() || b.as_deref() == Some("") && a.is_none()
    };
    let misread_owner =
        got.owner_corrupt != want.owner_corrupt || got.owner.is_some() != want.owner.is_some();
    let (clause, rule) = if same_pins && same_owner && got.claim_id == want.claim_id {
        (
            "C9",
            "a claim appends its win to the record's recent claims, which a release keeps",
        )
    } else if same_pins && same_owner && empty_vs_absent(&got.claim_id, &want.claim_id) {
        (
            "C6",
            "an empty cid reads as Some(\"\"), an absent cid as None",
        )
    } else if same_pins && got.claim_id == want.claim_id && misread_owner {
        (
            "C7",
            "a stored owner reads as written: parsed, empty for a tombstone, or corrupt",
        )
    } else {
        otherwise
    };
    violated(
        clause,
        rule,
        format_args!("{at}: expected {want:?}, got {got:?}"),
    );
}

/// The claim form a snapshot picks (C3), for failure messages.
pub(crate) fn form(snap: &OwnerState) -> String {
    match (&snap.exists, &snap.claim_id) {
        (false, _) => "from an absent snapshot (first-login form)".to_owned(),
        (true, Some(cid)) => format!("from gen {} cid {cid:?} (double-pin form)", snap.generation),
        (true, None) => format!("from gen {} without cid (tombstone form)", snap.generation),
    }
}

/// A claim as the cases compare it: the gen written, or why nothing was.
pub(crate) type Claimed = Result<i64, NotWritten>;

/// How a claim that wrote nothing ended.
#[derive(Debug)]
pub(crate) enum NotWritten {
    /// The fence condition failed, with the record the store carried back.
    LostRace(Option<OwnerState>),
    /// The store answered an error.
    Failed(Error),
}

impl NotWritten {
    pub(crate) fn is_lost_race(&self) -> bool {
        matches!(self, Self::LostRace(_))
    }

    /// The error, when the store answered one.
    pub(crate) fn error(&self) -> Option<&Error> {
        match self {
            Self::Failed(e) => Some(e),
            Self::LostRace(_) => None,
        }
    }
}

/// The owner every case writes for `claim_id`: the endpoint names the claim,
/// so a reader can tell whose owner it sees.
pub(crate) fn owner_for(claim_id: &str) -> Owner {
    Owner::new(
        "region-1",
        "cluster-a",
        format!("http://10.0.0.1:7000/kick/{claim_id}"),
    )
}

/// The stored JSON of [`owner_for`].
pub(crate) fn owner_json(claim_id: &str) -> String {
    unique_core::encode_owner(&owner_for(claim_id)).expect("test owner has an endpoint")
}

/// `state` without its recent claims, as [`Ctx::read`] reports it.
pub(crate) fn without_recent_claims(mut state: OwnerState) -> OwnerState {
    state.recent_claims = RecentClaims::new();
    state
}

/// The snapshot a correct store reports after a claim by `claim_id` won `generation`.
pub(crate) fn claimed(generation: i64, claim_id: &str) -> OwnerState {
    OwnerState {
        exists: true,
        generation,
        owner: Some(owner_for(claim_id)),
        owner_corrupt: false,
        claim_id: Some(claim_id.to_owned()),
        recent_claims: RecentClaims::new(),
    }
}

/// The listing entry of a session on `slot` won by `claim_id` at `generation`.
pub(crate) fn listed(slot: &str, generation: i64, claim_id: &str) -> UserSession {
    UserSession {
        slot: slot.to_owned(),
        generation,
        owner: owner_for(claim_id),
    }
}

/// The snapshot of a tombstone at `generation`.
pub(crate) fn tombstoned(generation: i64) -> OwnerState {
    OwnerState {
        exists: true,
        generation,
        ..OwnerState::default()
    }
}

/// `n` tasks claim `key` from the same snapshot, released together by a barrier.
/// Returns each task's claim_id and result.
pub(crate) async fn race_from(
    ctx: &Ctx,
    key: &Key,
    snap: &OwnerState,
    n: usize,
    tag: &str,
) -> Vec<(String, Claimed)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (ctx, key, snap, barrier) =
                (ctx.clone(), key.clone(), snap.clone(), barrier.clone());
            let claim_id = format!("{tag}-{i}");
            tokio::spawn(async move {
                barrier.wait().await;
                let result = ctx.claim(&key, &claim_id, &snap).await;
                (claim_id, result)
            })
        })
        .collect();
    let mut results = Vec::with_capacity(n);
    for task in tasks {
        results.push(join(task).await);
    }
    results
}

/// Asserts exactly one of `results` won with `expected`, every other lost on
/// the condition, and the store holds the winner's record. Returns the winner's claim_id.
pub(crate) async fn assert_one_winner(
    ctx: &Ctx,
    key: &Key,
    results: &[(String, Claimed)],
    expected: i64,
) -> String {
    for (claim_id, result) in results {
        if let Err(NotWritten::Failed(e)) = result {
            violated(
                "C8",
                "a claim that loses a race must report a lost race, not an error",
                format_args!("{claim_id} failed with {e}"),
            );
        }
    }
    let winners: Vec<_> = results.iter().filter(|(_, r)| r.is_ok()).collect();
    ensure!(
        winners.len() == 1,
        "C1",
        "of concurrent claims from one snapshot exactly one wins (I3)",
        "{} won: {winners:?}",
        winners.len()
    );
    let (winner, won) = winners[0];
    ensure_eq!(
        won.as_ref().ok(),
        Some(&expected),
        "C4",
        "the winner writes snap.gen + 1"
    );
    ensure_eq!(
        ctx.read(key).await,
        claimed(expected, winner),
        "C4",
        "the record is the winner's gen, owner and cid",
        "after the race"
    );
    winner.clone()
}

/// Awaits a task of a case; a panic in it (a violation) fails the case with
/// the task's own message, so the failure still names its clause.
pub(crate) async fn join<T>(task: tokio::task::JoinHandle<T>) -> T {
    match task.await {
        Ok(value) => value,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("a task of the case was cancelled: {e}"),
    }
}

/// Prints the case name (and anything else worth knowing) when a case panics,
/// so seeded cases print their seed with their failure.
pub(crate) struct FailureNote(pub(crate) String);

impl Drop for FailureNote {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("store contract: {}", self.0);
        }
    }
}
