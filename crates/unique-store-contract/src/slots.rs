//! Device slots: every slot of a user is a key of its own (C1 holds per key),
//! and the default slot `""` is the key from before slots (`docs/design.md#records`).

use unique_core::Key;

use crate::Subject;
use crate::support::{Ctx, assert_one_winner, claimed, join, owner_json, race_from, tombstoned};

/// Slot names that are valid (no `#`, no control characters, at most 64
/// bytes) but unusual for a backend: multi-byte text, the bytes right after
/// `#` and at the top of ASCII (the edges of a user's range of slots), quotes
/// and the wildcards of SQL's `LIKE`, spaces, and the longest slot.
pub(crate) fn unusual_slots() -> Vec<String> {
    [
        "é",
        "📱",
        "\u{10ffff}",
        "$",
        "~",
        "~~",
        "%",
        "_",
        "'; --",
        "\\",
        "a b",
        "0",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain(["s".repeat(64), "é".repeat(32)])
    .collect()
}

/// C1: claims, gens, releases and their fences on two slots of one user never
/// affect each other: each slot starts at gen 1, a claim or a release on one
/// leaves the other's record as it was, and neither slot's snapshot or gen
/// fences the other.
pub async fn slots_are_independent(subject: Subject) {
    let ctx = Ctx::new(subject, "slots::slots_are_independent");
    let user = ctx.user(1);
    let (pc, mobile) = (user.key("pc"), user.key("mobile"));
    let absent = ctx.unwritten(&pc).await;
    ctx.win(&pc, "pc-1", &absent, 1).await;
    let mobile_snap = ctx.unwritten(&mobile).await;
    ctx.win(&mobile, "mobile-1", &mobile_snap, 1).await;
    let pc_snap = ctx.read(&pc).await;
    ctx.win(&pc, "pc-2", &pc_snap, 2).await;
    ensure_eq!(
        ctx.read(&mobile).await,
        claimed(1, "mobile-1"),
        "C1",
        "each slot is a key of its own: a takeover on one slot leaves the other",
        "slot \"mobile\" after slot \"pc\" went to gen 2"
    );
    ctx.release_refused(&mobile, 2, "a release at the other slot's gen")
        .await;
    let stale = ctx.claim(&mobile, "from-pc", &pc_snap).await;
    ctx.assert_refused(
        &mobile,
        stale,
        &claimed(1, "mobile-1"),
        "a claim on slot \"mobile\" from slot \"pc\"'s snapshot",
    )
    .await;
    ctx.release_keeps_gen(&pc, 2).await;
    ensure_eq!(
        ctx.read(&mobile).await,
        claimed(1, "mobile-1"),
        "C1",
        "each slot is a key of its own: a release on one slot leaves the other",
        "slot \"mobile\" after slot \"pc\" was released"
    );
    ctx.unwritten(&user.key("")).await;
    ensure_eq!(
        ctx.read(&pc).await,
        tombstoned(2),
        "C1",
        "each slot is a key of its own: claims and releases on one slot leave the other",
        "slot \"pc\" after its release"
    );
}

/// C1/I3: 32 tasks race for slot `"a"` while 32 others race for slot `"b"` of
/// the same user, all from absent snapshots: each slot has exactly one winner
/// at gen 1, and a third slot holding a session is left as it was.
pub async fn race_on_one_slot_leaves_the_other(subject: Subject) {
    let ctx = Ctx::new(subject, "slots::race_on_one_slot_leaves_the_other");
    let user = ctx.user(1);
    let (a, b, held) = (user.key("a"), user.key("b"), user.key("held"));
    let snap = ctx.unwritten(&a).await;
    ctx.session(&held, 9, "held").await;
    let race = |key: Key, tag: &'static str| {
        let (ctx, snap) = (ctx.clone(), snap.clone());
        tokio::spawn(async move { race_from(&ctx, &key, &snap, 32, tag).await })
    };
    let (on_a, on_b) = (race(a.clone(), "a"), race(b.clone(), "b"));
    let (on_a, on_b) = (join(on_a).await, join(on_b).await);
    assert_one_winner(&ctx, &a, &on_a, 1).await;
    assert_one_winner(&ctx, &b, &on_b, 1).await;
    ensure_eq!(
        ctx.read(&held).await,
        claimed(9, "held"),
        "C1",
        "each slot is a key of its own: races on other slots leave it",
        "slot \"held\" after races on slots \"a\" and \"b\""
    );
}

