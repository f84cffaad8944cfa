//! Single-caller cases of the `Directory` contract (D1–D7, D9, D10).
//!
//! Time passes only on the store's clock ([`Subject::pass`]); callers pass
//! [`Subject::now`] unless a case says their clocks disagree.

use std::collections::HashSet;
use std::time::{Duration, UNIX_EPOCH};

use super::{
    Seen, Subject, TTL, ensure, fresh_token, lookup, release, seen, seen_opt, stored, verify_is,
};
use crate::check::refused;
use unique_lease::{Lease, MAX_TIME_MILLIS, MAX_TOKEN_LEN, MAX_TTL, STORE_CLOCK_RESOLUTION};

const MS: Duration = Duration::from_millis(1);

/// D7: a room nobody ever held reads as `None`.
pub async fn lookup_of_unknown_room_is_none(s: Subject) {
    let got = lookup(&*s.directory, "d7-unknown").await;
    ensure_eq!(
        seen_opt(got.as_ref()),
        None,
        "D7",
        "a room nobody held must read as none"
    );
}

/// D1: a free room is granted to the caller with a fresh token, an epoch >= 1 and
/// `ttl_left = ttl`; lookup and verify then see exactly that lease.
pub async fn ensure_grants_a_free_room(s: Subject) {
    let d = &*s.directory;
    let now = s.now();
    let lease = ensure(d, "d1-free", "a", now, TTL).await;
    ensure!(
        lease.room_id == "d1-free" && lease.is_held_by("a"),
        "D1",
        "a free room must be granted to the caller",
        "{lease:?}"
    );
    ensure!(
        !lease.lease_token.is_empty(),
        "D1",
        "a grant must carry a fresh token",
        "an empty token"
    );
    ensure!(
        lease.epoch >= 1,
        "D4",
        "epochs must start at 1",
        "epoch {}",
        lease.epoch
    );
    ensure_eq!(
        lease.ttl_left,
        TTL,
        "D1",
        "a grant must have the whole ttl left"
    );
    ensure!(
        lease.valid_at(now) && lease.expires_at == now + TTL - STORE_CLOCK_RESOLUTION,
        "D1",
        "a grant must be placed on the caller's clock at now + ttl, less the store clock's resolution",
        "{lease:?} asked at {now:?}"
    );
    ensure_eq!(
        seen_opt(lookup(d, "d1-free").await.as_ref()),
        Some(seen(&lease)),
        "D1",
        "a grant must be stored as returned"
    );
    verify_is(d, "d1-free", "a", &lease.lease_token, now, true).await;
}

/// D1, D9: the ttl is rounded up to the millisecond.
pub async fn grant_uses_millisecond_resolution(s: Subject) {
    let d = &*s.directory;
    let lease = ensure(d, "d9-ms", "a", s.now(), Duration::from_micros(1_500)).await;
    ensure_eq!(
        lease.ttl_left,
        2 * MS,
        "D9",
        "the ttl must be rounded up to the millisecond"
    );
    let stored = stored(d, "d9-ms").await;
    ensure_eq!(
        stored.ttl_left,
        lease.ttl_left,
        "D9",
        "a lease must be stored in whole milliseconds, as returned"
    );
    s.pass(MS);
    ensure_eq!(
        stored_left(&s, "d9-ms").await,
        MS,
        "D9",
        "a lease must be stored in whole milliseconds, as returned",
        "one millisecond later"
    );
}

/// D9: a zero ttl means the default 30 s.
pub async fn zero_ttl_means_thirty_seconds(s: Subject) {
    let lease = ensure(&*s.directory, "d9-zero-ttl", "a", s.now(), Duration::ZERO).await;
    ensure_eq!(
        lease.ttl_left,
        Duration::from_secs(30),
        "D9",
        "a zero ttl must mean 30 s"
    );
}

