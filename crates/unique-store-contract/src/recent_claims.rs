//! C9 recent claims: each record keeps its last winning `(claim_id, gen)` pairs,
//! written with the claim and kept by a release, so a retry whose login was
//! replaced is answered `Superseded` instead of kicking the newer session.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use unique_core::{
    Arbiter, ClaimInput, Error, Key, KickOutcome, KickPayload, Kicker, OwnerState, RECENT_CLAIMS,
    RecentClaims, Store, async_trait,
};

use crate::Subject;
use crate::check::violated;
use crate::support::{Ctx, owner_json};

/// The record's recent claims as the store reports them.
async fn wins(ctx: &Ctx, key: &Key) -> Vec<(String, i64)> {
    ctx.read_all(key)
        .await
        .recent_claims
        .iter()
        .map(|(c, g)| (c.to_owned(), g))
        .collect()
}

fn expected(wins: &[(&str, i64)]) -> Vec<(String, i64)> {
    wins.iter().map(|(c, g)| ((*c).to_owned(), *g)).collect()
}

/// Claims `key` from a fresh full snapshot; the claim must win.
async fn claim_next(ctx: &Ctx, key: &Key, claim_id: &str) -> i64 {
    let snap = ctx.read_all(key).await;
    let next = if snap.exists { snap.generation + 1 } else { 1 };
    match ctx.claim(key, claim_id, &snap).await {
        Ok(generation) => generation,
        Err(e) => violated(
            "C9",
            "an uncontended claim from a full snapshot wins",
            format_args!("claim {claim_id} at gen {next} did not win: {e:?}"),
        ),
    }
}

/// C9: every form of claim appends its win (first login, double pin,
/// tombstone), and a release keeps the list.
pub async fn claims_append_their_wins(subject: Subject) {
    let ctx = Ctx::new(subject, "recent_claims::claims_append_their_wins");
    let key = ctx.key(1);
    claim_next(&ctx, &key, "first").await;
    ensure_eq!(
        wins(&ctx, &key).await,
        expected(&[("first", 1)]),
        "C9",
        "a first login writes its win",
    );
    claim_next(&ctx, &key, "second").await;
    ensure_eq!(
        wins(&ctx, &key).await,
        expected(&[("first", 1), ("second", 2)]),
        "C9",
        "a double pin appends its win to the list",
    );
    ensure!(
        ctx.release(&key, 2).await,
        "C5",
        "a release at the stored gen must answer true",
        "release at gen 2"
    );
    ensure_eq!(
        wins(&ctx, &key).await,
        expected(&[("first", 1), ("second", 2)]),
        "C9",
        "a release keeps the recent claims",
    );
    claim_next(&ctx, &key, "third").await;
    ensure_eq!(
        wins(&ctx, &key).await,
        expected(&[("first", 1), ("second", 2), ("third", 3)]),
        "C9",
        "a claim of a tombstone appends its win",
    );
}

/// C9: the list keeps the last [`RECENT_CLAIMS`] wins, oldest dropped first.
pub async fn recent_claims_keep_the_last_ones(subject: Subject) {
    let ctx = Ctx::new(subject, "recent_claims::recent_claims_keep_the_last_ones");
    let key = ctx.key(1);
    let kept = i64::try_from(RECENT_CLAIMS).expect("a small constant");
    let total = kept + 3;
    for generation in 1..=total {
        claim_next(&ctx, &key, &format!("c{generation}")).await;
    }
    let want: Vec<_> = (total - kept + 1..=total)
        .map(|g| (format!("c{g}"), g))
        .collect();
    ensure_eq!(
        wins(&ctx, &key).await,
        want,
        "C9",
        "a record keeps exactly the last RECENT_CLAIMS wins, oldest first",
    );
}

/// C9: a lost race writes no win, and a claim from a stale snapshot cannot
/// replace the list.
pub async fn lost_race_writes_no_win(subject: Subject) {
    let ctx = Ctx::new(subject, "recent_claims::lost_race_writes_no_win");
    let key = ctx.key(1);
    let stale = ctx.read_all(&key).await;
    claim_next(&ctx, &key, "winner").await;
    if let Ok(generation) = ctx.claim(&key, "late", &stale).await {
        violated(
            "C3",
            "a claim from a stale snapshot must lose",
            format_args!("late first login wrote gen {generation}"),
        );
    }
    ensure_eq!(
        wins(&ctx, &key).await,
        expected(&[("winner", 1)]),
        "C9",
        "a lost race leaves the recent claims as they were",
    );
}

/// C9: an unreadable `won` attribute reads as no recent claims and never
/// locks the key: the next claim wins and starts the list again.
pub async fn unreadable_list_reads_empty(subject: Subject) {
    let ctx = Ctx::new(subject, "recent_claims::unreadable_list_reads_empty");
    let key = ctx.key(1);
    let owner = owner_json("old");
    ctx.put_with_won(&key, 4, Some(&owner), Some("old"), Some("{not a list"))
        .await;
    let snap = ctx.read_all(&key).await;
    ensure_eq!(
        snap.recent_claims,
        RecentClaims::new(),
        "C9",
        "an unreadable won attribute reads as no recent claims",
    );
    claim_next(&ctx, &key, "next").await;
    ensure_eq!(
        wins(&ctx, &key).await,
        expected(&[("next", 5)]),
        "C9",
        "a claim over an unreadable list writes its own win",
    );
}