/// Records: the default slot is the key from before slots. `Key::new(p, e,
/// uid)`, its `.with_slot("")` and `UserKey::key("")` name one record: a claim
/// through one is read, fenced and released through the others, and a raw
/// record written for the old key reads back through `UserKey::key("")`.
pub async fn default_slot_is_the_old_key(subject: Subject) {
    let ctx = Ctx::new(subject, "slots::default_slot_is_the_old_key");
    let old = ctx.key(1);
    let explicit = old.clone().with_slot("");
    let through_user = ctx.user(1).key("");
    let snap = ctx.read(&old).await;
    ctx.win(&old, "old", &snap, 1).await;
    for (name, key) in [
        ("with_slot(\"\")", &explicit),
        ("UserKey::key(\"\")", &through_user),
    ] {
        ensure_eq!(
            ctx.read(key).await,
            claimed(1, "old"),
            "Records",
            "the default slot is the key before slots: one record",
            "read through {name} after a claim through Key::new"
        );
    }
    let snap = ctx.read(&explicit).await;
    ctx.win(&through_user, "new", &snap, 2).await;
    ctx.release_keeps_gen(&old, 2).await;
    ensure_eq!(
        ctx.read(&explicit).await,
        tombstoned(2),
        "Records",
        "the default slot is the key before slots: one record",
        "read through with_slot(\"\") after a release through Key::new"
    );
    let raw = ctx.key(2);
    ctx.put(&raw, 6, Some(&owner_json("raw")), Some("raw"))
        .await;
    ensure_eq!(
        ctx.read(&ctx.user(2).key("")).await,
        claimed(6, "raw"),
        "Records",
        "the default slot is the key before slots: a record stored for the old key is its record",
        "raw record written for Key::new, read through UserKey::key(\"\")"
    );
}

/// C1: a slot's record is its own even where a careless partition key would
/// collide: slot `"0"` of uid 4 and the default slot of uid 40 (`p#e#4` +
/// `0`), slot `"0x"` of uid 4 and slot `"x"` of uid 40 (a key built without
/// the `#` before the slot), slot `"4"` of uid 1 and uid 14.
pub async fn slots_distinct_from_prefix_uids(subject: Subject) {
    let ctx = Ctx::new(subject, "slots::slots_distinct_from_prefix_uids");
    let pairs = [
        (ctx.user(4).key("0"), ctx.key(40)),
        (ctx.user(4).key("0x"), ctx.user(40).key("x")),
        (ctx.user(1).key("4"), ctx.key(14)),
        (ctx.user(5).key("5"), ctx.user(55).key("")),
    ];
    for (i, (slot, other)) in pairs.iter().enumerate() {
        let snap = ctx.unwritten(slot).await;
        ctx.win(slot, &format!("slot-{i}"), &snap, 1).await;
        ctx.unwritten(other).await;
        ctx.session(other, 7, &format!("other-{i}")).await;
        ensure_eq!(
            ctx.read(slot).await,
            claimed(1, &format!("slot-{i}")),
            "C1",
            "a slot's record is its own: a write on another user's key leaves it",
            "{slot} after a raw write on {other}"
        );
    }
}

/// C1 and C2 with slot names that are valid but unusual (multi-byte text,
/// `$`, `~`, quotes, `%`, `_`, 64 bytes): each is claimed, read back, taken
/// over and released as its own key, none shows another's record, and the
/// default slot stays absent.
pub async fn unusual_slot_text_works(subject: Subject) {
    let ctx = Ctx::new(subject, "slots::unusual_slot_text_works");
    let user = ctx.user(1);
    let slots = unusual_slots();
    for (i, slot) in slots.iter().enumerate() {
        let key = user.key(slot.clone());
        let snap = ctx.unwritten(&key).await;
        ctx.win(&key, &format!("first-{i}"), &snap, 1).await;
    }
    for (i, slot) in slots.iter().enumerate() {
        let key = user.key(slot.clone());
        let snap = ctx.read(&key).await;
        ensure_eq!(
            snap,
            claimed(1, &format!("first-{i}")),
            "C1",
            "each slot is a key of its own: claims on other slots leave it",
            "slot {slot:?} after every slot was claimed"
        );
        ctx.win(&key, &format!("second-{i}"), &snap, 2).await;
        ctx.release_keeps_gen(&key, 2).await;
    }
    ctx.unwritten(&user.key("")).await;
}
