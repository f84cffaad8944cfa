//! C3 three-form fenced claim, chosen from `snap.claim_id` (trap: choosing by owner).

use unique_core::OwnerState;

use crate::Subject;
use crate::support::{Ctx, owner_for, owner_json};

/// C3 first-login form: a snapshot of an absent key is refused once any record
/// exists (a tombstone, a session). A record at gen 0 reads as absent and is
/// claimable: see `absent_records`.
pub async fn first_login_requires_absence(subject: Subject) {
    let ctx = Ctx::new(subject, "fence_forms::first_login_requires_absence");
    let absent = OwnerState::absent();
    let key = ctx.key(1);
    let before = ctx.tombstone(&key, 3).await;
    let result = ctx.claim(&key, "new", &absent).await;
    ctx.assert_refused(&key, result, &before, "absent snapshot over a tombstone")
        .await;
    let key = ctx.key(2);
    let before = ctx.session(&key, 1, "old").await;
    let result = ctx.claim(&key, "new", &absent).await;
    ctx.assert_refused(&key, result, &before, "absent snapshot over a session")
        .await;
}

/// C3 double-pin form: refused when the stored gen differs from the snapshot's,
/// in either direction.
pub async fn double_pin_requires_gen(subject: Subject) {
    let ctx = Ctx::new(subject, "fence_forms::double_pin_requires_gen");
    let key = ctx.key(1);
    let snap = ctx.session(&key, 5, "same").await;
    for stored in [4, 6] {
        let before = ctx.session(&key, stored, "same").await;
        let result = ctx.claim(&key, "new", &snap).await;
        ctx.assert_refused(
            &key,
            result,
            &before,
            &format!("snapshot gen 5, stored {stored}"),
        )
        .await;
    }
}

/// C3 double-pin form: refused when the stored cid differs, is empty, or is absent.
pub async fn double_pin_requires_cid(subject: Subject) {
    let ctx = Ctx::new(subject, "fence_forms::double_pin_requires_cid");
    let key = ctx.key(1);
    let snap = ctx.session(&key, 5, "mine").await;
    let owner = owner_json("mine");
    for stored in [Some("theirs"), Some(""), None] {
        ctx.put(&key, 5, Some(&owner), stored).await;
        let before = ctx.read(&key).await;
        let result = ctx.claim(&key, "new", &snap).await;
        ctx.assert_refused(&key, result, &before, &format!("stored cid {stored:?}"))
            .await;
    }
}

/// C3/C4: the double pin replaces an online session with gen + 1, the new owner and cid.
pub async fn double_pin_replaces_session(subject: Subject) {
    let ctx = Ctx::new(subject, "fence_forms::double_pin_replaces_session");
    let key = ctx.key(1);
    let snap = ctx.session(&key, 41, "old").await;
    ctx.win(&key, "new", &snap, 42).await;
}

/// C3 tombstone form: refused when the stored record has a cid (even an empty
/// one) or another gen; succeeds on the matching tombstone.
pub async fn tombstone_form_requires_absent_cid(subject: Subject) {
    let ctx = Ctx::new(subject, "fence_forms::tombstone_form_requires_absent_cid");
    let key = ctx.key(1);
    let snap = ctx.tombstone(&key, 8).await;
    for (generation, cid) in [(8, Some("x")), (8, Some("")), (9, None), (7, None)] {
        ctx.put(&key, generation, Some(""), cid).await;
        let before = ctx.read(&key).await;
        let result = ctx.claim(&key, "new", &snap).await;
        ctx.assert_refused(
            &key,
            result,
            &before,
            &format!("stored gen {generation} cid {cid:?}"),
        )
        .await;
    }
    ctx.tombstone(&key, 8).await;
    ctx.win(&key, "new", &snap, 9).await;
}

/// C3/C7 (trap: choosing the form by owner): a corrupt record has no owner but
/// a cid, and must be replaceable through the double pin, or the key is locked forever.
pub async fn corrupt_record_replaceable(subject: Subject) {
    let ctx = Ctx::new(subject, "fence_forms::corrupt_record_replaceable");
    let key = ctx.key(1);
    ctx.put(&key, 5, Some("{not json"), Some("old")).await;
    let snap = ctx.read(&key).await;
    ensure!(
        snap.owner_corrupt && snap.owner.is_none(),
        "C7",
        "read_owner reports a corrupt owner softly: owner None, owner_corrupt",
        "read {snap:?}"
    );
    ctx.win(&key, "new", &snap, 6).await;
}

/// C3 (trap: choosing the form by owner): a record with a valid owner but no
/// cid (written by an older writer) is claimed through the tombstone form.
pub async fn owner_without_cid_uses_tombstone_form(subject: Subject) {
    let ctx = Ctx::new(
        subject,
        "fence_forms::owner_without_cid_uses_tombstone_form",
    );
    let key = ctx.key(1);
    ctx.put(&key, 3, Some(&owner_json("legacy")), None).await;
    let snap = ctx.read(&key).await;
    ensure!(
        snap.owner == Some(owner_for("legacy")) && snap.claim_id.is_none(),
        "C6",
        "a record with an owner and no cid reads owner Some, cid None",
        "read {snap:?}"
    );
    ctx.win(&key, "new", &snap, 4).await;
}

/// C3 (trap: choosing the form by owner): a record with an empty owner but a
/// cid is claimed through the double pin.
pub async fn empty_owner_with_cid_uses_double_pin(subject: Subject) {
    let ctx = Ctx::new(subject, "fence_forms::empty_owner_with_cid_uses_double_pin");
    let key = ctx.key(1);
    ctx.put(&key, 3, Some(""), Some("half")).await;
    let snap = ctx.read(&key).await;
    ensure!(
        snap.owner.is_none() && !snap.owner_corrupt && snap.claim_id.as_deref() == Some("half"),
        "C7",
        "an empty owner reads owner None, not corrupt, with its cid",
        "read {snap:?}"
    );
    ctx.win(&key, "new", &snap, 4).await;
}
