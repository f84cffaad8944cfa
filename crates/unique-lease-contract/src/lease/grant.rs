//! Granting and renewing: a free room is granted, its holder renews it, any other node
//! is told who holds it (D1-D4, D7, D8).

use std::time::Duration;

use super::{MS, stored_left};
use crate::{Seen, Subject, TTL, ensure, lookup, release, seen, seen_opt, stored, verify_is};
use unique_lease::STORE_CLOCK_RESOLUTION;

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
