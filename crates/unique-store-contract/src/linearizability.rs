//! C1 single-key linearizability: one total order per key, real concurrent races.

use std::collections::BTreeSet;
use std::sync::Arc;

use unique_core::Key;

use crate::Subject;
use crate::support::{Ctx, assert_one_winner, claimed, race_from, tombstoned};

/// Tasks racing from one snapshot: enough to collide on every backend.
const RACERS: usize = 32;

/// C1/C4/I3 (trap: read-modify-write in two requests): 32 tasks claim an absent
/// key from the same snapshot; exactly one wins with gen 1.
pub async fn race_first_login_one_winner(subject: Subject) {
    let ctx = Ctx::new(subject, "linearizability::race_first_login_one_winner");
    let key = ctx.key(1);
    let snap = ctx.read(&key).await;
    let results = race_from(&ctx, &key, &snap, RACERS, "first").await;
    assert_one_winner(&ctx, &key, &results, 1).await;
}

/// C1/C4/I3: 32 tasks replace one online session from the same double-pin
/// snapshot; exactly one wins, gen + 1 exactly once.
pub async fn race_double_pin_one_winner(subject: Subject) {
    let ctx = Ctx::new(subject, "linearizability::race_double_pin_one_winner");
    let key = ctx.key(1);
    let snap = ctx.session(&key, 7, "old").await;
    let results = race_from(&ctx, &key, &snap, RACERS, "pin").await;
    assert_one_winner(&ctx, &key, &results, 8).await;
}

/// C1/C4/I3: 32 tasks claim a tombstone from the same snapshot; exactly one wins.
pub async fn race_tombstone_one_winner(subject: Subject) {
    let ctx = Ctx::new(subject, "linearizability::race_tombstone_one_winner");
    let key = ctx.key(1);
    let snap = ctx.tombstone(&key, 7).await;
    let results = race_from(&ctx, &key, &snap, RACERS, "tomb").await;
    assert_one_winner(&ctx, &key, &results, 8).await;
}

/// C1/C5: round after round, a release at the session's gen races a claim from
/// the same session snapshot. Both are fenced on that gen and cid, so exactly
/// one takes effect, and the record shows which.
pub async fn race_claim_against_release(subject: Subject) {
    let ctx = Ctx::new(subject, "linearizability::race_claim_against_release");
    let key = ctx.key(1);
    let mut snap = ctx.read(&key).await;
    let mut expected = 1;
    let first = ctx.claim(&key, "s0", &snap).await.expect("first login");
    assert_eq!(first, 1);
    for round in 1..=40 {
        snap = ctx.read(&key).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let release = {
            let (ctx, key, barrier) = (ctx.clone(), key.clone(), barrier.clone());
            let generation = snap.generation;
            tokio::spawn(async move {
                barrier.wait().await;
                ctx.release(&key, generation).await
            })
        };
        let claim = {
            let (ctx, key, snap, barrier) = (ctx.clone(), key.clone(), snap.clone(), barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                ctx.claim(&key, &format!("s{round}"), &snap).await
            })
        };
        let released = release.await.expect("release task");
        let claim = claim.await.expect("claim task");
        let now = ctx.read(&key).await;
        match (released, claim) {
            (true, Err(e)) if e.is_lost_race() => {
                assert_eq!(now, tombstoned(expected), "round {round}: release won");
                // Reopen the key from the tombstone for the next round.
                expected += 1;
                let reopened = ctx.claim(&key, &format!("r{round}"), &now).await;
                assert_eq!(reopened.ok(), Some(expected), "round {round}: reopen");
            }
            (false, Ok(generation)) => {
                expected += 1;
                assert_eq!(generation, expected, "round {round}: claim won");
                assert_eq!(now, claimed(expected, &format!("s{round}")));
            }
            other => {
                panic!("round {round}: claim and release must not both take effect: {other:?}")
            }
        }
    }
}

