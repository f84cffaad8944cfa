//! C10 listing a user's sessions: every slot whose record holds an owner,
//! once, with its gen and owner, from one strongly consistent read of the
//! user's records and of no one else's.

use unique_core::{CasOutcome, Key, Owner, UserKey, UserSession};

use crate::Subject;
use crate::slots::unusual_slots;
use crate::support::{Ctx, join, listed, owner_for, owner_json};

/// C10: a user without records lists no session, nor does one whose only
/// records are on other users' keys next to it.
pub async fn empty_for_a_user_without_records(subject: Subject) {
    let ctx = Ctx::new(subject, "listing::empty_for_a_user_without_records");
    ensure_eq!(
        ctx.list(&ctx.user(1)).await,
        Vec::new(),
        "C10",
        "a user without records lists no session"
    );
    let snap = ctx.read(&ctx.key(20)).await;
    ctx.win(&ctx.key(20), "next-door", &snap, 1).await;
    ensure_eq!(
        ctx.list(&ctx.user(2)).await,
        Vec::new(),
        "C10",
        "a user without records lists no session",
        "while uid 20 holds a session"
    );
}

/// C10: the listing holds exactly the slots whose record holds an owner, each
/// with its gen and owner: the default slot and claimed slots, not a released
/// slot, nor a slot never claimed.
pub async fn lists_exactly_the_slots_holding_an_owner(subject: Subject) {
    let ctx = Ctx::new(subject, "listing::lists_exactly_the_slots_holding_an_owner");
    let user = ctx.user(1);
    for (slot, name, claims) in [
        ("", "default", 1),
        ("pc", "pc", 3),
        ("mobile", "mobile", 2),
        ("tablet", "tablet", 1),
    ] {
        let key = user.key(slot);
        let mut snap = ctx.unwritten(&key).await;
        for n in 1..=claims {
            ctx.win(&key, &format!("{name}-{n}"), &snap, n).await;
            snap = ctx.read(&key).await;
        }
    }
    ctx.release_keeps_gen(&user.key("tablet"), 1).await;
    let owner_only = user.key("raw");
    ctx.put(&owner_only, 5, Some(&owner_json("raw-5")), None)
        .await;
    ensure_eq!(
        ctx.list(&user).await,
        vec![
            listed("", 1, "default-1"),
            listed("mobile", 2, "mobile-2"),
            listed("pc", 3, "pc-3"),
            listed("raw", 5, "raw-5"),
        ],
        "C10",
        "the listing holds every slot whose record holds an owner, with its gen and owner, once",
        "sorted by slot; slot \"tablet\" released, slot \"raw\" an owner without a cid"
    );
}

/// C10/C5: a release drops its slot from the listing; the next claim on that
/// slot brings it back at the next gen.
pub async fn release_drops_a_slot_until_the_next_claim(subject: Subject) {
    let ctx = Ctx::new(
        subject,
        "listing::release_drops_a_slot_until_the_next_claim",
    );
    let user = ctx.user(1);
    let (pc, mobile) = (user.key("pc"), user.key("mobile"));
    for (key, claim_id) in [(&pc, "pc-1"), (&mobile, "mobile-1")] {
        let snap = ctx.unwritten(key).await;
        ctx.win(key, claim_id, &snap, 1).await;
    }
    ctx.release_keeps_gen(&pc, 1).await;
    ensure_eq!(
        ctx.list(&user).await,
        vec![listed("mobile", 1, "mobile-1")],
        "C10",
        "a tombstone is not listed",
        "after slot \"pc\" was released at gen 1"
    );
    let snap = ctx.read(&pc).await;
    ctx.win(&pc, "pc-2", &snap, 2).await;
    ensure_eq!(
        ctx.list(&user).await,
        vec![listed("mobile", 1, "mobile-1"), listed("pc", 2, "pc-2")],
        "C10",
        "a claim on a released slot lists it again at the next gen",
        "after slot \"pc\" was claimed from its tombstone"
    );
}

/// C10 and Records: a gen-0 record reads as absent, so it is not listed, even
/// with an owner and a cid stored.
pub async fn gen_0_records_not_listed(subject: Subject) {
    let ctx = Ctx::new(subject, "listing::gen_0_records_not_listed");
    let user = ctx.user(1);
    for slot in ["", "pc"] {
        ctx.put(&user.key(slot), 0, Some(&owner_json("zero")), Some("zero"))
            .await;
    }
    ctx.put(&user.key("corrupt"), 0, Some("{"), Some("zero"))
        .await;
    ctx.session(&user.key("mobile"), 4, "mobile").await;
    ensure_eq!(
        ctx.list(&user).await,
        vec![listed("mobile", 4, "mobile")],
        "C10",
        "a gen-0 record reads as absent and is not listed",
        "gen-0 records with an owner on the default slot and slot \"pc\", with a corrupt owner on slot \"corrupt\""
    );
}