/// D2: the holder renewing before expiry keeps token and epoch and moves the expiry
/// to the store's now + ttl.
pub async fn renewal_keeps_token_and_epoch(s: Subject) {
    let d = &*s.directory;
    let first = ensure(d, "d2-renew", "a", s.now(), TTL).await;
    for step in 1..=5_u64 {
        s.pass(Duration::from_secs(4));
        let renewed = ensure(d, "d2-renew", "a", s.now(), TTL).await;
        ensure_eq!(
            (&renewed.lease_token, renewed.epoch),
            (&first.lease_token, first.epoch),
            "D2",
            "a renewal must keep token and epoch",
            "renewal {step}"
        );
        ensure_eq!(
            renewed.ttl_left,
            TTL,
            "D2",
            "a renewal must expire at max(expiry, now + ttl)",
            "renewal {step}"
        );
        verify_is(d, "d2-renew", "a", &first.lease_token, s.now(), true).await;
    }
    s.pass(TTL.saturating_sub(MS));
    ensure_eq!(
        stored_left(&s, "d2-renew").await,
        MS,
        "D2",
        "a renewal must be stored",
        "the last renewal's expiry"
    );
}

/// D2, D10: a renewal never shortens the lease: a smaller ttl, or a caller whose
/// clock lags, leaves the expiry where it was.
pub async fn renewal_never_shortens_the_lease(s: Subject) {
    let d = &*s.directory;
    let long = ensure(d, "d2-shorten", "a", s.now(), Duration::from_mins(1)).await;
    s.pass(Duration::from_secs(1));
    let short = ensure(d, "d2-shorten", "a", s.now(), Duration::from_secs(1)).await;
    ensure_eq!(
        (&short.lease_token, short.ttl_left),
        (&long.lease_token, Duration::from_secs(59)),
        "D2",
        "a renewal must never shorten the lease",
        "a renewal with a smaller ttl"
    );
    let lagging = s.now() - Duration::from_secs(5);
    let stale = ensure(d, "d2-shorten", "a", lagging, TTL).await;
    ensure_eq!(
        (&stale.lease_token, stale.ttl_left),
        (&long.lease_token, Duration::from_secs(59)),
        "D2",
        "a renewal must keep the token and never shorten the lease",
        "a renewal from a caller whose clock lags 5 s"
    );
    ensure_eq!(
        stored_left(&s, "d2-shorten").await,
        Duration::from_secs(59),
        "D2",
        "a renewal must never shorten the stored lease"
    );
}

/// D3: another node's valid lease is returned unchanged and nothing is written.
pub async fn valid_lease_of_another_node_is_returned_unchanged(s: Subject) {
    let d = &*s.directory;
    let held = ensure(d, "d3-held", "a", s.now(), TTL).await;
    let mut passed = Duration::ZERO;
    for (node, at) in [("b", 0), ("c", 5_000), ("b", 9_999)] {
        let at = Duration::from_millis(at);
        s.pass(at.saturating_sub(passed));
        passed = at;
        let got = ensure(d, "d3-held", node, s.now(), Duration::from_mins(10)).await;
        ensure_eq!(
            seen(&got),
            Seen {
                ttl_left: TTL.saturating_sub(at),
                ..seen(&held)
            },
            "D3",
            "another node's valid lease must be returned unchanged",
            "{node} asking {at:?} after a's grant"
        );
    }
    ensure_eq!(
        stored_left(&s, "d3-held").await,
        MS,
        "D3",
        "asking for a room held elsewhere must write nothing"
    );
    verify_is(d, "d3-held", "a", &held.lease_token, s.now(), true).await;
    verify_is(d, "d3-held", "b", &held.lease_token, s.now(), false).await;
}

