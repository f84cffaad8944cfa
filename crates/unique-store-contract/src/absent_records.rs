//! Records that read as absent: a record stored at gen 0 was never claimed
//! (no claim writes gen 0), so it reads `exists = false` and a first login
//! takes it (see `docs/design.md#records`).

use unique_core::OwnerState;

use crate::Subject;
use crate::check::violated;
use crate::support::{Ctx, claimed, owner_json};

/// The `owner` and `cid` of the gen-0 records each case stores: none, a
/// tombstone's, `session`'s (a live owner JSON), a corrupt owner with an empty cid.
fn owners_and_cids(session: &str) -> [(Option<&str>, Option<&str>); 4] {
    [
        (None, None),
        (Some(""), None),
        (Some(session), Some("old")),
        (Some("{"), Some("")),
    ]
}

/// Records: a record stored at gen 0 reads as absent through `read_owner` and
/// `current`, whatever its owner and cid.
pub async fn gen_0_record_reads_absent(subject: Subject) {
    let ctx = Ctx::new(subject, "absent_records::gen_0_record_reads_absent");
    let session = owner_json("old");
    for (uid, (owner, cid)) in (1..).zip(owners_and_cids(&session)) {
        let key = ctx.key(uid);
        ctx.put(&key, 0, owner, cid).await;
        let what = format!("gen 0, owner {owner:?}, cid {cid:?}");
        ensure_eq!(
            ctx.read(&key).await,
            OwnerState::absent(),
            "Records",
            "a record stored at gen 0 reads as absent",
            "read_owner over {what}"
        );
        let current = match ctx.current(&key).await {
            Ok(current) => current,
            Err(e) => violated(
                "Records",
                "a record stored at gen 0 reads as absent, also through current",
                format_args!("current over {what} failed: {e}"),
            ),
        };
        ensure_eq!(
            (current.exists, current.generation, current.owner),
            (false, 0, None),
            "Records",
            "a record stored at gen 0 reads as absent, also through current",
            "current over {what}"
        );
    }
}

/// Records, C3/C4: the first-login form claims a record stored at gen 0 and
/// writes gen 1, replacing its owner and cid.
pub async fn first_login_claims_gen_0_record(subject: Subject) {
    let ctx = Ctx::new(subject, "absent_records::first_login_claims_gen_0_record");
    let session = owner_json("old");
    for (uid, (owner, cid)) in (1..).zip(owners_and_cids(&session)) {
        let key = ctx.key(uid);
        ctx.put(&key, 0, owner, cid).await;
        let snap = ctx.read(&key).await;
        let what = format!("gen 0, owner {owner:?}, cid {cid:?}");
        ctx.win(&key, "new", &snap, 1).await;
        // The record it wrote is a record: a second first login loses.
        let again = ctx.claim(&key, "late", &snap).await;
        ctx.assert_refused(
            &key,
            again,
            &claimed(1, "new"),
            &format!("a second first login over {what}"),
        )
        .await;
    }
}
