//! Helpers shared by the cases: per-case keys, owners, raw records, assertions.

use std::sync::Arc;

use unique_core::{CasOutcome, CurrentView, Error, Key, Owner, OwnerState, Store};

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

    pub(crate) async fn read(&self, key: &Key) -> OwnerState {
        self.store
            .read_owner(key)
            .await
            .unwrap_or_else(|e| panic!("read_owner({key}) failed: {e}"))
    }

    pub(crate) async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.store.current(key).await
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

    pub(crate) async fn release(&self, key: &Key, generation: i64) -> bool {
        self.store
            .release(key, generation)
            .await
            .unwrap_or_else(|e| panic!("release({key}, {generation}) failed: {e}"))
    }

    /// Writes a raw record through the harness hook (bypassing every fence).
    pub(crate) async fn put(
        &self,
        key: &Key,
        generation: i64,
        owner: Option<&str>,
        claim_id: Option<&str>,
    ) {
        let record = RawRecord {
            generation,
            owner: owner.map(str::to_owned),
            claim_id: claim_id.map(str::to_owned),
        };
        self.raw
            .put_raw(key, record)
            .await
            .unwrap_or_else(|e| panic!("put_raw({key}) failed: {e}"));
    }

    /// Writes an online session (valid owner, cid) and returns its snapshot.
    pub(crate) async fn session(&self, key: &Key, generation: i64, claim_id: &str) -> OwnerState {
        let owner = owner_json(claim_id);
        self.put(key, generation, Some(&owner), Some(claim_id))
            .await;
        self.read(key).await
    }

    /// Writes a tombstone (owner empty, no cid) and returns its snapshot.
    pub(crate) async fn tombstone(&self, key: &Key, generation: i64) -> OwnerState {
        self.put(key, generation, Some(""), None).await;
        self.read(key).await
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
                    assert_eq!(
                        carried, *before,
                        "{what}: the lost race carried a wrong record"
                    );
                }
            }
            other => panic!("{what}: expected a lost race, got {other:?}"),
        }
        assert_eq!(
            self.read(key).await,
            *before,
            "{what}: a failed condition must write nothing"
        );
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

/// The snapshot a correct store reports after a claim by `claim_id` won `generation`.
pub(crate) fn claimed(generation: i64, claim_id: &str) -> OwnerState {
    OwnerState {
        exists: true,
        generation,
        owner: Some(owner_for(claim_id)),
        owner_corrupt: false,
        claim_id: Some(claim_id.to_owned()),
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
        results.push(task.await.expect("race task panicked"));
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
    let winners: Vec<_> = results.iter().filter(|(_, r)| r.is_ok()).collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one claim from one snapshot must win (I3), got {winners:?}"
    );
    let (winner, won) = winners[0];
    assert_eq!(
        won.as_ref().ok(),
        Some(&expected),
        "the winner must write snap.gen + 1"
    );
    for (claim_id, result) in results {
        if let Err(e) = result {
            assert!(
                e.is_lost_race(),
                "loser {claim_id} must see a lost race, got {e:?}"
            );
        }
    }
    assert_eq!(ctx.read(key).await, claimed(expected, winner));
    winner.clone()
}

/// Prints the case name (and anything else worth knowing) when a case panics,
/// so `run_all` and seeded cases name their failure.
pub(crate) struct FailureNote(pub(crate) String);

impl Drop for FailureNote {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("store contract: {}", self.0);
        }
    }
}