/// D1, D4: after expiry another node takes over with a new token and a higher
/// epoch; the old token is rejected from then on.
pub async fn takeover_after_expiry_issues_new_token_and_higher_epoch(s: Subject) {
    let d = &*s.directory;
    let old = ensure(d, "d4-takeover", "a", s.now(), TTL).await;
    s.pass(TTL + Duration::from_secs(1));
    let new = ensure(d, "d4-takeover", "b", s.now(), TTL).await;
    ensure!(
        new.is_held_by("b") && new.lease_token != old.lease_token,
        "D1",
        "an expired room must be granted to the caller with a fresh token",
        "{new:?} after {old:?}"
    );
    ensure_higher_epoch(&new, &old);
    ensure_eq!(
        new.ttl_left,
        TTL,
        "D1",
        "a grant must have the whole ttl left"
    );
    verify_is(d, "d4-takeover", "a", &old.lease_token, s.now(), false).await;
    verify_is(d, "d4-takeover", "b", &new.lease_token, s.now(), true).await;
    // The old holder coming back is told b has the room.
    let back = ensure(d, "d4-takeover", "a", s.now(), TTL).await;
    ensure_eq!(
        seen(&back),
        seen(&new),
        "D3",
        "another node's valid lease must be returned unchanged",
        "the old holder coming back"
    );
}

/// D1: the expiry instant itself is expired; one millisecond before it is not.
pub async fn expiry_instant_is_already_expired(s: Subject) {
    let d = &*s.directory;
    let old = ensure(d, "d1-instant", "a", s.now(), TTL).await;
    s.pass(TTL.saturating_sub(MS));
    let still = ensure(d, "d1-instant", "b", s.now(), TTL).await;
    ensure_eq!(
        seen(&still),
        Seen {
            ttl_left: MS,
            ..seen(&old)
        },
        "D3",
        "a lease must be valid until its expiry instant",
        "one millisecond before it"
    );
    s.pass(MS);
    let taken = ensure(d, "d1-instant", "b", s.now(), TTL).await;
    ensure!(
        taken.is_held_by("b"),
        "D1",
        "a lease must be expired at its expiry instant",
        "b was told {taken:?}"
    );
    ensure_higher_epoch(&taken, &old);
}

/// D1: the holder itself returning after expiry starts a new holding: new token,
/// higher epoch, and its old token is dead.
pub async fn holder_returning_after_expiry_gets_a_new_token(s: Subject) {
    let d = &*s.directory;
    let old = ensure(d, "d1-return", "a", s.now(), TTL).await;
    s.pass(TTL);
    let new = ensure(d, "d1-return", "a", s.now(), TTL).await;
    ensure!(
        new.is_held_by("a") && new.lease_token != old.lease_token,
        "D1",
        "the holder coming back after expiry must get a new lease with a fresh token",
        "{new:?} after {old:?}"
    );
    ensure_higher_epoch(&new, &old);
    verify_is(d, "d1-return", "a", &old.lease_token, s.now(), false).await;
    verify_is(d, "d1-return", "a", &new.lease_token, s.now(), true).await;
}

/// D4: epochs strictly increase over many holdings ended by release or by expiry,
/// and no token is ever issued twice.
pub async fn epoch_grows_across_release_and_expiry(s: Subject) {
    let d = &*s.directory;
    let mut last = 0;
    let mut tokens = HashSet::new();
    for round in 0..20_u32 {
        let node = ["a", "b", "c"][(round % 3) as usize];
        let lease = ensure(d, "d4-cycle", node, s.now(), TTL).await;
        ensure!(
            lease.is_held_by(node),
            "D1",
            "a free or expired room must be granted to the caller",
            "round {round}: {node} was told {lease:?}"
        );
        ensure!(
            lease.epoch > last,
            "D4",
            "a new lease must carry a higher epoch, across release and expiry",
            "round {round}: epoch {} after {last}",
            lease.epoch
        );
        ensure!(
            tokens.insert(lease.lease_token.clone()),
            "D1",
            "a grant must carry a fresh token",
            "round {round}: token {:?} reused",
            lease.lease_token
        );
        last = lease.epoch;
        if round % 2 == 0 {
            ensure!(
                release(d, "d4-cycle", node, &lease.lease_token).await,
                "D6",
                "the holder's release must delete its lease",
                "round {round}: refused"
            );
            ensure!(
                lookup(d, "d4-cycle").await.is_none(),
                "D6",
                "a release must delete the lease",
                "round {round}"
            );
        } else {
            s.pass(TTL);
        }
    }
}

