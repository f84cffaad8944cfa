//! The suite driven through `unique_core::Arbiter` over the subject's store.

use std::collections::BTreeSet;
use std::sync::Arc;

use unique_core::{Arbiter, ClaimInput, Key, KickDetail, Store};

use crate::Subject;
use crate::support::{Ctx, claimed, owner_for, tombstoned};

fn input(key: &Key, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: owner_for(claim_id),
        claim_id: claim_id.to_owned(),
    }
}

fn arbiter(ctx: &Ctx, attempts: u32) -> Arbiter<Arc<dyn Store>> {
    Arbiter::builder(Arc::clone(&ctx.store))
        .max_claim_attempts(attempts)
        .build()
}

/// I3/I2 via the Arbiter: 16 concurrent logins with different claim_ids on one
/// key. Every successful login has a distinct gen, failures are only
/// `Unavailable` (budget exhausted), and the final owner is the login with the highest gen.
pub async fn concurrent_claims_one_final_owner(subject: Subject) {
    let ctx = Ctx::new(subject, "arbiter::concurrent_claims_one_final_owner");
    let key = ctx.key(1);
    let arbiter = arbiter(&ctx, 3);
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (arbiter, key, barrier) = (arbiter.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let claim_id = format!("login-{i}");
                (arbiter.claim(&input(&key, &claim_id)).await, claim_id)
            })
        })
        .collect();
    let mut wins = Vec::new();
    for task in tasks {
        match task.await.expect("login task") {
            (Ok(outcome), claim_id) => {
                assert!(!outcome.replayed);
                wins.push((outcome.generation, claim_id));
            }
            (Err(e), _) => assert!(
                e.is_unavailable(),
                "a lost login must be Unavailable: {e:?}"
            ),
        }
    }
    let gens: BTreeSet<i64> = wins.iter().map(|(g, _)| *g).collect();
    assert_eq!(
        gens.len(),
        wins.len(),
        "two logins got the same gen: {wins:?}"
    );
    let (top, winner) = wins.iter().max().expect("at least one login succeeds");
    assert_eq!(ctx.read(&key).await, claimed(*top, winner));
}

/// I4 via the Arbiter: retrying a login with the same claim_id returns the same
/// gen as a replay and writes nothing; after a takeover the old claim_id is
/// no longer a replay.
pub async fn replay_returns_same_gen_without_write(subject: Subject) {
    let ctx = Ctx::new(subject, "arbiter::replay_returns_same_gen_without_write");
    let key = ctx.key(1);
    let arbiter = arbiter(&ctx, 3);
    let first = arbiter.claim(&input(&key, "a")).await.expect("first login");
    assert_eq!((first.generation, first.replayed), (1, false));
    for _ in 0..3 {
        let again = arbiter.claim(&input(&key, "a")).await.expect("retry");
        assert_eq!(
            (again.generation, again.replayed, again.kicked),
            (1, true, false)
        );
        assert_eq!(
            ctx.read(&key).await,
            claimed(1, "a"),
            "a replay must not write"
        );
    }
    let taken = arbiter.claim(&input(&key, "b")).await.expect("takeover");
    assert_eq!(
        (taken.generation, taken.prev_generation, taken.has_prev),
        (2, 1, true)
    );
    let late = arbiter.claim(&input(&key, "a")).await.expect("late retry");
    assert_eq!((late.generation, late.replayed), (3, false));
}

/// C5/I2 via the Arbiter: takeover, stale and fresh release, then a login after
/// the tombstone continues the gen with `has_prev = false`.
pub async fn release_then_next_login(subject: Subject) {
    let ctx = Ctx::new(subject, "arbiter::release_then_next_login");
    let key = ctx.key(1);
    let arbiter = arbiter(&ctx, 3);
    arbiter.claim(&input(&key, "a")).await.expect("login a");
    let b = arbiter.claim(&input(&key, "b")).await.expect("login b");
    assert_eq!(b.prev_owner, Some(owner_for("a")));
    assert!(!arbiter.release(&key, 1).await.expect("stale release"));
    assert!(arbiter.release(&key, 2).await.expect("release"));
    assert_eq!(ctx.read(&key).await, tombstoned(2));
    let c = arbiter.claim(&input(&key, "c")).await.expect("login c");
    assert_eq!(
        (c.generation, c.prev_generation, c.has_prev, c.kick_detail),
        (3, 2, false, None)
    );
}

/// C3/C7 via the Arbiter: a corrupt record is replaced (kick detail
/// `no-endpoint`), while `current` on it stays `Unavailable` until then.
pub async fn corrupt_record_replaced(subject: Subject) {
    let ctx = Ctx::new(subject, "arbiter::corrupt_record_replaced");
    let key = ctx.key(1);
    ctx.put(&key, 4, Some("[garbage"), Some("old")).await;
    let arbiter = arbiter(&ctx, 3);
    assert!(arbiter.current(&key).await.unwrap_err().is_unavailable());
    let outcome = arbiter
        .claim(&input(&key, "new"))
        .await
        .expect("claim over corrupt");
    assert_eq!(outcome.generation, 5);
    assert!(outcome.has_prev && !outcome.kicked);
    assert_eq!(outcome.kick_detail, Some(KickDetail::NoEndpoint));
    assert_eq!(ctx.read(&key).await, claimed(5, "new"));
}
