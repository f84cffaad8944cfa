//! C13 counting the sessions online: a store whose `count_online` answers counts exactly the
//! records holding a session, and the count follows the claims and releases that complete.
//!
//! The count is of the whole store, so these cases cannot share a table with other cases the
//! way the rest of the suite does: [`online_count_tests!`](crate::online_count_tests) runs
//! them, each on a store no other test writes while it runs.

use unique_core::{CasOutcome, Store};

use crate::Subject;
use crate::support::{Ctx, join, owner_for, owner_json};

/// The store's count; `None` (the store cannot count) or an error fails the case.
async fn count(ctx: &Ctx, after: &str) -> u64 {
    match ctx.store.count_online().await {
        Ok(Some(online)) => online,
        Ok(None) => crate::check::violated(
            "C13",
            "a store run through the count cases counts its sessions",
            format_args!("count_online answered None {after}"),
        ),
        Err(e) => crate::check::violated(
            "C13",
            "count_online answers on a healthy store",
            format_args!("count_online failed {after}: {e}"),
        ),
    }
}

/// Checks the count is `base + expected` after `what`.
async fn ensure_count(ctx: &Ctx, base: u64, expected: u64, what: &str) {
    let online = count(ctx, what).await;
    ensure_eq!(
        online,
        base + expected,
        "C13",
        "the count is the number of records holding a session",
        "{what} ({expected} held above the {base} counted before the case)"
    );
}

/// C13: claims add their sessions, a replaced session or a lost race adds none, a release
/// removes one (once, however often it is repeated), a claim over a tombstone adds one back;
/// tombstones, gen-0 records and absent keys are not counted, a raw owner without a cid is.
pub async fn counts_exactly_the_sessions_held(subject: Subject) {
    let ctx = Ctx::new(subject, "online_count::counts_exactly_the_sessions_held");
    let base = count(&ctx, "before any write").await;
    let (one, two, pc) = (ctx.key(1), ctx.key(2), ctx.user(1).key("pc"));
    for (key, claim_id) in [(&one, "one-1"), (&two, "two-1"), (&pc, "pc-1")] {
        let snap = ctx.unwritten(key).await;
        ctx.win(key, claim_id, &snap, 1).await;
    }
    ensure_count(&ctx, base, 3, "after three first logins").await;

    let stale = ctx.read(&one).await;
    ctx.win(&one, "one-2", &stale, 2).await;
    ensure_count(&ctx, base, 3, "after a session replaced another on its key").await;
    let lost = ctx
        .store
        .claim_cas(&one, &owner_for("one-3"), "one-3", &stale)
        .await;
    ensure!(
        matches!(lost, Ok(CasOutcome::LostRace { .. })),
        "C3",
        "a claim from a stale snapshot loses",
        "answered {lost:?}"
    );
    ensure_count(&ctx, base, 3, "after a lost race").await;

    ctx.release_keeps_gen(&two, 1).await;
    ensure_count(&ctx, base, 2, "after a release").await;
    ctx.release_keeps_gen(&two, 1).await;
    ensure_count(&ctx, base, 2, "after the same release again").await;

    // Records no claim writes: a gen-0 record with an owner and a tombstone are not
    // sessions; an owner without a cid is.
    ctx.put(&ctx.key(3), 0, Some(&owner_json("raw-0")), Some("raw-0"))
        .await;
    ctx.put(&ctx.key(4), 5, Some(""), None).await;
    ensure_count(
        &ctx,
        base,
        2,
        "after a raw gen-0 record and a raw tombstone",
    )
    .await;
    ctx.put(&ctx.key(5), 5, Some(&owner_json("raw-5")), None)
        .await;
    ensure_count(&ctx, base, 3, "after a raw owner without a cid").await;

    let tombstone = ctx.read(&two).await;
    ctx.win(&two, "two-2", &tombstone, 2).await;
    ensure_count(&ctx, base, 4, "after a claim over a tombstone").await;
}

/// C13: claims and releases that completed concurrently are all in the count made after
/// them.
pub async fn count_sees_completed_concurrent_writes(subject: Subject) {
    let ctx = Ctx::new(
        subject,
        "online_count::count_sees_completed_concurrent_writes",
    );
    let base = count(&ctx, "before any write").await;
    let uids = 1..=24;
    let claims: Vec<_> = uids
        .clone()
        .map(|uid| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let key = ctx.key(uid);
                let snap = ctx.unwritten(&key).await;
                ctx.win(&key, &format!("c{uid}"), &snap, 1).await;
            })
        })
        .collect();
    for claim in claims {
        join(claim).await;
    }
    ensure_count(&ctx, base, 24, "after 24 concurrent first logins").await;
    let releases: Vec<_> = uids
        .filter(|uid| uid % 2 == 0)
        .map(|uid| {
            let ctx = ctx.clone();
            tokio::spawn(async move { ctx.release_keeps_gen(&ctx.key(uid), 1).await })
        })
        .collect();
    for release in releases {
        join(release).await;
    }
    ensure_count(&ctx, base, 12, "after 12 concurrent releases").await;
}