/// D5: only the current holder's node and token verify.
pub async fn verify_accepts_only_the_current_holding(s: Subject) {
    let d = &*s.directory;
    let now = s.now();
    let lease = ensure(d, "d5-verify", "a", now, TTL).await;
    let token = &lease.lease_token;
    verify_is(d, "d5-verify", "a", token, now, true).await;
    verify_is(d, "d5-verify", "b", token, now, false).await;
    verify_is(d, "d5-verify", "a", &fresh_token(), now, false).await;
    let prefix = &token[..token.len() - 1];
    verify_is(d, "d5-verify", "a", prefix, now, false).await;
    verify_is(d, "d5-other-room", "a", token, now, false).await;
}

/// D5: a lease is rejected from its expiry instant on, even with the right token.
pub async fn verify_rejects_an_expired_lease(s: Subject) {
    let d = &*s.directory;
    let lease = ensure(d, "d5-expired", "a", s.now(), TTL).await;
    let token = &lease.lease_token;
    s.pass(TTL.saturating_sub(MS));
    verify_is(d, "d5-expired", "a", token, s.now(), true).await;
    s.pass(MS);
    verify_is(d, "d5-expired", "a", token, s.now(), false).await;
    s.pass(Duration::from_hours(24 * 365));
    verify_is(d, "d5-expired", "a", token, s.now(), false).await;
}

/// D5, D10: verify never renews and never takes over, whatever it answers, and a
/// verifier's clock running behind cannot revive an expired lease.
pub async fn verify_never_renews_or_takes_over(s: Subject) {
    let d = &*s.directory;
    let lease = ensure(d, "d5-readonly", "a", s.now(), TTL).await;
    let token = &lease.lease_token;
    s.pass(TTL.saturating_sub(Duration::from_secs(1)));
    verify_is(d, "d5-readonly", "a", token, s.now(), true).await;
    s.pass(Duration::from_secs(6));
    verify_is(d, "d5-readonly", "a", token, s.now(), false).await;
    verify_is(d, "d5-readonly", "b", token, s.now(), false).await;
    let behind = s.now() - TTL;
    verify_is(d, "d5-readonly", "a", token, behind, false).await;
    ensure_eq!(
        seen_opt(lookup(d, "d5-readonly").await.as_ref()),
        Some(Seen {
            ttl_left: Duration::ZERO,
            ..seen(&lease)
        }),
        "D5",
        "verify_owner must never write"
    );
}

/// D5: a room without a lease verifies as `false` (not an error).
pub async fn verify_of_unknown_room_is_false(s: Subject) {
    let d = &*s.directory;
    verify_is(d, "d5-none", "a", &fresh_token(), s.now(), false).await;
    ensure!(
        lookup(d, "d5-none").await.is_none(),
        "D5",
        "verify_owner must never write",
        "a lease appeared"
    );
}

/// D6: the holder's release deletes the lease; a second release is `false`; the
/// room is then free for anyone, with a higher epoch.
pub async fn release_by_holder_deletes_the_lease(s: Subject) {
    let d = &*s.directory;
    let now = s.now();
    let lease = ensure(d, "d6-release", "a", now, TTL).await;
    ensure!(
        release(d, "d6-release", "a", &lease.lease_token).await,
        "D6",
        "the holder's release must delete its lease and answer true",
        "refused"
    );
    ensure!(
        lookup(d, "d6-release").await.is_none(),
        "D6",
        "a release must delete the lease",
        "a lease remained"
    );
    verify_is(d, "d6-release", "a", &lease.lease_token, now, false).await;
    ensure!(
        !release(d, "d6-release", "a", &lease.lease_token).await,
        "D6",
        "a release must answer false when there is no lease to delete",
        "a second release answered true"
    );
    let next = ensure(d, "d6-release", "b", now, TTL).await;
    ensure!(
        next.is_held_by("b"),
        "D1",
        "a released room must be granted at once",
        "b was told {next:?}"
    );
    ensure!(
        next.epoch > lease.epoch,
        "D4",
        "a new lease must carry a higher epoch, across release",
        "epoch {} after {}",
        next.epoch,
        lease.epoch
    );
}

