//! C2 for batch reads: `read_owners` answers what `read_owner` answers, key by key, in one
//! call (what a node's batched heartbeat relies on).

use unique_core::{Key, MAX_BATCH_KEYS, OwnerState};

use crate::Subject;
use crate::support::{Ctx, claimed, owner_json, tombstoned, without_recent_claims};

/// `read_owners(keys)`, each record decoded (any error fails the case).
async fn read_batch(ctx: &Ctx, keys: &[Key]) -> Vec<OwnerState> {
    let states = ctx.store.read_owners(keys).await.unwrap_or_else(|e| {
        crate::check::violated(
            "C2",
            "an uncontended batch read must succeed",
            format_args!("read_owners of {} keys failed: {e}", keys.len()),
        )
    });
    ensure_eq!(
        states.len(),
        keys.len(),
        "C2",
        "a batch read answers once per key, in request order"
    );
    states
        .into_iter()
        .zip(keys)
        .map(|(state, key)| {
            state.unwrap_or_else(|e| {
                crate::check::violated(
                    "C7",
                    "a batch read decodes each record as read_owner does",
                    format_args!("{key}: {e}"),
                )
            })
        })
        .collect()
}

/// C2, C6, C7, records: one batch over an absent key, a session, a tombstone, gen-0 records,
/// a corrupt owner, an empty cid, a key of another tenant and keys given twice answers, at
/// each position, exactly what `read_owner` answers for that key.
pub async fn batch_agrees_with_single_reads(subject: Subject) {
    let ctx = Ctx::new(
        subject.clone(),
        "batch_reads::batch_agrees_with_single_reads",
    );
    let other = Ctx::new(subject, "batch_reads::batch_agrees_other_tenant");
    let session = owner_json("s");
    let records: [(i64, Option<&str>, Option<&str>); 7] = [
        (3, Some(&session), Some("s")),
        (4, Some(""), None),
        (0, Some(&session), Some("old")),
        (0, None, None),
        (5, Some("{"), Some("c")),
        (6, Some(&session), Some("")),
        (7, None, None),
    ];
    let mut keys = vec![ctx.key(1)];
    for (uid, (generation, owner, cid)) in (2..).zip(records) {
        let key = ctx.key(uid);
        ctx.put(&key, generation, owner, cid).await;
        keys.push(key);
    }
    let foreign = other.key(2);
    other
        .put(&foreign, 9, Some(&owner_json("f")), Some("f"))
        .await;
    keys.push(foreign);
    keys.push(ctx.key(2));
    keys.push(ctx.key(1));
    let batch = read_batch(&ctx, &keys).await;
    for (key, state) in keys.iter().zip(&batch) {
        ensure_eq!(
            *state,
            ctx.read_all(key).await,
            "C2",
            "a batch read answers what read_owner answers",
            "{key}"
        );
    }
    ensure_eq!(
        batch[0],
        OwnerState::absent(),
        "C2",
        "a batch read sees an absent key as absent"
    );
    ensure_eq!(
        batch[1],
        claimed(3, "s"),
        "C2",
        "a batch read sees the session"
    );
    ensure_eq!(
        batch[2],
        tombstoned(4),
        "C2",
        "a batch read sees the tombstone"
    );
    ensure_eq!(
        (batch[3].exists, batch[4].exists),
        (false, false),
        "Records",
        "a gen-0 record reads as absent"
    );
    ensure!(
        batch[5].owner_corrupt,
        "C7",
        "a corrupt owner reads as corrupt, not as an error",
        "{:?}",
        batch[5]
    );
    ensure_eq!(
        batch[6].claim_id.as_deref(),
        Some(""),
        "C6",
        "an empty cid reads as Some(\"\"), not as absent"
    );
    ensure_eq!(
        batch[8],
        claimed(9, "f"),
        "C2",
        "a batch read sees another tenant's key"
    );
    ensure_eq!(
        (&batch[9], &batch[10]),
        (&batch[1], &batch[0]),
        "C2",
        "a key given twice is answered twice"
    );
}

/// C2 (trap: eventual read): 20 times, claims and a release committed on other tasks are
/// seen by the next batch read at once.
pub async fn batch_sees_committed_writes(subject: Subject) {
    let ctx = Ctx::new(subject, "batch_reads::batch_sees_committed_writes");
    let keys: Vec<Key> = (1..=5).map(|uid| ctx.key(uid)).collect();
    for generation in 1..=20 {
        let writers: Vec<_> = keys
            .iter()
            .map(|key| {
                let (ctx, key) = (ctx.clone(), key.clone());
                tokio::spawn(async move {
                    let snap = ctx.read(&key).await;
                    ctx.claim(&key, &format!("w{generation}"), &snap).await
                })
            })
            .collect();
        for writer in writers {
            ensure_eq!(
                writer.await.expect("writer").ok(),
                Some(generation),
                "C1",
                "an uncontended claim wins the next gen"
            );
        }
        let batch = read_batch(&ctx, &keys).await;
        for state in &batch {
            ensure_eq!(
                without_recent_claims(state.clone()),
                claimed(generation, &format!("w{generation}")),
                "C2",
                "a batch read sees every committed claim at once"
            );
        }
    }
    ctx.release_keeps_gen(&keys[2], 20).await;
    ensure_eq!(
        without_recent_claims(read_batch(&ctx, &keys).await.swap_remove(2)),
        tombstoned(20),
        "C2",
        "a batch read sees a committed release at once"
    );
}

/// A batch of `MAX_BATCH_KEYS` keys answers every key in order; an empty batch answers nothing.
pub async fn full_and_empty_batches(subject: Subject) {
    let ctx = Ctx::new(subject, "batch_reads::full_and_empty_batches");
    let max = i64::try_from(MAX_BATCH_KEYS).expect("small");
    let keys: Vec<Key> = (1..=max).rev().map(|uid| ctx.key(uid)).collect();
    for uid in (1..=max).filter(|uid| uid % 3 == 0) {
        ctx.session(&ctx.key(uid), uid, &format!("c{uid}")).await;
    }
    let batch = read_batch(&ctx, &keys).await;
    for (key, state) in keys.iter().zip(&batch) {
        let expected = if key.uid % 3 == 0 {
            claimed(key.uid, &format!("c{}", key.uid))
        } else {
            OwnerState::absent()
        };
        ensure_eq!(
            *state,
            expected,
            "C2",
            "a full batch answers every key in order",
            "{key}"
        );
    }
    let empty = read_batch(&ctx, &[]).await;
    ensure!(
        empty.is_empty(),
        "C2",
        "an empty batch answers nothing",
        "{} answers",
        empty.len()
    );
}