/// Counts the kicks it is asked for and confirms each.
#[derive(Default)]
struct CountingKicker(Arc<AtomicUsize>);

#[async_trait]
impl Kicker for CountingKicker {
    async fn kick(&self, _endpoint: &str, _payload: &KickPayload, _t: Duration) -> KickOutcome {
        self.0.fetch_add(1, Ordering::SeqCst);
        KickOutcome::Confirmed
    }
}

fn login(key: &Key, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: crate::support::owner_for(claim_id),
        claim_id: claim_id.to_owned(),
    }
}

/// Runs `claim_id`'s retry and checks it is answered `Superseded` with `won`
/// and `current`, kicking nobody and writing nothing.
async fn ensure_superseded(
    ctx: &Ctx,
    arbiter: &Arbiter<Arc<dyn Store>>,
    kicks: &AtomicUsize,
    key: &Key,
    claim_id: &str,
    (won, current): (i64, i64),
) {
    let before: OwnerState = ctx.read_all(key).await;
    let kicked_before = kicks.load(Ordering::SeqCst);
    match arbiter.claim(&login(key, claim_id)).await {
        Err(Error::Superseded {
            generation,
            current: now,
        }) => ensure!(
            (generation, now) == (won, current),
            "C9",
            "a superseded retry reports the gen it won and the key's gen",
            "retry of {claim_id}: superseded with won {generation}, current {now}; \
             expected {won}, {current}"
        ),
        other => violated(
            "C9",
            "a retry of a claim_id that won an earlier gen is superseded",
            format_args!("retry of {claim_id} (won gen {won}, key at {current}): {other:?}"),
        ),
    }
    ensure_eq!(
        kicks.load(Ordering::SeqCst),
        kicked_before,
        "C9",
        "a superseded claim kicks nobody",
    );
    ensure_eq!(
        ctx.read_all(key).await,
        before,
        "C9",
        "a superseded claim writes nothing",
    );
}

fn counting_arbiter(ctx: &Ctx) -> (Arbiter<Arc<dyn Store>>, Arc<AtomicUsize>) {
    let kicks = Arc::new(AtomicUsize::new(0));
    let arbiter = Arbiter::builder(Arc::clone(&ctx.store))
        .kicker(CountingKicker(Arc::clone(&kicks)))
        .build();
    (arbiter, kicks)
}

/// C9/I4 through the Arbiter: login A wins gen 1 (its answer lost), login B
/// replaces it at gen 2, then A's retry arrives: it is superseded, kicks
/// nobody and writes nothing, while B's own retry is still a replay.
pub async fn superseded_retry_neither_kicks_nor_writes(subject: Subject) {
    let ctx = Ctx::new(
        subject,
        "recent_claims::superseded_retry_neither_kicks_nor_writes",
    );
    let key = ctx.key(1);
    let (arbiter, kicks) = counting_arbiter(&ctx);
    for (claim_id, generation) in [("login-a", 1), ("login-b", 2)] {
        match arbiter.claim(&login(&key, claim_id)).await {
            Ok(outcome) if outcome.generation == generation => {}
            other => violated(
                "C9",
                "an uncontended login through the Arbiter wins the next gen",
                format_args!("{claim_id}: {other:?}"),
            ),
        }
    }
    ensure_superseded(&ctx, &arbiter, &kicks, &key, "login-a", (1, 2)).await;
    match arbiter.claim(&login(&key, "login-b")).await {
        Ok(outcome) if outcome.replayed && outcome.generation == 2 => {}
        other => violated(
            "I4",
            "a retry of the current claim_id is a replay",
            format_args!("login-b again: {other:?}"),
        ),
    }
}

/// C9 after a logout: a released login's retry is superseded too (a logout
/// ends the login for good; a new login uses a new claim_id).
pub async fn superseded_after_logout(subject: Subject) {
    let ctx = Ctx::new(subject, "recent_claims::superseded_after_logout");
    let key = ctx.key(1);
    let (arbiter, kicks) = counting_arbiter(&ctx);
    match arbiter.claim(&login(&key, "login-a")).await {
        Ok(outcome) if outcome.generation == 1 => {}
        other => violated(
            "C9",
            "a first login through the Arbiter wins gen 1",
            format_args!("login-a: {other:?}"),
        ),
    }
    ensure!(
        ctx.release(&key, 1).await,
        "C5",
        "a release at the stored gen must answer true",
        "release at gen 1"
    );
    ensure_superseded(&ctx, &arbiter, &kicks, &key, "login-a", (1, 1)).await;
}
