//! C2 strongly consistent reads (trap: an eventually consistent read).

use crate::Subject;
use crate::support::{Ctx, claimed, owner_for, tombstoned};

/// C2 (trap: eventual read): 60 times, a claim committed on one task is read
/// at once on another task (by `read_owner` and by `current`) with its gen.
pub async fn read_sees_committed_claim(subject: Subject) {
    let ctx = Ctx::new(subject, "strong_reads::read_sees_committed_claim");
    let key = ctx.key(1);
    for generation in 1..=60 {
        let writer = {
            let (ctx, key) = (ctx.clone(), key.clone());
            tokio::spawn(async move {
                let snap = ctx.read(&key).await;
                ctx.claim(&key, &format!("w{generation}"), &snap).await
            })
        };
        assert_eq!(writer.await.expect("writer").ok(), Some(generation));
        let reader = {
            let (ctx, key) = (ctx.clone(), key.clone());
            tokio::spawn(async move { (ctx.read(&key).await, ctx.current(&key).await) })
        };
        let (state, current) = reader.await.expect("reader");
        assert_eq!(
            state,
            claimed(generation, &format!("w{generation}")),
            "read_owner is stale"
        );
        let current = current.expect("current");
        assert_eq!(current.generation, generation, "current is stale");
        assert_eq!(current.owner, Some(owner_for(&format!("w{generation}"))));
    }
}

/// C2: a record written through the other handle (the raw hook) is visible to
/// the next read, including one that moves the gen backwards.
pub async fn read_sees_raw_write(subject: Subject) {
    let ctx = Ctx::new(subject, "strong_reads::read_sees_raw_write");
    let key = ctx.key(1);
    for generation in [5, 9, 3, 1_000_000, 2] {
        let state = ctx.tombstone(&key, generation).await;
        assert_eq!(state, tombstoned(generation));
        let current = ctx.current(&key).await.expect("current");
        assert_eq!((current.generation, current.exists), (generation, true));
    }
}

/// C2: `current` agrees with `read_owner` on absent, online and tombstoned records.
pub async fn current_agrees_with_read_owner(subject: Subject) {
    let ctx = Ctx::new(subject, "strong_reads::current_agrees_with_read_owner");
    let key = ctx.key(1);
    let absent = ctx.current(&key).await.expect("current of absent key");
    assert_eq!(
        (absent.exists, absent.generation, absent.owner),
        (false, 0, None)
    );
    let snap = ctx.read(&key).await;
    assert_eq!(ctx.claim(&key, "a", &snap).await.ok(), Some(1));
    let online = ctx.current(&key).await.expect("current of session");
    assert_eq!((online.exists, online.generation), (true, 1));
    assert_eq!(online.owner, Some(owner_for("a")));
    assert!(ctx.release(&key, 1).await);
    let released = ctx.current(&key).await.expect("current of tombstone");
    assert_eq!(
        (released.exists, released.generation, released.owner),
        (true, 1, None)
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
                assert!(seen >= last, "read gen {seen} after having read {last}");
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
        assert_eq!(
            ctx.claim(&key, &format!("w{generation}"), &snap).await.ok(),
            Some(generation)
        );
    }
    done_tx.send(()).expect("reader alive");
    let (last, reads) = reader.await.expect("reader task");
    assert_eq!(last, 150, "the read after the last claim must see it");
    assert!(reads > 0);
}
