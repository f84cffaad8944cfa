//! C11 write-first claim: `claim_vacant` claims a vacant record in one conditional write,
//! exactly as `claim_cas` from that record would, and writes nothing over any other record.
//!
//! Each case asks the store which vacancies it writes ([`Store::vacant_claims`]). A store
//! that does not write first must answer `Unread` and write nothing; an in-tree store's own
//! test target asserts that it does write first, so none of these cases passes by skipping.

use std::sync::Arc;

use unique_core::{Error, Key, OwnerState, Store, VacantClaim, VacantClaims};

use crate::Subject;
use crate::check::violated;
use crate::model::RecordModel;
use crate::support::{Ctx, join, owner_for, owner_json};

/// The store's answer, an error failing the case (a healthy store answers).
async fn vacant(ctx: &Ctx, key: &Key, claim_id: &str) -> VacantClaim {
    match ctx
        .store
        .claim_vacant(key, &owner_for(claim_id), claim_id)
        .await
    {
        Ok(answer) => answer,
        Err(e) => violated(
            "C11",
            "claim_vacant answers on a healthy store, written or not",
            format_args!("claim_vacant({key}, {claim_id}) failed: {e}"),
        ),
    }
}

/// Whether the store writes over `before`: absent records for every supporting store,
/// tombstones only for `AbsentAndTombstones`.
fn writes_over(support: VacantClaims, before: &OwnerState) -> bool {
    match support {
        VacantClaims::Unsupported => false,
        VacantClaims::AbsentOnly => !before.exists,
        VacantClaims::AbsentAndTombstones => true,
    }
}

/// A vacant write by `claim_id` on `key`, whose record read `before`: when the store writes
/// over such a record it must answer the gen the model writes and leave exactly the
/// model's record (C11 by way of C4 and C9); otherwise it must write nothing (see
/// [`not_written`]).
async fn ensure_vacant_claim(ctx: &Ctx, key: &Key, claim_id: &str, before: &OwnerState) {
    let support = ctx.store.vacant_claims();
    let answer = vacant(ctx, key, claim_id).await;
    if !writes_over(support, before) {
        return not_written(ctx, key, claim_id, before, answer).await;
    }
    let mut model = RecordModel::from_state(before.clone());
    let Some(expected) = model.claim_vacant(&owner_for(claim_id), claim_id) else {
        violated(
            "C11",
            "the case's record is vacant",
            format_args!("the store reads {before:?}, which no vacant write may take"),
        );
    };
    ensure_eq!(
        answer,
        VacantClaim::Written {
            generation: expected
        },
        "C11",
        "a vacant record is claimed in the one write, at the gen claim_cas would write",
        "claim_vacant({claim_id}) from {before:?}"
    );
    let after = ctx.read_all(key).await;
    if after == *before {
        violated(
            "C2",
            "read_owner returns the latest committed write",
            format_args!(
                "claim_vacant({claim_id}) answered {answer:?}, the read still shows {before:?}"
            ),
        );
    }
    ensure_eq!(
        &after,
        model.state(),
        "C11",
        "a vacant write is exactly the claim claim_cas makes: gen, owner, cid and won",
        "claim_vacant({claim_id}) from {before:?}"
    );
}

/// `answer` wrote nothing over `before`: it is `Occupied` with exactly that record, or
/// `Unread`, and the record is unchanged.
async fn not_written(
    ctx: &Ctx,
    key: &Key,
    claim_id: &str,
    before: &OwnerState,
    answer: VacantClaim,
) {
    let after = ctx.read_all(key).await;
    ensure_eq!(
        &after,
        before,
        "C11",
        "claim_vacant writes nothing over a record that is not vacant (or not a vacancy the store writes)",
        "claim_vacant({claim_id}) answered {answer:?}"
    );
    match answer {
        VacantClaim::Unread => {}
        VacantClaim::Occupied(state) => ensure_eq!(
            &state,
            before,
            "C11",
            "a failed vacant write hands back the record it failed on",
            "claim_vacant({claim_id})"
        ),
        VacantClaim::Written { generation } => violated(
            "C11",
            "claim_vacant writes nothing over a record that is not vacant",
            format_args!(
                "claim_vacant({claim_id}) answered Written at gen {generation} over {before:?}"
            ),
        ),
    }
}

/// C11: a store that does not write first answers `Unread` and writes nothing.
pub async fn unsupported_sends_nothing(subject: Subject) {
    let ctx = Ctx::new(subject, "vacant_claims::unsupported_sends_nothing");
    if ctx.store.vacant_claims() != VacantClaims::Unsupported {
        return;
    }
    let key = ctx.key(1);
    let answer = vacant(&ctx, &key, "c").await;
    ensure_eq!(
        answer,
        VacantClaim::Unread,
        "C11",
        "a store that does not write first answers Unread"
    );
    ctx.unwritten(&key).await;
}

