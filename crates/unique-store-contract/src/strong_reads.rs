//! C2 strongly consistent reads (trap: an eventually consistent read).

use crate::Subject;
use crate::support::{Ctx, claimed, join, owner_for};

/// C2 (trap: eventual read): 60 times, a claim committed on one task is read
/// at once on another task (by `read_owner` and by `current`) with its gen.
pub async fn read_sees_committed_claim(subject: Subject) {
    let ctx = Ctx::new(subject, "strong_reads::read_sees_committed_claim");
    let key = ctx.key(1);
    for generation in 1..=60 {
        let claim_id = format!("w{generation}");
        let writer = {
            let (ctx, key, claim_id) = (ctx.clone(), key.clone(), claim_id.clone());
            tokio::spawn(async move {
                let snap = ctx.read(&key).await;
                let written = ctx.claim(&key, &claim_id, &snap).await;
                (snap, written)
            })
        };
        let (snap, written) = join(writer).await;
        if written.as_ref().ok() != Some(&generation) {
            ctx.ensure_won(&key, &claim_id, &snap, written, generation)
                .await;
        }
        let reader = {
            let (ctx, key) = (ctx.clone(), key.clone());
            tokio::spawn(async move { (ctx.read(&key).await, ctx.current_ok(&key).await) })
        };
        let (state, current) = join(reader).await;
        ensure_eq!(
            state,
            claimed(generation, &claim_id),
            "C2",
            "read_owner sees the latest committed write at once",
            "read after claim {claim_id} committed"
        );
        ensure_eq!(
            (current.generation, current.owner),
            (generation, Some(owner_for(&claim_id))),
            "C2",
            "current sees the latest committed write at once",
            "current after claim {claim_id} committed"
        );
    }
}

/// C2: a record written through the other handle (the raw hook) is visible to
/// the next read, including one that moves the gen backwards.
pub async fn read_sees_raw_write(subject: Subject) {
    let ctx = Ctx::new(subject, "strong_reads::read_sees_raw_write");
    let key = ctx.key(1);
    for generation in [5, 9, 3, 1_000_000, 2] {
        ctx.tombstone(&key, generation).await;
        let current = ctx.current_ok(&key).await;
        ensure_eq!(
            (current.generation, current.exists),
            (generation, true),
            "C2",
            "current sees the latest committed write at once",
            "after a raw tombstone at gen {generation}"
        );
    }
}

/// C2: `current` agrees with `read_owner` on absent, online and tombstoned records.
pub async fn current_agrees_with_read_owner(subject: Subject) {
    let ctx = Ctx::new(subject, "strong_reads::current_agrees_with_read_owner");
    let key = ctx.key(1);
    let absent = ctx.current_ok(&key).await;
    ensure_eq!(
        (absent.exists, absent.generation, absent.owner),
        (false, 0, None),
        "C2",
        "current agrees with read_owner",
        "key without record"
    );
    let snap = ctx.read(&key).await;
    ctx.win(&key, "a", &snap, 1).await;
    let online = ctx.current_ok(&key).await;
    ensure_eq!(
        (online.exists, online.generation, online.owner),
        (true, 1, Some(owner_for("a"))),
        "C2",
        "current agrees with read_owner",
        "online session"
    );
    ctx.release_keeps_gen(&key, 1).await;
    let released = ctx.current_ok(&key).await;
    ensure_eq!(
        (released.exists, released.generation, released.owner),
        (true, 1, None),
        "C2",
        "current agrees with read_owner",
        "tombstone"
    );
}

/// C1/C2: while one task advances a key through 150 claims, a reader on
/// another task never sees the gen go backwards.
pub async fn reads_never_go_back(subject: Subject) {
    let ctx = Ctx::new(subject, "strong_reads::reads_never_go_back");
    let key = ctx.key(1);
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<()>();
    let reader = {
        let (ctx, key) = (ctx.clone(), key.clone());
        tokio::spawn(async move {
            let mut last = 0;
            let mut reads = 0_u32;
            loop {
                let finished = done_rx.try_recv().is_ok();
                let seen = ctx.read(&key).await.generation;
                ensure!(
                    seen >= last,
                    "C2",
                    "reads never go back to an older write",
                    "read gen {seen} after having read {last}"
                );
                last = seen;
                reads += 1;
                if finished {
                    return (last, reads);
                }
                tokio::task::yield_now().await;
            }
        })
    };
    for generation in 1..=150 {
        let snap = ctx.read(&key).await;
        ctx.win(&key, &format!("w{generation}"), &snap, generation)
            .await;
    }
    // The reader may have ended in a violation already: `join` reports it.
    let _ = done_tx.send(());
    let (last, reads) = join(reader).await;
    ensure_eq!(
        last,
        150,
        "C2",
        "the read after the last claim sees it",
        "after {reads} reads"
    );
}
