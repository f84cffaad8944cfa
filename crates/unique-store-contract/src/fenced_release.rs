//! C5 fenced tombstone: release at the stored gen only, keeping the gen.

use crate::Subject;
use crate::support::Ctx;

/// C5: a release at the stored gen empties the owner, removes the cid and keeps the gen.
pub async fn release_tombstones_and_keeps_gen(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::release_tombstones_and_keeps_gen");
    let key = ctx.key(1);
    ctx.session(&key, 12, "s").await;
    ctx.release_keeps_gen(&key, 12).await;
}

/// C5: releasing again at the same gen returns true and changes nothing.
pub async fn repeated_release_is_true(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::repeated_release_is_true");
    let key = ctx.key(1);
    let snap = ctx.read(&key).await;
    ctx.win(&key, "s", &snap, 1).await;
    for _ in 0..3 {
        ctx.release_keeps_gen(&key, 1).await;
    }
}

/// C5: a release at another gen (lower or higher) returns false and writes nothing.
pub async fn release_gen_mismatch_is_false(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::release_gen_mismatch_is_false");
    let key = ctx.key(1);
    ctx.session(&key, 7, "s").await;
    for generation in [6, 8, 1, i64::MAX - 1] {
        ctx.release_refused(&key, generation, "over gen 7").await;
    }
}

/// C5: a release of a key without record returns false and creates nothing.
pub async fn release_without_record_is_false(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::release_without_record_is_false");
    let key = ctx.key(1);
    for generation in [1, 2] {
        ctx.release_refused(&key, generation, "without record")
            .await;
    }
}

/// C5: a release at gen <= 0 returns false, even over a record stored at gen 0.
pub async fn release_nonpositive_gen_is_false(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::release_nonpositive_gen_is_false");
    let key = ctx.key(1);
    ctx.put(&key, 0, Some(&crate::support::owner_json("s")), Some("s"))
        .await;
    for generation in [0, -1, i64::MIN] {
        ctx.release_refused(&key, generation, "over a gen-0 record")
            .await;
    }
}

/// C5/I2 (trap: resetting gen on release): claim, release, claim again: the gen
/// keeps counting up from the tombstone, never back to 1.
pub async fn release_never_resets_gen(subject: Subject) {
    let ctx = Ctx::new(subject, "fenced_release::release_never_resets_gen");
    let key = ctx.key(1);
    for generation in 1..=5 {
        let snap = ctx.read(&key).await;
        ctx.win(&key, &format!("s{generation}"), &snap, generation)
            .await;
        ctx.release_keeps_gen(&key, generation).await;
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
    ctx.win(&key, "old", &snap, 1).await;
    let snap = ctx.read(&key).await;
    ctx.win(&key, "new", &snap, 2).await;
    ctx.release_refused(&key, 1, "a stale release after a takeover")
        .await;
}