/// C11: an absent record, and one stored at gen 0 (whatever its `won`), are claimed at
/// gen 1 with a list of this one win.
pub async fn absent_record_claimed_at_gen_1(subject: Subject) {
    let ctx = Ctx::new(subject, "vacant_claims::absent_record_claimed_at_gen_1");
    let key = ctx.key(1);
    let before = ctx.unwritten(&key).await;
    ensure_vacant_claim(&ctx, &key, "first", &before).await;
    let gen0 = ctx.key(2);
    let owner = owner_json("ghost");
    ctx.put_with_won(
        &gen0,
        0,
        Some(&owner),
        Some("ghost"),
        Some(r#"[["ghost",7]]"#),
    )
    .await;
    let before = ctx.read_all(&gen0).await;
    ensure_vacant_claim(&ctx, &gen0, "ghost", &before).await;
}

/// C11: a tombstone is claimed at its gen + 1, its recent claims followed by this win,
/// the oldest dropped beyond the limit, whatever text the claim_ids hold.
pub async fn tombstone_claimed_at_next_gen(subject: Subject) {
    let ctx = Ctx::new(subject, "vacant_claims::tombstone_claimed_at_next_gen");
    let odd = [
        "plain",
        r#"q"uote"#,
        r"back\slash",
        "tab\there",
        "ü-ñ-☃",
        r#"],["x",1]"#,
        "x[",
        "/slash",
    ];
    let key = ctx.key(1);
    for claim_id in odd {
        let before = ctx.read_all(&key).await;
        // Each round needs a vacant record: the previous round's session is released
        // (claim_cas when the store writes over absent records only).
        if before.exists && before.owner.is_some() {
            ctx.release_keeps_gen(&key, before.generation).await;
        }
        let before = ctx.read_all(&key).await;
        ensure_vacant_claim(&ctx, &key, claim_id, &before).await;
        if !writes_over(ctx.store.vacant_claims(), &before) {
            // Make progress through the fenced CAS, so the next round has a list to keep.
            let snap = ctx.read_all(&key).await;
            if ctx.claim(&key, claim_id, &snap).await.is_err() {
                violated(
                    "C3",
                    "an uncontended claim from a full snapshot wins",
                    format_args!("claim {claim_id} from {snap:?}"),
                );
            }
        }
    }
    // Past the limit: a tombstone holding a full list drops its oldest win.
    let full = ctx.key(2);
    let wins: Vec<String> = (1..=8).map(|g| format!(r#"["w{g}",{g}]"#)).collect();
    let won = format!("[{}]", wins.join(","));
    ctx.put_with_won(&full, 8, Some(""), None, Some(&won)).await;
    let before = ctx.read_all(&full).await;
    ensure_vacant_claim(&ctx, &full, "ninth", &before).await;
    // The last gen below i64::MAX is still claimable.
    let high = ctx.key(3);
    ctx.put_with_won(&high, i64::MAX - 2, Some(""), None, None)
        .await;
    let before = ctx.read_all(&high).await;
    ensure_vacant_claim(&ctx, &high, "last", &before).await;
}

/// C11: an online session (another login's or this claim_id's own) is not vacant: nothing
/// is written, and the answer hands back the record (or nothing).
pub async fn online_session_not_written(subject: Subject) {
    let ctx = Ctx::new(subject, "vacant_claims::online_session_not_written");
    let key = ctx.key(1);
    ctx.session(&key, 3, "online").await;
    for claim_id in ["newcomer", "online"] {
        let before = ctx.read_all(&key).await;
        let answer = vacant(&ctx, &key, claim_id).await;
        not_written(&ctx, &key, claim_id, &before, answer).await;
    }
}

/// C11: a tombstone whose recent claims hold this claim_id is not vacant (the claim is
/// superseded, C9): nothing is written.
pub async fn superseded_claim_id_not_written(subject: Subject) {
    let ctx = Ctx::new(subject, "vacant_claims::superseded_claim_id_not_written");
    let key = ctx.key(1);
    ctx.put_with_won(&key, 5, Some(""), None, Some(r#"[["old",4],["late",5]]"#))
        .await;
    for claim_id in ["old", "late"] {
        let before = ctx.read_all(&key).await;
        let answer = vacant(&ctx, &key, claim_id).await;
        not_written(&ctx, &key, claim_id, &before, answer).await;
    }
}

/// C11: a login that won and was logged out cannot take the tombstone again with its
/// claim_id (C9), however it won (vacant write or fenced claim).
pub async fn logged_out_claim_id_not_written(subject: Subject) {
    let ctx = Ctx::new(subject, "vacant_claims::logged_out_claim_id_not_written");
    for (uid, vacant_first) in [(1, true), (2, false)] {
        let key = ctx.key(uid);
        let absent = ctx.unwritten(&key).await;
        if vacant_first {
            ensure_vacant_claim(&ctx, &key, "gone", &absent).await;
        }
        if ctx.read_all(&key).await.owner.is_none()
            && ctx.claim(&key, "gone", &absent).await.is_err()
        {
            violated(
                "C3",
                "an uncontended first login wins",
                format_args!("claim gone on {key}"),
            );
        }
        ctx.release_keeps_gen(&key, 1).await;
        let before = ctx.read_all(&key).await;
        let answer = vacant(&ctx, &key, "gone").await;
        not_written(&ctx, &key, "gone", &before, answer).await;
    }
}

/// C11: the records a claim must replace through the double pin or a kick are not vacant:
/// an owner without a cid, an empty owner with a cid, a corrupt owner, and a tombstone
/// whose next gen would reach `i64::MAX` (C4).
pub async fn other_records_not_written(subject: Subject) {
    let ctx = Ctx::new(subject, "vacant_claims::other_records_not_written");
    let owner = owner_json("legacy");
    let records: [(i64, Option<&str>, Option<&str>); 5] = [
        (4, Some(&owner), None),
        (4, Some(""), Some("")),
        (4, Some(""), Some("kept")),
        (4, Some("{corrupt"), Some("c")),
        (i64::MAX - 1, Some(""), None),
    ];
    for (uid, (generation, stored_owner, cid)) in (1..).zip(records) {
        let key = ctx.key(uid);
        ctx.put(&key, generation, stored_owner, cid).await;
        let before = ctx.read_all(&key).await;
        let answer = vacant(&ctx, &key, "newcomer").await;
        not_written(&ctx, &key, "newcomer", &before, answer).await;
    }
}

/// C11: an owner without an endpoint is refused with `InvalidParams` before any write (C8).
pub async fn owner_without_endpoint_refused(subject: Subject) {
    let ctx = Ctx::new(subject, "vacant_claims::owner_without_endpoint_refused");
    if ctx.store.vacant_claims() == VacantClaims::Unsupported {
        return;
    }
    let key = ctx.key(1);
    let mut owner = owner_for("c");
    owner.endpoint.clear();
    let answer = ctx.store.claim_vacant(&key, &owner, "c").await;
    ensure!(
        matches!(answer, Err(Error::InvalidParams(_))),
        "C8",
        "an owner without an endpoint is refused with InvalidParams",
        "claim_vacant answered {answer:?}"
    );
    ctx.unwritten(&key).await;
}

/// C11 with C1: vacant writes racing fenced claims from the same vacant record (absent,
/// then a tombstone): exactly one writes, at the next gen, and the record is the winner's.
pub async fn races_with_fenced_claims_one_winner(subject: Subject) {
    let ctx = Ctx::new(
        subject,
        "vacant_claims::races_with_fenced_claims_one_winner",
    );
    let key = ctx.key(1);
    for (expected, round) in (1..).zip(0..3) {
        let snap = ctx.read_all(&key).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (ctx, key, snap, barrier) =
                    (ctx.clone(), key.clone(), snap.clone(), barrier.clone());
                let claim_id = format!("r{round}-{i}");
                tokio::spawn(async move {
                    barrier.wait().await;
                    let won = if i % 2 == 0 {
                        match vacant(&ctx, &key, &claim_id).await {
                            VacantClaim::Written { generation } => Some(generation),
                            VacantClaim::Occupied(_) | VacantClaim::Unread => None,
                        }
                    } else {
                        ctx.claim(&key, &claim_id, &snap).await.ok()
                    };
                    (claim_id, won)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            let (claim_id, won) = join(task).await;
            if let Some(generation) = won {
                winners.push((claim_id, generation));
            }
        }
        ensure!(
            winners.len() == 1,
            "C1",
            "of concurrent claims of one vacant record exactly one writes (I3)",
            "round {round}: {winners:?} won"
        );
        let (winner, generation) = &winners[0];
        ensure_eq!(
            *generation,
            expected,
            "C4",
            "the winner writes the next gen",
            "round {round}"
        );
        let after = ctx.read(&key).await;
        ensure_eq!(
            (after.generation, after.claim_id.as_deref()),
            (expected, Some(winner.as_str())),
            "C4",
            "the record is the winner's",
            "round {round}"
        );
        ensure!(
            ctx.release(&key, expected).await,
            "C5",
            "a release at the stored gen must answer true",
            "round {round}"
        );
    }
}