/// D6: another node's release is `false` and changes nothing; so is releasing a
/// room that has no lease.
pub async fn release_by_another_node_changes_nothing(s: Subject) {
    let d = &*s.directory;
    let now = s.now();
    let lease = ensure(d, "d6-other", "a", now, TTL).await;
    ensure!(
        !release(d, "d6-other", "b", &lease.lease_token).await,
        "D6",
        "a release by another node must answer false",
        "b's release of a's lease answered true"
    );
    ensure_eq!(
        seen_opt(lookup(d, "d6-other").await.as_ref()),
        Some(seen(&lease)),
        "D6",
        "a release by another node must change nothing"
    );
    verify_is(d, "d6-other", "a", &lease.lease_token, now, true).await;
    ensure!(
        !release(d, "d6-never-held", "a", &fresh_token()).await,
        "D6",
        "a release must answer false when there is no lease to delete",
        "a room never held"
    );
}

/// D6: a holder may release its own expired lease; once another node took over,
/// the old holder's release is refused.
pub async fn release_of_an_expired_lease_by_its_holder(s: Subject) {
    let d = &*s.directory;
    let a = ensure(d, "d6-expired", "a", s.now(), TTL).await;
    s.pass(TTL);
    let kept = stored(d, "d6-expired").await;
    ensure!(
        kept.same_holding(&a) && kept.ttl_left.is_zero(),
        "D7",
        "lookup must return the stored lease as it is",
        "{kept:?} at its expiry instant"
    );
    ensure!(
        release(d, "d6-expired", "a", &a.lease_token).await,
        "D6",
        "the holder's release must delete its lease, expired or not",
        "an expired lease nobody took over: refused"
    );
    ensure!(
        lookup(d, "d6-expired").await.is_none(),
        "D6",
        "a release must delete the lease",
        "a lease remained"
    );

    let a = ensure(d, "d6-expired", "a", s.now(), TTL).await;
    s.pass(TTL);
    let b = ensure(d, "d6-expired", "b", s.now(), TTL).await;
    ensure!(
        b.is_held_by("b"),
        "D1",
        "an expired room must be granted to the caller",
        "b was told {b:?}"
    );
    ensure!(
        !release(d, "d6-expired", "a", &a.lease_token).await,
        "D6",
        "a release by a node that no longer holds the lease must answer false",
        "a's release after b took over answered true"
    );
    ensure_eq!(
        seen_opt(lookup(d, "d6-expired").await.as_ref()),
        Some(seen(&b)),
        "D6",
        "a refused release must change nothing"
    );
}

/// D7: lookup returns an expired lease as stored, with no time left, and never
/// takes over.
pub async fn lookup_returns_an_expired_lease_without_taking_over(s: Subject) {
    let d = &*s.directory;
    let lease = ensure(d, "d7-expired", "a", s.now(), TTL).await;
    ensure_eq!(
        seen(&stored(d, "d7-expired").await),
        seen(&lease),
        "D7",
        "lookup must return the stored lease"
    );
    s.pass(TTL);
    let expired = Seen {
        ttl_left: Duration::ZERO,
        ..seen(&lease)
    };
    let kept = stored(d, "d7-expired").await;
    ensure_eq!(
        seen(&kept),
        expired.clone(),
        "D7",
        "lookup must return an expired lease with no time left"
    );
    ensure!(
        !kept.valid_at(kept.expires_at) && !kept.is_live(),
        "D7",
        "an expired lease must read as expired on the caller's clocks",
        "{kept:?}"
    );
    ensure_eq!(
        seen(&stored(d, "d7-expired").await),
        expired,
        "D7",
        "lookup must never write"
    );
}

