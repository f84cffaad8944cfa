//! C4 atomic increment: one write of gen + 1, owner and cid; the written gen returned.

use std::collections::BTreeSet;

use crate::Subject;
use unique_core::OwnerState;

use crate::check::violated;
use crate::support::{Ctx, NotWritten, form, join, owner_for};

/// C4: a first login writes gen 1, the owner and the cid.
pub async fn first_login_writes_gen_one(subject: Subject) {
    let ctx = Ctx::new(subject, "atomic_increment::first_login_writes_gen_one");
    let key = ctx.key(1);
    let snap = ctx.read(&key).await;
    ensure_eq!(
        snap,
        OwnerState::absent(),
        "C2",
        "a key never written reads as absent"
    );
    ctx.win(&key, "first", &snap, 1).await;
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
                            ensure_eq!(
                                generation,
                                expected,
                                "C4",
                                "a claim returns the gen it wrote, not a re-read",
                                "claim t{t}-{i} {}",
                                form(&snap)
                            );
                            won.push(generation);
                        }
                        Err(NotWritten::Failed(e)) => violated(
                            "C8",
                            "a claim that loses a race reports a lost race, not an error",
                            format_args!("claim t{t}-{i} failed with {e}"),
                        ),
                        Err(NotWritten::LostRace(_)) => {}
                    }
                }
                won
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(join(task).await);
    }
    let distinct: BTreeSet<_> = all.iter().copied().collect();
    ensure!(
        distinct.len() == all.len(),
        "C4",
        "at most one of concurrent claims on a key wins each gen",
        "a gen was won twice: {all:?}"
    );
    ensure_eq!(
        Some(ctx.read(&key).await.generation),
        distinct.last().copied(),
        "C4",
        "the stored gen is the last gen won"
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
                    ensure!(
                        cid.starts_with(&format!("g{}-", seen.generation)),
                        "C4",
                        "gen, owner and cid are written in one atomic write",
                        "gen {} stored with cid {cid} of another claim",
                        seen.generation
                    );
                    ensure_eq!(
                        seen.owner,
                        Some(owner_for(cid)),
                        "C4",
                        "gen, owner and cid are written in one atomic write",
                        "owner torn from cid {cid}"
                    );
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
        join(writer).await;
    }
    // The reader may have ended in a violation already: `join` reports it.
    let _ = done_tx.send(true);
    join(reader).await;
    let last = ctx.read(&key).await;
    ensure!(
        last.claim_id
            .as_deref()
            .is_some_and(|cid| cid.starts_with(&format!("g{}-", last.generation))),
        "C4",
        "gen, owner and cid are written in one atomic write",
        "the last record is {last:?}"
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
        ensure!(
            matches!(&result, Err(e) if e.error().is_some_and(unique_core::Error::is_unavailable)),
            "C4",
            "a claim whose next gen would reach i64::MAX is refused with Unavailable",
            "claim {}: got {result:?}",
            form(snap)
        );
        ensure_eq!(
            ctx.read(&key).await,
            *snap,
            "C4",
            "a claim refused for an exhausted gen writes nothing"
        );
    }
}

/// C4: the last usable gen, `i64::MAX - 1`, can still be written.
pub async fn gen_below_max_claimable(subject: Subject) {
    let ctx = Ctx::new(subject, "atomic_increment::gen_below_max_claimable");
    let key = ctx.key(1);
    let snap = ctx.session(&key, i64::MAX - 2, "old").await;
    ctx.win(&key, "last", &snap, i64::MAX - 1).await;
}
