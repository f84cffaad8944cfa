//! C7 corrupt owner: soft on `read_owner`, hard on `current`; tombstone ≠ absent.

use unique_core::{CasOutcome, Owner, OwnerState};

use crate::Subject;
use crate::support::{Ctx, form, tombstoned};

/// Stored owners that are non-empty but not an `Owner` JSON object.
const CORRUPT: [&str; 7] = [
    "{",
    "[]",
    "\"s\"",
    "42",
    "null",
    r#"{"endpoint":5}"#,
    "not json",
];

/// C7: `read_owner` reports a corrupt owner as `owner = None, owner_corrupt =
/// true` with the record's gen and cid, not as an error.
pub async fn corrupt_owner_reads_soft(subject: Subject) {
    let ctx = Ctx::new(subject, "corrupt_owner::corrupt_owner_reads_soft");
    for (uid, raw) in (1..).zip(CORRUPT) {
        let key = ctx.key(uid);
        ctx.put(&key, 3, Some(raw), Some("c")).await;
        let state = ctx.read(&key).await;
        let expected = OwnerState {
            exists: true,
            generation: 3,
            owner: None,
            owner_corrupt: true,
            claim_id: Some("c".into()),
            ..OwnerState::default()
        };
        ensure_eq!(
            state,
            expected,
            "C7",
            "read_owner reports a corrupt owner softly: owner None, owner_corrupt, gen and cid kept",
            "stored owner {raw:?}"
        );
    }
}

/// C7: `current` reports a corrupt owner as `Unavailable`.
pub async fn corrupt_owner_is_unavailable_on_current(subject: Subject) {
    let ctx = Ctx::new(
        subject,
        "corrupt_owner::corrupt_owner_is_unavailable_on_current",
    );
    for (uid, raw) in (1..).zip(CORRUPT) {
        let key = ctx.key(uid);
        ctx.put(&key, 3, Some(raw), Some("c")).await;
        let result = ctx.current(&key).await;
        ensure!(
            matches!(&result, Err(e) if e.is_unavailable()),
            "C7",
            "current over a corrupt owner is Unavailable",
            "stored owner {raw:?}: got {result:?}"
        );
    }
}

/// C7: a tombstone (owner empty or absent) reads `exists = true, owner = None`,
/// distinguishable from a key without record (`exists = false`).
pub async fn tombstone_distinct_from_absent(subject: Subject) {
    let ctx = Ctx::new(subject, "corrupt_owner::tombstone_distinct_from_absent");
    let absent = ctx.key(1);
    ensure_eq!(
        ctx.read(&absent).await,
        OwnerState::absent(),
        "C7",
        "a key without record reads exists = false"
    );
    ensure!(
        !ctx.current_ok(&absent).await.exists,
        "C7",
        "a key without record reads exists = false, also through current",
        "current reports a record"
    );
    for (uid, owner) in [(2, Some("")), (3, None)] {
        let key = ctx.key(uid);
        ctx.put(&key, 6, owner, None).await;
        let state = ctx.read(&key).await;
        ensure_eq!(
            state,
            tombstoned(6),
            "C7",
            "a tombstone (owner empty or absent) reads exists = true, owner = None",
            "stored owner {owner:?}"
        );
        let current = ctx.current_ok(&key).await;
        ensure_eq!(
            (current.exists, current.generation, current.owner),
            (true, 6, None),
            "C7",
            "a tombstone reads exists = true, owner = None, also through current",
            "stored owner {owner:?}"
        );
    }
}

/// C7 (owner JSON): a stored owner with unknown fields and omitted ones parses,
/// ignoring the unknown; a claimed owner reads back equal, query string and
/// non-ASCII included.
pub async fn owner_json_round_trip(subject: Subject) {
    let ctx = Ctx::new(subject, "corrupt_owner::owner_json_round_trip");
    let key = ctx.key(1);
    let raw = r#"{"endpoint":"http://h:1/k","zone":"z","v":2,"cluster":"c","nested":{"a":[1]}}"#;
    ctx.put(&key, 1, Some(raw), Some("old")).await;
    let snap = ctx.read(&key).await;
    ensure_eq!(
        (snap.owner.as_ref(), snap.owner_corrupt),
        (Some(&Owner::new("", "c", "http://h:1/k")), false),
        "C7",
        "a stored owner parses with unknown fields ignored and omitted ones empty",
        "stored {raw}"
    );
    let owner = Owner::new(
        "eu-west-1 ✓",
        "",
        "https://node-7.example:8443/kick?token=s3cr3t&x=1",
    );
    let outcome = ctx.store.claim_cas(&key, &owner, "new", &snap).await;
    ensure!(
        matches!(outcome, Ok(CasOutcome::Written { generation: 2 })),
        "C3",
        "a claim whose double pin holds writes snap.gen + 1",
        "claim {}: {outcome:?}",
        form(&snap)
    );
    let back = ctx.read(&key).await;
    ensure_eq!(
        (back.owner.as_ref(), back.claim_id.as_deref()),
        (Some(&owner), Some("new")),
        "C7",
        "a claimed owner reads back equal, query string and non-ASCII included"
    );
    ensure_eq!(
        ctx.current_ok(&key).await.owner.as_ref(),
        Some(&owner),
        "C7",
        "current reads back the claimed owner"
    );
}

/// C7 (owner JSON) and C8: an owner that names a node instead of an endpoint
/// (`docs/design.md#push-kicks`) is written, and reads back with its node, by `read_owner`
/// and `current`; a stored node owner written by another process parses the same.
pub async fn node_owner_round_trip(subject: Subject) {
    let ctx = Ctx::new(subject, "corrupt_owner::node_owner_round_trip");
    let key = ctx.key(1);
    let owner = Owner::with_node("eu", "c1", "node-7.a_b");
    let snap = ctx.read(&key).await;
    let outcome = ctx.store.claim_cas(&key, &owner, "n", &snap).await;
    ensure!(
        matches!(outcome, Ok(CasOutcome::Written { generation: 1 })),
        "C8",
        "an owner with a node and no endpoint is written",
        "claim {}: {outcome:?}",
        form(&snap)
    );
    ensure_eq!(
        ctx.read(&key).await.owner.as_ref(),
        Some(&owner),
        "C7",
        "a node owner reads back with its node"
    );
    ensure_eq!(
        ctx.current_ok(&key).await.owner.as_ref(),
        Some(&owner),
        "C7",
        "current reads back the node owner"
    );
    let other = ctx.key(2);
    ctx.put(
        &other,
        1,
        Some(r#"{"node":"n2","region":"r"}"#),
        Some("old"),
    )
    .await;
    ensure_eq!(
        ctx.read(&other).await.owner,
        Some(Owner::with_node("r", "", "n2")),
        "C7",
        "a stored node owner parses with its node"
    );
}