/// C1/I2/I3: eight tasks loop read → claim → sometimes release their own gen on
/// one key. Every winning gen is distinct, together they are exactly
/// `1..=final gen` (each win advanced the gen by one), and the record belongs
/// to the last winner (or is its tombstone).
pub async fn interleaved_claims_and_releases(subject: Subject) {
    let ctx = Ctx::new(subject, "linearizability::interleaved_claims_and_releases");
    let key = ctx.key(1);
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (ctx, key) = (ctx.clone(), key.clone());
            tokio::spawn(async move {
                let mut won = Vec::new();
                for i in 0..40 {
                    let snap = ctx.read(&key).await;
                    let claim_id = format!("t{t}-{i}");
                    match ctx.claim(&key, &claim_id, &snap).await {
                        Ok(generation) => {
                            won.push((generation, claim_id));
                            if i % 2 == 0 {
                                ctx.release(&key, generation).await;
                            }
                        }
                        Err(e) => assert!(e.is_lost_race(), "only races may fail: {e:?}"),
                    }
                    tokio::task::yield_now().await;
                }
                won
            })
        })
        .collect();
    let mut wins = Vec::new();
    for task in tasks {
        wins.extend(task.await.expect("claimer task"));
    }
    let gens: BTreeSet<i64> = wins.iter().map(|(g, _)| *g).collect();
    assert_eq!(
        gens.len(),
        wins.len(),
        "two claims won the same gen: {wins:?}"
    );
    let last = ctx.read(&key).await;
    assert_eq!(
        gens,
        (1..=last.generation).collect(),
        "winning gens must be exactly 1..=final gen"
    );
    let (_, last_claim) = wins.iter().max().expect("someone won");
    assert_eq!(last.generation, *gens.last().expect("non-empty"));
    assert!(
        last.claim_id.as_deref() == Some(last_claim.as_str()) || last.claim_id.is_none(),
        "the record must be the last winner's session or its tombstone: {last:?}"
    );
}

/// C1 (no global lock): first logins on 16 different keys at once all succeed;
/// a race on one key never fails a claim on another.
pub async fn independent_keys_do_not_interfere(subject: Subject) {
    let ctx = Ctx::new(
        subject,
        "linearizability::independent_keys_do_not_interfere",
    );
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    let tasks: Vec<_> = (1..=16)
        .map(|uid| {
            let (ctx, barrier) = (ctx.clone(), barrier.clone());
            tokio::spawn(async move {
                let key = ctx.key(uid);
                let snap = ctx.read(&key).await;
                barrier.wait().await;
                ctx.claim(&key, &format!("u{uid}"), &snap).await
            })
        })
        .collect();
    for (uid, task) in (1..=16).zip(tasks) {
        let result = task.await.expect("claim task");
        assert_eq!(result.ok(), Some(1), "uid {uid}");
        assert_eq!(
            ctx.read(&ctx.key(uid)).await,
            claimed(1, &format!("u{uid}"))
        );
    }
}

/// Tenant isolation: the same uid under different `(project, env)` pairs is
/// a different key, including pairs whose plain concatenation is equal
/// (`"{p}xy" + "{e}"` and `"{p}x" + "y{e}"`): claims, releases and raw writes
/// on one never show on another.
pub async fn tenants_are_isolated(subject: Subject) {
    let ctx = Ctx::new(subject, "linearizability::tenants_are_isolated");
    let base = ctx.key(7);
    let keys = [
        Key::new(format!("{}xy", base.project), base.env.clone(), 7),
        Key::new(format!("{}x", base.project), format!("y{}", base.env), 7),
        Key::new(base.project.clone(), format!("{}-staging", base.env), 7),
        base,
    ];
    for (i, key) in keys.iter().enumerate() {
        let snap = ctx.read(key).await;
        assert!(!snap.exists, "key {i} saw another tenant's record");
        assert_eq!(
            ctx.claim(key, &format!("k{i}"), &snap).await.ok(),
            Some(1),
            "key {i}"
        );
    }
    assert!(ctx.release(&keys[0], 1).await);
    ctx.put(&keys[1], 40, Some("{"), Some("z")).await;
    assert_eq!(ctx.read(&keys[0]).await, tombstoned(1));
    assert!(ctx.read(&keys[1]).await.owner_corrupt);
    for (i, key) in keys.iter().enumerate().skip(2) {
        assert_eq!(ctx.read(key).await, claimed(1, &format!("k{i}")), "key {i}");
    }
}

/// C1: every condition sees the latest committed write: snapshots taken before
/// each of a chain of claims are all refused afterwards.
pub async fn conditions_see_latest_write(subject: Subject) {
    let ctx = Ctx::new(subject, "linearizability::conditions_see_latest_write");
    let key = ctx.key(1);
    let mut stale = vec![ctx.read(&key).await];
    for generation in 1..=5 {
        let snap = ctx.read(&key).await;
        assert_eq!(
            ctx.claim(&key, &format!("c{generation}"), &snap).await.ok(),
            Some(generation)
        );
        stale.push(ctx.read(&key).await);
    }
    let before = ctx.read(&key).await;
    stale.pop();
    for snap in &stale {
        let result = ctx.claim(&key, "late", snap).await;
        ctx.assert_refused(
            &key,
            result,
            &before,
            &format!("stale snapshot at gen {}", snap.generation),
        )
        .await;
    }
}