/// D6: a release names its holding by token: the holder's own node releasing with a token
/// of an earlier holding (a late release, after the room ran out and the node was granted
/// it again) or a token never issued answers false and leaves the newer holding.
pub async fn release_with_another_token_changes_nothing(s: Subject) {
    let d = &*s.directory;
    let first = ensure(d, "d6-token", "a", s.now(), TTL).await;
    s.pass(TTL);
    let again = ensure(d, "d6-token", "a", s.now(), TTL).await;
    ensure!(
        again.is_held_by("a") && again.lease_token != first.lease_token,
        "D1",
        "a holder returning after expiry must get a new token",
        "{first:?} then {again:?}"
    );
    for (what, token) in [
        ("the earlier holding's token", first.lease_token.clone()),
        ("a token never issued", fresh_token()),
    ] {
        ensure!(
            !release(d, "d6-token", "a", &token).await,
            "D6",
            "a release with another token must answer false",
            "{what} released a's newer holding"
        );
        ensure_eq!(
            seen_opt(lookup(d, "d6-token").await.as_ref()),
            Some(seen(&again)),
            "D6",
            "a release with another token must change nothing",
            "{what}"
        );
    }
    ensure!(
        release(d, "d6-token", "a", &again.lease_token).await,
        "D6",
        "the holder's release must delete its lease",
        "the current token refused"
    );
}

/// D10: two directories on one store whose callers' clocks disagree by many ttls
/// never see two valid holdings: b's clock runs five ttls ahead and is told a holds
/// the room; a's clock runs five ttls behind and still renews; only the store's
/// clock passing the expiry frees the room, and then for b at once.
pub async fn callers_clocks_never_decide_expiry(s: Subject) {
    let (a_dir, b_dir) = (&*s.directory, &*s.peer);
    let ahead = |s: &Subject| s.now() + 5 * TTL;
    let behind = |s: &Subject| s.now() - 5 * TTL;
    let held = ensure(a_dir, "d10-skew", "a", s.now(), TTL).await;
    let told = ensure(b_dir, "d10-skew", "b", ahead(&s), TTL).await;
    ensure_eq!(
        seen(&told),
        seen(&held),
        "D10",
        "a caller's clock must never decide expiry",
        "b, whose clock runs 5 ttls ahead, asking for a's room"
    );
    verify_is(b_dir, "d10-skew", "a", &held.lease_token, ahead(&s), true).await;
    s.pass(TTL / 2);
    let renewed = ensure(a_dir, "d10-skew", "a", behind(&s), TTL).await;
    ensure_eq!(
        (&renewed.lease_token, renewed.ttl_left),
        (&held.lease_token, TTL),
        "D10",
        "a caller's clock must never decide expiry",
        "a, whose clock runs 5 ttls behind, renewing"
    );
    let told = ensure(b_dir, "d10-skew", "b", ahead(&s), TTL).await;
    ensure_eq!(
        (told.node_id.as_str(), &told.lease_token),
        ("a", &held.lease_token),
        "D10",
        "a caller's clock must never decide expiry",
        "b asking again after a's renewal"
    );
    s.pass(TTL);
    let b = ensure(b_dir, "d10-skew", "b", behind(&s), TTL).await;
    ensure!(
        b.is_held_by("b") && b.epoch > held.epoch,
        "D10",
        "a lease must expire by the store's clock, whatever the caller's",
        "b, whose clock now runs 5 ttls behind, was told {b:?} a ttl after a's renewal"
    );
    let a_view = ensure(a_dir, "d10-skew", "a", ahead(&s), TTL).await;
    ensure_eq!(
        (a_view.node_id.as_str(), &a_view.lease_token),
        ("b", &b.lease_token),
        "D10",
        "a caller's clock must never decide expiry",
        "a asking with its clock ahead after b took over"
    );
}

