//! C6 cid presence: `Some("")` is a cid, distinct from no cid.

use crate::Subject;
use crate::support::{Ctx, owner_json};

/// C6 (trap: treating `cid == ""` as absent): an empty cid reads as `Some("")`.
pub async fn empty_cid_reads_as_empty(subject: Subject) {
    let ctx = Ctx::new(subject, "cid_presence::empty_cid_reads_as_empty");
    let key = ctx.key(1);
    ctx.put(&key, 2, Some(&owner_json("x")), Some("")).await;
    ensure_eq!(
        ctx.read(&key).await.claim_id.as_deref(),
        Some(""),
        "C6",
        "an empty cid reads as Some(\"\"), not as absent"
    );
}

/// C6: an absent cid reads as `None`, with an owner or without.
pub async fn absent_cid_reads_as_none(subject: Subject) {
    let ctx = Ctx::new(subject, "cid_presence::absent_cid_reads_as_none");
    let key = ctx.key(1);
    for owner in [Some(owner_json("x")), None] {
        ctx.put(&key, 2, owner.as_deref(), None).await;
        ensure_eq!(
            ctx.read(&key).await.claim_id,
            None,
            "C6",
            "an absent cid reads as None",
            "stored owner {owner:?}"
        );
    }
}

/// C3/C6 (trap: treating `cid == ""` as absent): a snapshot with `Some("")`
/// uses the double pin on the empty cid: it fails when the stored cid is
/// absent, and succeeds when it is empty; a tombstone-form snapshot fails on an empty cid.
pub async fn empty_cid_uses_double_pin(subject: Subject) {
    let ctx = Ctx::new(subject, "cid_presence::empty_cid_uses_double_pin");
    let key = ctx.key(1);
    let owner = owner_json("x");
    ctx.put(&key, 4, Some(&owner), Some("")).await;
    let pinned = ctx.read(&key).await;
    ensure_eq!(
        pinned.claim_id.as_deref(),
        Some(""),
        "C6",
        "an empty cid reads as Some(\"\"), not as absent"
    );
    ctx.put(&key, 4, Some(&owner), None).await;
    let unpinned = ctx.read(&key).await;
    // Stored cid absent: the double pin on "" must fail.
    let result = ctx.claim(&key, "new", &pinned).await;
    ctx.assert_refused(&key, result, &unpinned, "pin on empty cid over absent cid")
        .await;
    // Stored cid empty: the tombstone form must fail, the double pin must win.
    ctx.put(&key, 4, Some(&owner), Some("")).await;
    let result = ctx.claim(&key, "new", &unpinned).await;
    ctx.assert_refused(&key, result, &pinned, "tombstone form over empty cid")
        .await;
    ctx.win(&key, "new", &pinned, 5).await;
}

/// C6/C4: every claim writes its cid exactly (long and non-ASCII ones too),
/// so its retry can be recognised.
pub async fn claim_writes_exact_cid(subject: Subject) {
    let ctx = Ctx::new(subject, "cid_presence::claim_writes_exact_cid");
    let key = ctx.key(1);
    let long = "c".repeat(128);
    for (generation, claim_id) in (1..).zip(["plain", "ünï-cødé ✓", long.as_str(), "a b"]) {
        let snap = ctx.read(&key).await;
        ctx.win(&key, claim_id, &snap, generation).await;
    }
}
