//! C1 single-key linearizability: one total order per key, real concurrent races.

use std::collections::BTreeSet;
use std::sync::Arc;

use unique_core::Key;

use crate::Subject;
use crate::check::violated;
use crate::support::{Ctx, NotWritten, assert_one_winner, claimed, join, race_from, tombstoned};

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
    ctx.win(&key, "s0", &snap, 1).await;
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
        let released = join(release).await;
        let claim = join(claim).await;
        match (released, claim) {
            (true, Err(e)) if e.is_lost_race() => {
                // The release won: it must have left the tombstone at its gen.
                ctx.ensure_tombstone(&key, expected).await;
                // Reopen the key from the tombstone for the next round.
                let now = ctx.read(&key).await;
                expected += 1;
                ctx.win(&key, &format!("r{round}"), &now, expected).await;
            }
            (false, Ok(generation)) => {
                expected += 1;
                ensure_eq!(
                    generation,
                    expected,
                    "C4",
                    "a claim writes and returns snap.gen + 1",
                    "round {round}, the claim won"
                );
                ensure_eq!(
                    ctx.read(&key).await,
                    claimed(expected, &format!("s{round}")),
                    "C4",
                    "a claim writes gen, owner and cid together",
                    "round {round}, the claim won"
                );
            }
            (_, Err(NotWritten::Failed(e))) => violated(
                "C8",
                "a claim that loses a race reports a lost race, not an error",
                format_args!("round {round}: the claim failed with {e}"),
            ),
            other => violated(
                "C1",
                "of a claim and a release fenced on one gen exactly one takes effect",
                format_args!("round {round}: (released, claim) = {other:?}"),
            ),
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
                        Err(NotWritten::Failed(e)) => violated(
                            "C8",
                            "a claim that loses a race reports a lost race, not an error",
                            format_args!("claim {claim_id} failed with {e}"),
                        ),
                        Err(NotWritten::LostRace(_)) => {}
                    }
                    tokio::task::yield_now().await;
                }
                won
            })
        })
        .collect();
    let mut wins = Vec::new();
    for task in tasks {
        wins.extend(join(task).await);
    }
    let gens: BTreeSet<i64> = wins.iter().map(|(g, _)| *g).collect();
    ensure!(
        gens.len() == wins.len(),
        "I3",
        "each gen of a key is won by one claim",
        "two claims won the same gen: {wins:?}"
    );
    let last = ctx.read(&key).await;
    ensure_eq!(
        gens,
        (1..=last.generation).collect::<BTreeSet<i64>>(),
        "I2",
        "each win advances the gen by one: the winning gens are exactly 1..=final gen",
        "final gen {}",
        last.generation
    );
    let Some((_, last_claim)) = wins.iter().max() else {
        violated(
            "C1",
            "claims from fresh snapshots win",
            format_args!("none of 320 claims won"),
        )
    };
    ensure!(
        last.claim_id.as_deref() == Some(last_claim.as_str()) || last.claim_id.is_none(),
        "C1",
        "the record is the last winner's session or its tombstone",
        "last winner {last_claim}, record {last:?}"
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
                let result = ctx.claim(&key, &format!("u{uid}"), &snap).await;
                (snap, result)
            })
        })
        .collect();
    // Each key had one claim, so each must have won as if alone.
    for (uid, task) in (1..=16).zip(tasks) {
        let (snap, result) = join(task).await;
        ctx.ensure_won(&ctx.key(uid), &format!("u{uid}"), &snap, result, 1)
            .await;
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
        ensure!(
            !snap.exists,
            "C1",
            "tenants are isolated: the same uid under another (project, env) is another key",
            "key {i} ({key}) saw another tenant's record {snap:?}"
        );
        ctx.win(key, &format!("k{i}"), &snap, 1).await;
    }
    ctx.release_keeps_gen(&keys[0], 1).await;
    ctx.put(&keys[1], 40, Some("{"), Some("z")).await;
    ensure_eq!(
        ctx.read(&keys[0]).await,
        tombstoned(1),
        "C1",
        "tenants are isolated: a raw write on one key shows on no other",
        "key 0 ({})",
        keys[0]
    );
    for (i, key) in keys.iter().enumerate().skip(2) {
        ensure_eq!(
            ctx.read(key).await,
            claimed(1, &format!("k{i}")),
            "C1",
            "tenants are isolated: releases and raw writes on one key show on no other",
            "key {i} ({key})"
        );
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
        ctx.win(&key, &format!("c{generation}"), &snap, generation)
            .await;
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
