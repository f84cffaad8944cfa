//! C4 atomic increment: one write of gen + 1, owner and cid; the written gen returned.

use std::collections::BTreeSet;

use crate::Subject;
use crate::support::{Ctx, claimed, owner_for};

/// C4: a first login writes gen 1, the owner and the cid.
pub async fn first_login_writes_gen_one(subject: Subject) {
    let ctx = Ctx::new(subject, "atomic_increment::first_login_writes_gen_one");
    let key = ctx.key(1);
    let snap = ctx.read(&key).await;
    assert!(!snap.exists);
    assert_eq!(ctx.claim(&key, "first", &snap).await.ok(), Some(1));
    assert_eq!(ctx.read(&key).await, claimed(1, "first"));
}

/// C4 (trap: returning a re-read gen): eight tasks keep claiming one key; every
/// successful claim returns exactly its snapshot's gen + 1, even though other
/// tasks write right after it (a store that reads the gen back after writing
/// would sometimes return theirs). Winning gens are distinct.
pub async fn returned_gen_is_written_gen(subject: Subject) {
    let ctx = Ctx::new(subject, "atomic_increment::returned_gen_is_written_gen");
    let key = ctx.key(1);
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (ctx, key) = (ctx.clone(), key.clone());
            tokio::spawn(async move {
                let mut won = Vec::new();
                for i in 0..30 {
                    let snap = ctx.read(&key).await;
                    let expected = if snap.exists { snap.generation + 1 } else { 1 };
                    match ctx.claim(&key, &format!("t{t}-{i}"), &snap).await {
                        Ok(generation) => {
                            assert_eq!(generation, expected, "claim returned another gen");
                            won.push(generation);
                        }
                        Err(e) => assert!(e.is_lost_race(), "{e:?}"),
                    }
                }
                won
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("claimer task"));
    }
    let distinct: BTreeSet<_> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "a gen was won twice");
    assert_eq!(
        ctx.read(&key).await.generation,
        *distinct.last().expect("someone won")
    );
}

/// C4: gen, owner and cid change together: while four tasks race claims whose
/// cid and owner name the gen they would write, a reader never sees a gen with
/// another claim's cid or owner.
pub async fn no_torn_writes(subject: Subject) {
    let ctx = Ctx::new(subject, "atomic_increment::no_torn_writes");
    let key = ctx.key(1);
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let reader = {
        let (ctx, key) = (ctx.clone(), key.clone());
        tokio::spawn(async move {
            let mut checked = 0_u32;
            while !*done_rx.borrow() {
                let seen = ctx.read(&key).await;
                if let Some(cid) = &seen.claim_id {
                    assert!(
                        cid.starts_with(&format!("g{}-", seen.generation)),
                        "gen {} stored with cid {cid} of another claim",
                        seen.generation
                    );
                    assert_eq!(seen.owner, Some(owner_for(cid)), "owner torn from cid");
                    checked += 1;
                }
                tokio::task::yield_now().await;
            }
            checked
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let (ctx, key) = (ctx.clone(), key.clone());
            tokio::spawn(async move {
                for i in 0..40 {
                    let snap = ctx.read(&key).await;
                    let next = snap.generation + 1;
                    let _ = ctx.claim(&key, &format!("g{next}-t{t}-{i}"), &snap).await;
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer task");
    }
    done_tx.send(true).expect("reader alive");
    reader.await.expect("reader task");
    let last = ctx.read(&key).await;
    assert!(
        last.claim_id
            .expect("a claim won")
            .starts_with(&format!("g{}-", last.generation))
    );
}

/// C4: a claim whose snapshot gen + 1 would reach `i64::MAX` is refused with
/// `Unavailable` and writes nothing (double-pin and tombstone forms, and a
/// record already at `i64::MAX`).
pub async fn gen_exhausted_refused(subject: Subject) {
    let ctx = Ctx::new(subject, "atomic_increment::gen_exhausted_refused");
    let cases = [
        ctx.session(&ctx.key(1), i64::MAX - 1, "old").await,
        ctx.tombstone(&ctx.key(2), i64::MAX - 1).await,
        ctx.session(&ctx.key(3), i64::MAX, "old").await,
    ];
    for (uid, snap) in (1..).zip(&cases) {
        let key = ctx.key(uid);
        let result = ctx.claim(&key, "new", snap).await;
        assert!(
            matches!(&result, Err(e) if e.error().is_some_and(unique_core::Error::is_unavailable)),
            "gen {} must be refused with Unavailable, got {result:?}",
            snap.generation
        );
        assert_eq!(
            ctx.read(&key).await,
            *snap,
            "a refused claim must write nothing"
        );
    }
}

/// C4: the last usable gen, `i64::MAX - 1`, can still be written.
pub async fn gen_below_max_claimable(subject: Subject) {
    let ctx = Ctx::new(subject, "atomic_increment::gen_below_max_claimable");
    let key = ctx.key(1);
    let snap = ctx.session(&key, i64::MAX - 2, "old").await;
    assert_eq!(
        ctx.claim(&key, "last", &snap).await.ok(),
        Some(i64::MAX - 1)
    );
    assert_eq!(ctx.read(&key).await, claimed(i64::MAX - 1, "last"));
}
