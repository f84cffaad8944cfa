//! C5 fenced tombstone: release at the stored gen only, keeping the gen.

use unique_core::OwnerState;

use crate::Subject;
use crate::support::{Ctx, claimed, tombstoned};

/// C5: a release at the stored gen empties the owner, removes the cid and keeps the gen.
pub async fn release_tombstones_and_keeps_gen(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::release_tombstones_and_keeps_gen");
    let key = ctx.key(1);
    let snap = ctx.session(&key, 12, "s").await;
    assert!(ctx.release(&key, snap.generation).await);
    assert_eq!(ctx.read(&key).await, tombstoned(12));
}

/// C5: releasing again at the same gen returns true and changes nothing.
pub async fn repeated_release_is_true(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::repeated_release_is_true");
    let key = ctx.key(1);
    let snap = ctx.read(&key).await;
    assert_eq!(ctx.claim(&key, "s", &snap).await.ok(), Some(1));
    for _ in 0..3 {
        assert!(ctx.release(&key, 1).await);
        assert_eq!(ctx.read(&key).await, tombstoned(1));
    }
}

/// C5: a release at another gen (lower or higher) returns false and writes nothing.
pub async fn release_gen_mismatch_is_false(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::release_gen_mismatch_is_false");
    let key = ctx.key(1);
    let before = ctx.session(&key, 7, "s").await;
    for generation in [6, 8, 1, i64::MAX - 1] {
        assert!(
            !ctx.release(&key, generation).await,
            "release at {generation}"
        );
        assert_eq!(ctx.read(&key).await, before);
    }
}

/// C5: a release of a key without record returns false and creates nothing.
pub async fn release_without_record_is_false(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::release_without_record_is_false");
    let key = ctx.key(1);
    for generation in [1, 2] {
        assert!(!ctx.release(&key, generation).await);
    }
    assert_eq!(ctx.read(&key).await, OwnerState::absent());
}

/// C5: a release at gen <= 0 returns false, even over a record stored at gen 0.
pub async fn release_nonpositive_gen_is_false(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::release_nonpositive_gen_is_false");
    let key = ctx.key(1);
    ctx.put(&key, 0, Some(&crate::support::owner_json("s")), Some("s"))
        .await;
    let before = ctx.read(&key).await;
    for generation in [0, -1, i64::MIN] {
        assert!(
            !ctx.release(&key, generation).await,
            "release at {generation}"
        );
        assert_eq!(ctx.read(&key).await, before);
    }
}

/// C5/I2 (trap: resetting gen on release): claim, release, claim again: the gen
/// keeps counting up from the tombstone, never back to 1.
pub async fn release_never_resets_gen(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::release_never_resets_gen");
    let key = ctx.key(1);
    for generation in 1..=5 {
        let snap = ctx.read(&key).await;
        assert_eq!(
            ctx.claim(&key, &format!("s{generation}"), &snap).await.ok(),
            Some(generation)
        );
        assert!(ctx.release(&key, generation).await);
        assert_eq!(ctx.read(&key).await, tombstoned(generation));
    }
}

/// C5/I6: after a takeover, the old session's release is false and leaves the
/// new session online.
pub async fn stale_release_after_takeover_is_false(subject: Subject) {
    let ctx = Ctx::new(
        subject,
        "fenced_release::stale_release_after_takeover_is_false",
    );
    let key = ctx.key(1);
    let snap = ctx.read(&key).await;
    assert_eq!(ctx.claim(&key, "old", &snap).await.ok(), Some(1));
    let snap = ctx.read(&key).await;
    assert_eq!(ctx.claim(&key, "new", &snap).await.ok(), Some(2));
    assert!(!ctx.release(&key, 1).await);
    assert_eq!(ctx.read(&key).await, claimed(2, "new"));
}