/// C10/C7: a corrupt owner on any slot of the user (the default slot or
/// another) fails the listing with `Unavailable`; a tombstone (empty owner)
/// is not corrupt.
pub async fn corrupt_owner_fails_the_listing(subject: Subject) {
    let ctx = Ctx::new(subject, "listing::corrupt_owner_fails_the_listing");
    for (uid, corrupt_slot) in [(1, ""), (2, "pc")] {
        let user = ctx.user(uid);
        ctx.session(&user.key("mobile"), 2, "mobile").await;
        ctx.tombstone(&user.key("tablet"), 3).await;
        ctx.put(&user.key(corrupt_slot), 5, Some("not json"), Some("c"))
            .await;
        let result = ctx.list_result(&user).await;
        ensure!(
            matches!(&result, Err(e) if e.is_unavailable()),
            "C10",
            "a corrupt stored owner fails the listing with Unavailable, as current does (C7)",
            "corrupt owner on slot {corrupt_slot:?}: list_sessions answered {result:?}"
        );
    }
}

/// C10: the listing holds only this user's records, never those of keys
/// around its range: uids whose digits start with its own (4 → 40, 41, 400),
/// neighbour uids, the same uid under another project or env (including an
/// env that differs only where a `LIKE` pattern's `_` would match, and envs
/// that sort right before and after this one).
pub async fn never_lists_another_users_records(subject: Subject) {
    let ctx = Ctx::new(subject, "listing::never_lists_another_users_records");
    let user = ctx.user(4);
    ctx.session(&user.key(""), 1, "mine").await;
    ctx.session(&user.key("pc"), 2, "mine-pc").await;
    let base = ctx.key(4);
    let other_env = |env: String| Key::new(base.project.clone(), env, 4);
    let others = [
        ctx.key(40),
        ctx.user(40).key("pc"),
        ctx.user(41).key("a"),
        ctx.key(400),
        ctx.user(3).key("~"),
        ctx.key(5),
        ctx.user(5).key("$"),
        Key::new(format!("{}x", base.project), base.env.clone(), 4).with_slot("pc"),
        other_env(format!("{}x", base.env)).with_slot("pc"),
        other_env(base.env.replace('_', "X")).with_slot("pc"),
        other_env(format!("{} ", base.env)).with_slot("pc"),
        other_env(format!("{}$", base.env)),
    ];
    for (i, key) in others.iter().enumerate() {
        ctx.session(key, 9, &format!("other-{i}")).await;
    }
    ensure_eq!(
        ctx.list(&user).await,
        vec![listed("", 1, "mine"), listed("pc", 2, "mine-pc")],
        "C10",
        "the listing holds only the user's own records",
        "uid 4, with sessions on {others:?}"
    );
    // An unreadable record of another user must not fail this user's listing.
    ctx.put(&ctx.user(40).key("x"), 3, Some("{"), Some("c"))
        .await;
    ensure_eq!(
        ctx.list(&user).await,
        vec![listed("", 1, "mine"), listed("pc", 2, "mine-pc")],
        "C10",
        "the listing reads only the user's own records",
        "uid 4, with a corrupt owner on uid 40's slot \"x\""
    );
}

/// C10 (a strongly consistent read, like C2): 30 times, a claim and then a
/// release completed on one task are listed (and then no longer listed) at
/// once by another task.
pub async fn listing_sees_completed_writes(subject: Subject) {
    let ctx = Ctx::new(subject, "listing::listing_sees_completed_writes");
    let user = ctx.user(1);
    let key = user.key("pc");
    for generation in 1..=30 {
        let claim_id = format!("w{generation}");
        let writer = {
            let (ctx, key, claim_id) = (ctx.clone(), key.clone(), claim_id.clone());
            tokio::spawn(async move {
                let snap = ctx.read(&key).await;
                ctx.win(&key, &claim_id, &snap, generation).await;
            })
        };
        join(writer).await;
        ensure_eq!(
            list_on_a_task(&ctx, &user).await,
            vec![listed("pc", generation, &claim_id)],
            "C10",
            "the listing sees a claim that completed before it",
            "after claim {claim_id} at gen {generation}"
        );
        let releaser = {
            let (ctx, key) = (ctx.clone(), key.clone());
            tokio::spawn(async move { ctx.release_keeps_gen(&key, generation).await })
        };
        join(releaser).await;
        ensure_eq!(
            list_on_a_task(&ctx, &user).await,
            Vec::new(),
            "C10",
            "the listing sees a release that completed before it",
            "after the release at gen {generation}"
        );
    }
}