/// D10: a holder whose clock jumped far ahead gets the ttl it asked for, not an
/// expiry on its own clock: the room is free one ttl later.
pub async fn a_caller_clock_far_ahead_cannot_pin_a_room(s: Subject) {
    let d = &*s.directory;
    let far = s.now() + Duration::from_hours(24 * 365);
    let pinned = ensure(d, "d10-jump", "a", far, TTL).await;
    ensure_eq!(
        pinned.ttl_left,
        TTL,
        "D10",
        "a lease must last its ttl on the store's clock, whatever the caller's",
        "a grant asked with a clock a year ahead"
    );
    let renewed = ensure(d, "d10-jump", "a", far + TTL, TTL).await;
    ensure_eq!(
        renewed.ttl_left,
        TTL,
        "D10",
        "a lease must last its ttl on the store's clock, whatever the caller's",
        "a renewal asked with a clock a year ahead"
    );
    // The peer sees the renewed holding now: a store without a clock counts its ttl
    // from the moment an observer first sees a version (D10).
    lookup(&*s.peer, "d10-jump").await;
    s.pass(TTL);
    let taken = ensure(&*s.peer, "d10-jump", "b", s.now(), TTL).await;
    ensure!(
        taken.is_held_by("b"),
        "D10",
        "a lease must expire by the store's clock, whatever the caller's",
        "b was told {taken:?} a ttl after a's renewal"
    );
}

/// D8: rooms never interfere: holders, releases and epochs of one room leave
/// another alone.
pub async fn rooms_are_independent(s: Subject) {
    let d = &*s.directory;
    let now = s.now();
    let r1 = ensure(d, "d8-room-1", "a", now, TTL).await;
    let r2 = ensure(d, "d8-room-2", "b", now, TTL).await;
    ensure!(
        r1.is_held_by("a") && r2.is_held_by("b") && r1.lease_token != r2.lease_token,
        "D8",
        "rooms must never interfere",
        "{r1:?} and {r2:?}"
    );
    ensure_eq!(
        seen(&ensure(d, "d8-room-2", "a", now, TTL).await),
        seen(&r2),
        "D8",
        "rooms must never interfere",
        "a's holding of room 1 answered for room 2"
    );
    verify_is(d, "d8-room-2", "a", &r1.lease_token, now, false).await;
    ensure!(
        release(d, "d8-room-1", "a", &r1.lease_token).await,
        "D6",
        "the holder's release must delete its lease",
        "refused"
    );
    ensure!(
        !release(d, "d8-room-2", "a", &r1.lease_token).await,
        "D8",
        "rooms must never interfere",
        "a's release of room 2 answered true"
    );
    ensure_eq!(
        seen_opt(lookup(d, "d8-room-2").await.as_ref()),
        Some(seen(&r2)),
        "D8",
        "rooms must never interfere",
        "room 2 after room 1 was released"
    );
    ensure!(
        lookup(d, "d8-room-1").await.is_none(),
        "D6",
        "a release must delete the lease",
        "a lease remained"
    );
}

