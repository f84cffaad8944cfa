//! The suite driven through `unique_core::Arbiter` over the subject's store.

use std::collections::BTreeSet;
use std::sync::Arc;

use unique_core::{Arbiter, ClaimInput, ClaimOutcome, Key, KickDetail, Store};

use crate::Subject;
use crate::check::violated;
use crate::support::{Ctx, claimed, join, owner_for};

fn input(key: &Key, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: owner_for(claim_id),
        claim_id: claim_id.to_owned(),
    }
}

/// A login through the Arbiter that must succeed: a store that answers
/// correctly leaves it no reason to fail.
///
/// When it fails, the store is asked for the claim directly, from a fresh
/// snapshot, so the failure names the clause the store breaks (a lost race
/// on a condition that holds is C3, not the Arbiter's exhausted budget).
async fn login(
    ctx: &Ctx,
    arbiter: &Arbiter<Arc<dyn Store>>,
    key: &Key,
    claim_id: &str,
    what: &str,
) -> ClaimOutcome {
    match arbiter.claim(&input(key, claim_id)).await {
        Ok(outcome) => outcome,
        Err(e) => {
            let snap = ctx.read(key).await;
            let next = if snap.exists { snap.generation + 1 } else { 1 };
            ctx.win(key, claim_id, &snap, next).await;
            violated(
                "C8",
                "an uncontended login on a healthy store succeeds",
                format_args!("{what} ({claim_id}) failed: {e}"),
            )
        }
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
        match join(task).await {
            (Ok(outcome), claim_id) => {
                ensure!(
                    !outcome.replayed,
                    "I4",
                    "only a retry with the same claim_id is a replay",
                    "login {claim_id} with a fresh claim_id was replayed"
                );
                wins.push((outcome.generation, claim_id));
            }
            (Err(e), claim_id) => ensure!(
                e.is_unavailable(),
                "C8",
                "a login that exhausts its attempts on lost races is Unavailable",
                "login {claim_id} failed with {e:?}"
            ),
        }
    }
    let gens: BTreeSet<i64> = wins.iter().map(|(g, _)| *g).collect();
    ensure!(
        gens.len() == wins.len(),
        "I2",
        "every successful login has its own gen",
        "two logins got the same gen: {wins:?}"
    );
    let Some((top, winner)) = wins.iter().max() else {
        violated(
            "I3",
            "of concurrent logins on one key at least one succeeds",
            format_args!("all 16 logins failed"),
        )
    };
    ensure_eq!(
        ctx.read(&key).await,
        claimed(*top, winner),
        "I3",
        "the final owner is the login with the highest gen"
    );
}

/// I4 via the Arbiter: retrying a login with the same claim_id returns the same
/// gen as a replay and writes nothing. (After a takeover the old claim_id is
/// superseded: `recent_claims::superseded_retry_neither_kicks_nor_writes`.)
pub async fn replay_returns_same_gen_without_write(subject: Subject) {
    let ctx = Ctx::new(subject, "arbiter::replay_returns_same_gen_without_write");
    let key = ctx.key(1);
    let arbiter = arbiter(&ctx, 3);
    let first = login(&ctx, &arbiter, &key, "a", "first login").await;
    ensure_eq!(
        (first.generation, first.replayed),
        (1, false),
        "C4",
        "a first login writes gen 1"
    );
    for _ in 0..3 {
        let again = login(&ctx, &arbiter, &key, "a", "retry").await;
        ensure_eq!(
            (again.generation, again.replayed, again.kicked),
            (1, true, false),
            "I4",
            "a retry with the same claim_id replays its gen without a kick"
        );
        ensure_eq!(
            ctx.read(&key).await,
            claimed(1, "a"),
            "I4",
            "a replay writes nothing"
        );
    }
    let taken = login(&ctx, &arbiter, &key, "b", "takeover").await;
    ensure_eq!(
        (taken.generation, taken.prev_generation, taken.has_prev),
        (2, 1, true),
        "C3",
        "a takeover replaces the session through the double pin"
    );
}

/// C5/I2 via the Arbiter: takeover, stale and fresh release, then a login after
/// the tombstone continues the gen with `has_prev = false`.
pub async fn release_then_next_login(subject: Subject) {
    let ctx = Ctx::new(subject, "arbiter::release_then_next_login");
    let key = ctx.key(1);
    let arbiter = arbiter(&ctx, 3);
    login(&ctx, &arbiter, &key, "a", "login a").await;
    let b = login(&ctx, &arbiter, &key, "b", "login b").await;
    ensure_eq!(
        b.prev_owner,
        Some(owner_for("a")),
        "C2",
        "a takeover reads the replaced session's owner"
    );
    ctx.release_refused(&key, 1, "a stale release after a takeover")
        .await;
    ctx.release_keeps_gen(&key, 2).await;
    let c = login(&ctx, &arbiter, &key, "c", "login c").await;
    ensure_eq!(
        (c.generation, c.prev_generation, c.has_prev, c.kick_detail),
        (3, 2, false, None),
        "I2",
        "a login after a tombstone continues its gen, with no session to kick"
    );
}

/// C3/C7 via the Arbiter: a corrupt record is replaced (kick detail
/// `no-endpoint`), while `current` on it stays `Unavailable` until then.
pub async fn corrupt_record_replaced(subject: Subject) {
    let ctx = Ctx::new(subject, "arbiter::corrupt_record_replaced");
    let key = ctx.key(1);
    ctx.put(&key, 4, Some("[garbage"), Some("old")).await;
    let arbiter = arbiter(&ctx, 3);
    let current = arbiter.current(&key).await;
    ensure!(
        current
            .as_ref()
            .is_err_and(unique_core::Error::is_unavailable),
        "C7",
        "current over a corrupt owner is Unavailable",
        "got {current:?}"
    );
    let outcome = login(&ctx, &arbiter, &key, "new", "claim over a corrupt record").await;
    ensure_eq!(
        (
            outcome.generation,
            outcome.has_prev,
            outcome.kicked,
            outcome.kick_detail
        ),
        (5, true, false, Some(KickDetail::NoEndpoint)),
        "C3",
        "a corrupt record is replaced through the double pin, with no endpoint to kick"
    );
    ensure_eq!(
        ctx.read(&key).await,
        claimed(5, "new"),
        "C4",
        "a claim writes gen, owner and cid together"
    );
}