/// C10: 50 slots of one user (unusual names among them) are all listed with
/// their gens; after every fifth is released, exactly the other 40 are.
pub async fn many_slots_all_listed(subject: Subject) {
    let ctx = Ctx::new(subject, "listing::many_slots_all_listed");
    let user = ctx.user(1);
    let mut slots = unusual_slots();
    slots.extend((slots.len()..50).map(|i| format!("device-{i:02}")));
    let mut expected = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        let generation = i64::try_from(i % 3).unwrap_or(0) + 1;
        let claim_id = format!("c{i}");
        ctx.session(&user.key(slot.clone()), generation, &claim_id)
            .await;
        expected.push(listed(slot, generation, &claim_id));
    }
    expected.sort_by(|a, b| a.slot.cmp(&b.slot));
    ensure_eq!(
        ctx.list(&user).await,
        expected,
        "C10",
        "the listing holds every slot whose record holds an owner",
        "50 slots"
    );
    for session in expected.iter().step_by(5) {
        ctx.release_keeps_gen(&user.key(session.slot.clone()), session.generation)
            .await;
    }
    let kept: Vec<_> = expected
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 5 != 0)
        .map(|(_, session)| session.clone())
        .collect();
    ensure_eq!(
        ctx.list(&user).await,
        kept,
        "C10",
        "a tombstone is not listed",
        "50 slots, every fifth released"
    );
}

/// Lists on a task of its own, so the read does not ride on the writer's
/// task (as a cache per task or connection would).
async fn list_on_a_task(ctx: &Ctx, user: &UserKey) -> Vec<unique_core::UserSession> {
    let (ctx, user) = (ctx.clone(), user.clone());
    join(tokio::spawn(async move { ctx.list(&user).await })).await
}

/// C10 (pooled sessions, `docs/design.md#pooled-sessions`): the places of a user's pool,
/// slots `#0` to `#<k-1>` (`#` then the index), are slots like any other: claimed, read back,
/// read in one batch, listed with their slot beside the user's named and default slots, and a
/// released one drops out. The login time stored in the owner (`since`) survives every read
/// and the listing; an owner without one reads without one.
pub async fn pool_places_round_trip(subject: Subject) {
    let ctx = Ctx::new(subject, "listing::pool_places_round_trip");
    let user = ctx.user(1);
    let since = |i: usize| 1_700_000_000_000 + u64::try_from(i).unwrap_or(0);
    let pooled = |i: usize| Owner {
        since: Some(since(i)),
        ..owner_for(&format!("place-{i}"))
    };
    let places: Vec<usize> = vec![0, 1, 2, 3, 10, 999];
    for &i in &places {
        let key = user.key(unique_core::place_slot(i));
        let snap = ctx.unwritten(&key).await;
        let written = ctx
            .store
            .claim_cas(&key, &pooled(i), &format!("place-{i}"), &snap)
            .await;
        ensure_eq!(
            written.ok(),
            Some(CasOutcome::Written { generation: 1 }),
            "C4",
            "a first login on a pool place writes gen 1",
            "place #{i}"
        );
        let read = ctx.read(&key).await;
        ensure_eq!(
            read.owner,
            Some(pooled(i)),
            "C2",
            "a place's record reads back with its owner and login time",
            "place #{i}"
        );
    }
    ctx.session(&user.key("pc"), 1, "pc-1").await;
    ctx.session(&user.key(""), 1, "default-1").await;
    let keys: Vec<Key> = places
        .iter()
        .map(|&i| user.key(unique_core::place_slot(i)))
        .collect();
    let batch = ctx.store.read_owners(&keys).await;
    let owners: Vec<Option<Owner>> = batch
        .into_iter()
        .flatten()
        .map(|state| state.ok().and_then(|s| s.owner))
        .collect();
    let expected: Vec<Option<Owner>> = places.iter().map(|&i| Some(pooled(i))).collect();
    ensure_eq!(
        owners,
        expected,
        "C2",
        "a batch read of the places answers each with its owner and login time"
    );
    let mut listing = vec![listed("", 1, "default-1"), listed("pc", 1, "pc-1")];
    listing.extend(places.iter().map(|&i| UserSession {
        slot: unique_core::place_slot(i),
        generation: 1,
        owner: pooled(i),
    }));
    listing.sort_by(|a, b| a.slot.cmp(&b.slot));
    ensure_eq!(
        ctx.list(&user).await,
        listing,
        "C10",
        "the listing holds every place with its slot, gen, owner and login time",
        "six places beside slots \"\" and \"pc\""
    );
    ctx.release_keeps_gen(&user.key("#2"), 1).await;
    listing.retain(|s| s.slot != "#2");
    ensure_eq!(
        ctx.list(&user).await,
        listing,
        "C10",
        "a released place is not listed"
    );
    ensure_eq!(
        ctx.list(&ctx.user(10)).await,
        Vec::new(),
        "C10",
        "a user whose uid extends this one's lists none of its places"
    );
}
