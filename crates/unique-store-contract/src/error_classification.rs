//! C8 error classification: a lost race exactly for failed conditions, nothing
//! written on any refusal, an owner without endpoint refused before any write.

use unique_core::{Owner, OwnerState};

use crate::Subject;
use crate::support::{Ctx, claimed};

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
/// from a fresh snapshot, all succeed: a lost race never appears without a
/// failed condition. (A store that maps a throttle or a fault to a lost race
/// would have the Arbiter retry a fault as if it were a race.)
pub async fn lost_race_only_on_condition(subject: Subject) {
    let ctx = Ctx::new(subject, "error_classification::lost_race_only_on_condition");
    let key = ctx.key(1);
    for generation in 1..=100 {
        let snap = ctx.read(&key).await;
        let result = ctx.claim(&key, &format!("c{generation}"), &snap).await;
        assert_eq!(
            result.ok(),
            Some(generation),
            "an uncontended claim must not fail"
        );
        if generation % 10 == 0 {
            assert!(ctx.release(&key, generation).await);
        }
    }
}

/// C8: when a lost race carries a record, it is the record as it stands, so
/// the Arbiter's next attempt decides from the truth.
pub async fn lost_race_record_is_current(subject: Subject) {
    let ctx = Ctx::new(subject, "error_classification::lost_race_record_is_current");
    let key = ctx.key(1);
    let stale = ctx.read(&key).await;
    for claim_id in ["a", "b"] {
        let snap = ctx.read(&key).await;
        ctx.claim(&key, claim_id, &snap)
            .await
            .expect("uncontended claim");
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
    assert!(
        matches!(&result, Err(e) if e.is_invalid_params()),
        "got {result:?}"
    );
    assert_eq!(ctx.read(&key).await, OwnerState::absent());
    let key = ctx.key(2);
    let snap = ctx.session(&key, 5, "s").await;
    let result = ctx
        .store
        .claim_cas(&key, &Owner::default(), "x", &snap)
        .await;
    assert!(
        matches!(&result, Err(e) if e.is_invalid_params()),
        "got {result:?}"
    );
    assert_eq!(ctx.read(&key).await, snap);
}