/// D9: bad ids, tokens, times and ttls are `InvalidParams`, and nothing is written.
pub async fn invalid_lease_inputs_are_rejected_before_storage(s: Subject) {
    let d = &*s.directory;
    let now = s.now();
    let long = "x".repeat(s.max_id_len + 1);
    let bad_ids = ["", "d9\nroom", "d9\0", "d9\u{1b}[31m", long.as_str()];
    for bad in bad_ids {
        let got = d.ensure_owner(bad, "a", now, TTL).await;
        refused(got, "D9", format_args!("ensure_owner room {bad:?}"));
        let got = d.ensure_owner("d9-bad-node", bad, now, TTL).await;
        refused(got, "D9", format_args!("ensure_owner node {bad:?}"));
        refused(
            d.lookup(bad).await,
            "D9",
            format_args!("lookup room {bad:?}"),
        );
        let got = d.release_owner(bad, "a", "t").await;
        refused(got, "D9", format_args!("release_owner room {bad:?}"));
        let got = d.release_owner("d9-bad-node", bad, "t").await;
        refused(got, "D9", format_args!("release_owner node {bad:?}"));
        let got = d.verify_owner(bad, "a", "t", now).await;
        refused(got, "D9", format_args!("verify_owner room {bad:?}"));
        let got = d.verify_owner("d9-bad-node", bad, "t", now).await;
        refused(got, "D9", format_args!("verify_owner node {bad:?}"));
    }
    ensure!(
        lookup(d, "d9-bad-node").await.is_none(),
        "D9",
        "a refused call must write nothing",
        "a lease appeared"
    );

    let long_token = "t".repeat(MAX_TOKEN_LEN + 1);
    for token in ["", "t\n", long_token.as_str()] {
        let got = d.verify_owner("d9-token", "a", token, now).await;
        refused(got, "D9", format_args!("verify_owner token {token:?}"));
    }

    let before_epoch = UNIX_EPOCH - Duration::from_millis(1);
    let too_late = UNIX_EPOCH + Duration::from_millis(MAX_TIME_MILLIS);
    for bad_now in [before_epoch, too_late] {
        let got = d.ensure_owner("d9-time", "a", bad_now, TTL).await;
        refused(got, "D9", format_args!("ensure_owner now {bad_now:?}"));
        let got = d.verify_owner("d9-time", "a", "t", bad_now).await;
        refused(got, "D9", format_args!("verify_owner now {bad_now:?}"));
    }
    let too_long = MAX_TTL + Duration::from_millis(1);
    let got = d.ensure_owner("d9-time", "a", now, too_long).await;
    refused(got, "D9", format_args!("ensure_owner ttl {too_long:?}"));
    ensure!(
        lookup(d, "d9-time").await.is_none(),
        "D9",
        "a refused call must write nothing",
        "a lease appeared"
    );
}

/// D9: ids of exactly the maximum length, with separators and non-ASCII, work and
/// do not collide with their prefixes.
pub async fn ids_at_the_length_limit_work(s: Subject) {
    let d = &*s.directory;
    let now = s.now();
    let mut room = String::from("d9:room/é");
    room.push_str(&"r".repeat(s.max_id_len - room.len()));
    let node = "n".repeat(s.max_id_len);
    let lease = ensure(d, &room, &node, now, TTL).await;
    ensure!(
        lease.is_held_by(&node),
        "D9",
        "ids of the maximum length must work",
        "{lease:?}"
    );
    ensure_eq!(
        seen_opt(lookup(d, &room).await.as_ref()),
        Some(seen(&lease)),
        "D9",
        "ids of the maximum length must work"
    );
    ensure!(
        lookup(d, "d9:room/é").await.is_none(),
        "D9",
        "an id must not collide with its prefix",
        "the prefix read a lease"
    );
    verify_is(d, &room, &node, &lease.lease_token, now, true).await;
    ensure!(
        release(d, &room, &node, &lease.lease_token).await,
        "D9",
        "ids of the maximum length must work",
        "the holder's release refused"
    );
}

/// D4: `new`, a lease granted after `old` ended, carries a higher epoch.
#[track_caller]
fn ensure_higher_epoch(new: &Lease, old: &Lease) {
    ensure!(
        new.epoch > old.epoch,
        "D4",
        "a new lease must carry a higher epoch",
        "epoch {} after {}",
        new.epoch,
        old.epoch
    );
}

/// The time the store says `room`'s stored lease has left.
async fn stored_left(s: &Subject, room: &str) -> Duration {
    stored(&*s.directory, room).await.ttl_left
}
