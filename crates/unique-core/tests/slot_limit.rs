//! The per-user slot limit (`ArbiterBuilder::max_slots_per_user`, docs/design.md
//! "Device slots"): a claim for a new slot of a user who already holds the limit is
//! `TooManySlots` and writes nothing; a login in an online slot (a takeover, a replay) and
//! a superseded retry are answered as without the limit. The race cases state the bound:
//! exact through one arbiter, at most `limit - 1 + k` through `k` arbiters on one store.
//! Every case runs on a store that writes first (C11) and on one that reads first.

use std::sync::Arc;

use unique_core::{
    Arbiter, CasOutcome, ClaimInput, CurrentView, Error, Key, Owner, OwnerState, Store, UserKey,
    UserSession, VacantClaim, VacantClaims, async_trait,
};
use unique_store_memory::MemoryStore;

const LIMIT: usize = 4;

/// The memory store, writing first or not, whose listing yields to the other tasks after
/// it has read: every claim racing it lists before any of them writes, which is the
/// worst interleaving for a count-then-write.
struct Racing {
    inner: MemoryStore,
    write_first: bool,
}

#[async_trait]
impl Store for Racing {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.inner.read_owner(key).await
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        self.inner.claim_cas(key, owner, claim_id, snap).await
    }

    fn vacant_claims(&self) -> VacantClaims {
        if self.write_first {
            self.inner.vacant_claims()
        } else {
            VacantClaims::Unsupported
        }
    }

    async fn claim_vacant(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
    ) -> Result<VacantClaim, Error> {
        assert!(
            self.write_first,
            "a read-first store is never asked to write first"
        );
        self.inner.claim_vacant(key, owner, claim_id).await
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.inner.current(key).await
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.inner.release(key, generation).await
    }

    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let listed = self.inner.list_sessions(user).await;
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        listed
    }
}

fn user() -> UserKey {
    UserKey::new("game", "prod", 7)
}

fn claim(slot: &str, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: user().key(slot),
        owner: Owner::new("eu", "c1", format!("http://10.0.0.1:7000/{slot}")),
        claim_id: claim_id.to_owned(),
    }
}

fn store(write_first: bool) -> Arc<Racing> {
    Arc::new(Racing {
        inner: MemoryStore::new(),
        write_first,
    })
}

fn arbiter(store: &Arc<Racing>) -> Arbiter<Arc<Racing>> {
    Arbiter::builder(Arc::clone(store))
        .max_slots_per_user(LIMIT)
        .build()
}

/// Claims 3 × [`LIMIT`] new slots at once, the `i`-th through `arbiters[i % len]`; answers
/// how many were written, after checking every other one was `TooManySlots`.
async fn race(arbiters: &[Arbiter<Arc<Racing>>]) -> usize {
    let tasks: Vec<_> = (0..3 * LIMIT)
        .map(|i| {
            let arbiter = arbiters[i % arbiters.len()].clone();
            tokio::spawn(async move {
                arbiter
                    .claim(&claim(&format!("s{i}"), &format!("c{i}")))
                    .await
            })
        })
        .collect();
    let mut written = 0;
    for task in tasks {
        match task.await.expect("claim task") {
            Ok(outcome) => {
                assert_eq!(outcome.generation, 1);
                written += 1;
            }
            Err(e) => assert!(
                matches!(e, Error::TooManySlots { limit: LIMIT }),
                "a refused new slot is TooManySlots: {e}"
            ),
        }
    }
    written
}

#[tokio::test]
async fn concurrent_new_slots_through_one_arbiter_stop_exactly_at_the_limit() {
    for write_first in [true, false] {
        let store = store(write_first);
        let written = race(&[arbiter(&store)]).await;
        let listed = store.list_sessions(&user()).await.unwrap();
        assert_eq!(written, LIMIT, "write_first {write_first}");
        assert_eq!(
            listed.len(),
            LIMIT,
            "write_first {write_first}: nothing else written"
        );
    }
}

#[tokio::test]
async fn concurrent_new_slots_through_two_arbiters_stop_at_the_limit_plus_one() {
    for write_first in [true, false] {
        let store = store(write_first);
        let written = race(&[arbiter(&store), arbiter(&store)]).await;
        let listed = store.list_sessions(&user()).await.unwrap();
        assert!(
            (LIMIT..=LIMIT + 1).contains(&written),
            "write_first {write_first}: {written} written through 2 arbiters, limit {LIMIT}"
        );
        assert_eq!(listed.len(), written, "write_first {write_first}");
    }
}

#[tokio::test]
async fn logins_in_online_slots_are_never_refused_and_a_refusal_writes_nothing() {
    for write_first in [true, false] {
        let store = store(write_first);
        let arbiter = arbiter(&store);
        for i in 0..LIMIT {
            arbiter
                .claim(&claim(&format!("s{i}"), &format!("c{i}")))
                .await
                .unwrap();
        }
        let refused = arbiter.claim(&claim("tablet", "t1")).await.unwrap_err();
        assert!(
            matches!(refused, Error::TooManySlots { limit: LIMIT }),
            "{refused}"
        );
        assert!(!refused.is_retryable(), "{refused}");
        let untouched = store.read_owner(&user().key("tablet")).await.unwrap();
        assert!(
            !untouched.exists,
            "write_first {write_first}: a refusal writes nothing"
        );

        // A takeover of an online slot and a replay, both at the limit.
        let takeover = arbiter.claim(&claim("s0", "c0-again")).await.unwrap();
        assert_eq!((takeover.generation, takeover.has_prev), (2, true));
        let replay = arbiter.claim(&claim("s1", "c1")).await.unwrap();
        assert!(replay.replayed, "write_first {write_first}");

        // A logout makes room again.
        assert!(arbiter.release(&user().key("s2"), 1).await.unwrap());
        let tablet = arbiter.claim(&claim("tablet", "t1")).await.unwrap();
        assert_eq!(tablet.generation, 1, "write_first {write_first}");
    }
}

#[tokio::test]
async fn a_superseded_retry_at_the_limit_is_still_superseded() {
    for write_first in [true, false] {
        let store = store(write_first);
        let arbiter = arbiter(&store);
        for i in 0..LIMIT {
            arbiter
                .claim(&claim(&format!("s{i}"), &format!("c{i}")))
                .await
                .unwrap();
        }
        assert!(arbiter.release(&user().key("s3"), 1).await.unwrap());
        arbiter.claim(&claim("s4", "c4")).await.unwrap();
        // c3's login was logged out; its retry must not read as a new slot.
        let retry = arbiter.claim(&claim("s3", "c3")).await.unwrap_err();
        assert!(
            matches!(
                retry,
                Error::Superseded {
                    generation: 1,
                    current: 1
                }
            ),
            "write_first {write_first}: {retry}"
        );
    }
}

#[tokio::test]
async fn without_a_limit_nothing_is_counted() {
    let store = store(true);
    let arbiter = Arbiter::new(Arc::clone(&store));
    assert_eq!(arbiter.max_slots_per_user(), None);
    assert_eq!(race(&[arbiter]).await, 3 * LIMIT);
    let clamped = Arbiter::builder(MemoryStore::new())
        .max_slots_per_user(0)
        .build();
    assert_eq!(clamped.max_slots_per_user(), Some(1));
}
