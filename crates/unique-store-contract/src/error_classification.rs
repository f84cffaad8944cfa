//! C8 error classification: a lost race exactly for failed conditions, nothing
//! written on any refusal, an owner without endpoint refused before any write.

use unique_core::{Owner, OwnerState};

use crate::Subject;
use crate::check::violated;
use crate::support::{Ctx, NotWritten, claimed, form};

/// C8: a failed condition writes nothing, whatever the form and the stored record.
pub async fn failed_condition_writes_nothing(subject: Subject) {
    let ctx = Ctx::new(
        subject,
        "error_classification::failed_condition_writes_nothing",
    );
    let key = ctx.key(1);
    let stale_absent = ctx.read(&key).await;
    let stale_session = ctx.session(&key, 3, "a").await;
    let stale_tombstone = ctx.tombstone(&key, 3).await;
    let current = ctx.session(&key, 4, "b").await;
    for (what, snap) in [
        ("first-login form", &stale_absent),
        ("double-pin form", &stale_session),
        ("tombstone form", &stale_tombstone),
    ] {
        let result = ctx.claim(&key, "late", snap).await;
        ctx.assert_refused(&key, result, &current, what).await;
    }
}

/// C8 (trap: reporting a throttle as a lost race): 100 claims in a row, each
/// from a fresh snapshot and none contended, never lose a race: a lost race
/// never appears without a failed condition. (A store that maps a throttle or
/// a fault to a lost race would have the Arbiter retry a fault as if it were
/// a race.) Every tenth claim is released, so the tombstone form is covered.
pub async fn lost_race_only_on_condition(subject: Subject) {
    let ctx = Ctx::new(subject, "error_classification::lost_race_only_on_condition");
    let key = ctx.key(1);
    for generation in 1..=100 {
        let snap = ctx.read(&key).await;
        let claim_id = format!("c{generation}");
        match ctx.claim(&key, &claim_id, &snap).await {
            Ok(written) => ensure_eq!(
                written,
                generation,
                "C4",
                "a claim writes and returns snap.gen + 1",
                "claim {claim_id} {}",
                form(&snap)
            ),
            Err(NotWritten::LostRace(_)) => violated(
                "C8",
                "a lost race only when the condition failed",
                format_args!(
                    "uncontended claim {claim_id} {} lost a race, stored {:?}",
                    form(&snap),
                    ctx.read(&key).await
                ),
            ),
            Err(NotWritten::Failed(e)) => violated(
                "C8",
                "a claim on a healthy store fails only on a fault",
                format_args!("uncontended claim {claim_id} failed with {e}"),
            ),
        }
        if generation % 10 == 0 {
            ctx.release_keeps_gen(&key, generation).await;
        }
    }
}

/// C8: when a lost race carries a record, it is the record as it stands, so
/// the Arbiter's next attempt decides from the truth.
pub async fn lost_race_record_is_current(subject: Subject) {
    let ctx = Ctx::new(subject, "error_classification::lost_race_record_is_current");
    let key = ctx.key(1);
    let stale = ctx.read(&key).await;
    for (generation, claim_id) in [(1, "a"), (2, "b")] {
        let snap = ctx.read(&key).await;
        ctx.win(&key, claim_id, &snap, generation).await;
    }
    let result = ctx.claim(&key, "late", &stale).await;
    ctx.assert_refused(&key, result, &claimed(2, "b"), "stale absent snapshot")
        .await;
    // A corrupt record must be carried as corrupt, not as a tombstone.
    ctx.put(&key, 9, Some("{"), Some("z")).await;
    let corrupt = ctx.read(&key).await;
    let result = ctx.claim(&key, "late", &stale).await;
    ctx.assert_refused(
        &key,
        result,
        &corrupt,
        "stale snapshot over a corrupt record",
    )
    .await;
}

/// C8: an owner without endpoint is refused with `InvalidParams` before any
/// write: an absent key stays absent and a session stays as it was.
pub async fn owner_without_endpoint_refused(subject: Subject) {
    let ctx = Ctx::new(
        subject,
        "error_classification::owner_without_endpoint_refused",
    );
    let empty = Owner::new("r", "c", "");
    let key = ctx.key(1);
    let snap = ctx.read(&key).await;
    let result = ctx.store.claim_cas(&key, &empty, "x", &snap).await;
    ensure!(
        matches!(&result, Err(e) if e.is_invalid_params()),
        "C8",
        "an owner without endpoint is refused with InvalidParams",
        "claim over an absent key: got {result:?}"
    );
    ensure_eq!(
        ctx.read(&key).await,
        OwnerState::absent(),
        "C8",
        "an owner without endpoint is refused before any write"
    );
    let key = ctx.key(2);
    let snap = ctx.session(&key, 5, "s").await;
    let result = ctx
        .store
        .claim_cas(&key, &Owner::default(), "x", &snap)
        .await;
    ensure!(
        matches!(&result, Err(e) if e.is_invalid_params()),
        "C8",
        "an owner without endpoint is refused with InvalidParams",
        "claim over a session: got {result:?}"
    );
    ensure_eq!(
        ctx.read(&key).await,
        snap,
        "C8",
        "an owner without endpoint is refused before any write"
    );
}
