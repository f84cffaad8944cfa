//! Expiry on the store's clock: takeover after the deadline, never on a caller's clock,
//! and epochs that grow across expiry and release (D1, D4, D7, D10).

use std::collections::HashSet;
use std::time::Duration;

use super::{MS, ensure_higher_epoch};
use crate::{Seen, Subject, TTL, ensure, lookup, release, seen, stored, verify_is};

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
