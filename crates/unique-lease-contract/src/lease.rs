//! Single-caller cases of the `Directory` contract (D1–D7, D9).

use std::collections::HashSet;
use std::time::{Duration, UNIX_EPOCH};

use super::{
    Subject, TTL, ensure, fresh_token, lookup, plus, release, start_time, stored, verify_is,
    whole_ms,
};
use crate::check::refused;
use unique_lease::{Lease, MAX_ID_LEN, MAX_TIME_MILLIS, MAX_TOKEN_LEN, MAX_TTL};

/// D7: a room nobody ever held reads as `None`.
pub async fn lookup_of_unknown_room_is_none(s: Subject) {
    let seen = lookup(&*s.directory, "d7-unknown").await;
    ensure_eq!(seen, None, "D7", "a room nobody held must read as none");
}

/// D1: a free room is granted to the caller with a fresh token, an epoch >= 1 and
/// `expires_at = now + ttl`; lookup and verify then see exactly that lease.
pub async fn ensure_grants_a_free_room(s: Subject) {
    let d = &*s.directory;
    let now = start_time();
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
        lease.expires_at,
        whole_ms(now) + TTL,
        "D1",
        "a grant must expire at now + ttl"
    );
    ensure!(
        lease.valid_at(now),
        "D1",
        "a grant must be valid at now",
        "{lease:?}"
    );
    ensure_eq!(
        lookup(d, "d1-free").await,
        Some(lease.clone()),
        "D1",
        "a grant must be stored as returned"
    );
    verify_is(d, "d1-free", "a", &lease.lease_token, now, true).await;
}

/// D1, D9: `now` is truncated to the millisecond and the ttl rounded up to one.
pub async fn grant_uses_millisecond_resolution(s: Subject) {
    let d = &*s.directory;
    let now = whole_ms(start_time()) + Duration::from_micros(999);
    let ttl = Duration::from_micros(1_500);
    let lease = ensure(d, "d9-ms", "a", now, ttl).await;
    ensure_eq!(
        lease.expires_at,
        plus(whole_ms(now), 2),
        "D9",
        "now must be truncated to the millisecond and the ttl rounded up to one"
    );
    let stored = stored(d, "d9-ms").await;
    ensure_eq!(
        stored.expires_at,
        lease.expires_at,
        "D9",
        "a lease must be stored in whole milliseconds, as returned"
    );
}

/// D9: a zero ttl means the default 30 s.
pub async fn zero_ttl_means_thirty_seconds(s: Subject) {
    let now = start_time();
    let lease = ensure(&*s.directory, "d9-zero-ttl", "a", now, Duration::ZERO).await;
    ensure_eq!(
        lease.expires_at,
        whole_ms(now) + Duration::from_secs(30),
        "D9",
        "a zero ttl must mean 30 s"
    );
}

/// D2: the holder renewing before expiry keeps token and epoch and moves the expiry
/// to `now + ttl`.
pub async fn renewal_keeps_token_and_epoch(s: Subject) {
    let d = &*s.directory;
    let t0 = start_time();
    let first = ensure(d, "d2-renew", "a", t0, TTL).await;
    for step in 1..=5_u64 {
        let now = plus(t0, step * 4_000);
        let renewed = ensure(d, "d2-renew", "a", now, TTL).await;
        ensure_eq!(
            (&renewed.lease_token, renewed.epoch),
            (&first.lease_token, first.epoch),
            "D2",
            "a renewal must keep token and epoch",
            "renewal {step}"
        );
        ensure_eq!(
            renewed.expires_at,
            whole_ms(now) + TTL,
            "D2",
            "a renewal must expire at max(expires_at, now + ttl)",
            "renewal {step}"
        );
        verify_is(d, "d2-renew", "a", &first.lease_token, now, true).await;
    }
    ensure_eq!(
        stored(d, "d2-renew").await.expires_at,
        plus(whole_ms(t0), 20_000) + TTL,
        "D2",
        "a renewal must be stored",
        "expiry after the last renewal"
    );
}

/// D2: a renewal never shortens the lease (a smaller ttl, or a delayed renewal with
/// an older `now`, leaves the expiry where it was).
pub async fn renewal_never_shortens_the_lease(s: Subject) {
    let d = &*s.directory;
    let t0 = start_time();
    let long = ensure(d, "d2-shorten", "a", t0, Duration::from_mins(1)).await;
    let short = ensure(
        d,
        "d2-shorten",
        "a",
        plus(t0, 1_000),
        Duration::from_secs(1),
    )
    .await;
    ensure_eq!(
        short.expires_at,
        long.expires_at,
        "D2",
        "a renewal must never shorten the lease",
        "a renewal with a smaller ttl"
    );
    let stale = ensure(d, "d2-shorten", "a", t0 - Duration::from_secs(5), TTL).await;
    ensure_eq!(
        (&stale.lease_token, stale.expires_at),
        (&long.lease_token, long.expires_at),
        "D2",
        "a renewal must keep the token and never shorten the lease",
        "a renewal with an older now"
    );
    ensure_eq!(
        lookup(d, "d2-shorten").await,
        Some(long),
        "D2",
        "a renewal must never shorten the stored lease"
    );
}

/// D3: another node's valid lease is returned unchanged and nothing is written.
pub async fn valid_lease_of_another_node_is_returned_unchanged(s: Subject) {
    let d = &*s.directory;
    let t0 = start_time();
    let held = ensure(d, "d3-held", "a", t0, TTL).await;
    for (node, at) in [("b", 0), ("c", 5_000), ("b", 9_999)] {
        let seen = ensure(d, "d3-held", node, plus(t0, at), Duration::from_mins(10)).await;
        ensure_eq!(
            seen,
            held,
            "D3",
            "another node's valid lease must be returned unchanged",
            "{node} asking {at} ms after a's grant"
        );
    }
    ensure_eq!(
        lookup(d, "d3-held").await,
        Some(held.clone()),
        "D3",
        "asking for a room held elsewhere must write nothing"
    );
    let late = plus(t0, 9_999);
    verify_is(d, "d3-held", "a", &held.lease_token, late, true).await;
    verify_is(d, "d3-held", "b", &held.lease_token, late, false).await;
}

/// D1, D4: after expiry another node takes over with a new token and a higher
/// epoch; the old token is rejected from then on.
pub async fn takeover_after_expiry_issues_new_token_and_higher_epoch(s: Subject) {
    let d = &*s.directory;
    let t0 = start_time();
    let old = ensure(d, "d4-takeover", "a", t0, TTL).await;
    let later = old.expires_at + Duration::from_secs(1);
    let new = ensure(d, "d4-takeover", "b", later, TTL).await;
    ensure!(
        new.is_held_by("b") && new.lease_token != old.lease_token,
        "D1",
        "an expired room must be granted to the caller with a fresh token",
        "{new:?} after {old:?}"
    );
    ensure_higher_epoch(&new, &old);
    ensure_eq!(
        new.expires_at,
        whole_ms(later) + TTL,
        "D1",
        "a grant must expire at now + ttl"
    );
    verify_is(d, "d4-takeover", "a", &old.lease_token, later, false).await;
    verify_is(d, "d4-takeover", "b", &new.lease_token, later, true).await;
    // The old holder coming back is told b has the room.
    let back = ensure(d, "d4-takeover", "a", later, TTL).await;
    ensure_eq!(
        back,
        new,
        "D3",
        "another node's valid lease must be returned unchanged",
        "the old holder coming back"
    );
}

/// D1: the expiry instant itself is expired; one millisecond before it is not.
pub async fn expiry_instant_is_already_expired(s: Subject) {
    let d = &*s.directory;
    let old = ensure(d, "d1-instant", "a", start_time(), TTL).await;
    let before = old.expires_at - Duration::from_millis(1);
    let still = ensure(d, "d1-instant", "b", before, TTL).await;
    ensure_eq!(
        still,
        old,
        "D3",
        "a lease must be valid until its expiry instant",
        "one millisecond before it"
    );
    let taken = ensure(d, "d1-instant", "b", old.expires_at, TTL).await;
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
    let old = ensure(d, "d1-return", "a", start_time(), TTL).await;
    let new = ensure(d, "d1-return", "a", old.expires_at, TTL).await;
    ensure!(
        new.is_held_by("a") && new.lease_token != old.lease_token,
        "D1",
        "the holder coming back after expiry must get a new lease with a fresh token",
        "{new:?} after {old:?}"
    );
    ensure_higher_epoch(&new, &old);
    let at = old.expires_at;
    verify_is(d, "d1-return", "a", &old.lease_token, at, false).await;
    verify_is(d, "d1-return", "a", &new.lease_token, at, true).await;
}

/// D4: epochs strictly increase over many holdings ended by release or by expiry,
/// and no token is ever issued twice.
pub async fn epoch_grows_across_release_and_expiry(s: Subject) {
    let d = &*s.directory;
    let mut now = start_time();
    let mut last = 0;
    let mut tokens = HashSet::new();
    for round in 0..20_u32 {
        let node = ["a", "b", "c"][(round % 3) as usize];
        let lease = ensure(d, "d4-cycle", node, now, TTL).await;
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
            ensure_eq!(
                lookup(d, "d4-cycle").await,
                None,
                "D6",
                "a release must delete the lease",
                "round {round}"
            );
        } else {
            now = lease.expires_at;
        }
    }
}

/// D5: only the current holder's node and token verify.
pub async fn verify_accepts_only_the_current_holding(s: Subject) {
    let d = &*s.directory;
    let now = start_time();
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
    let lease = ensure(d, "d5-expired", "a", start_time(), TTL).await;
    let token = &lease.lease_token;
    let before = lease.expires_at - Duration::from_millis(1);
    verify_is(d, "d5-expired", "a", token, before, true).await;
    verify_is(d, "d5-expired", "a", token, lease.expires_at, false).await;
    let much_later = lease.expires_at + Duration::from_hours(24 * 365);
    verify_is(d, "d5-expired", "a", token, much_later, false).await;
}

/// D5: verify never renews and never takes over, whatever it answers.
pub async fn verify_never_renews_or_takes_over(s: Subject) {
    let d = &*s.directory;
    let lease = ensure(d, "d5-readonly", "a", start_time(), TTL).await;
    let late = lease.expires_at + Duration::from_secs(5);
    let token = &lease.lease_token;
    verify_is(d, "d5-readonly", "a", token, late, false).await;
    verify_is(d, "d5-readonly", "b", token, late, false).await;
    let early = lease.expires_at - Duration::from_secs(1);
    verify_is(d, "d5-readonly", "a", token, early, true).await;
    ensure_eq!(
        lookup(d, "d5-readonly").await,
        Some(lease),
        "D5",
        "verify_owner must never write"
    );
}

/// D5: a room without a lease verifies as `false` (not an error).
pub async fn verify_of_unknown_room_is_false(s: Subject) {
    let d = &*s.directory;
    verify_is(d, "d5-none", "a", &fresh_token(), start_time(), false).await;
    ensure_eq!(
        lookup(d, "d5-none").await,
        None,
        "D5",
        "verify_owner must never write"
    );
}

/// D6: the holder's release deletes the lease; a second release is `false`; the
/// room is then free for anyone, with a higher epoch.
pub async fn release_by_holder_deletes_the_lease(s: Subject) {
    let d = &*s.directory;
    let now = start_time();
    let lease = ensure(d, "d6-release", "a", now, TTL).await;
    ensure!(
        release(d, "d6-release", "a", &lease.lease_token).await,
        "D6",
        "the holder's release must delete its lease and answer true",
        "refused"
    );
    ensure_eq!(
        lookup(d, "d6-release").await,
        None,
        "D6",
        "a release must delete the lease"
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
    let now = start_time();
    let lease = ensure(d, "d6-other", "a", now, TTL).await;
    ensure!(
        !release(d, "d6-other", "b", &lease.lease_token).await,
        "D6",
        "a release by another node must answer false",
        "b's release of a's lease answered true"
    );
    ensure_eq!(
        lookup(d, "d6-other").await,
        Some(lease.clone()),
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
    let t0 = start_time();
    let a = ensure(d, "d6-expired", "a", t0, TTL).await;
    let kept = stored(d, "d6-expired").await;
    ensure!(
        !kept.valid_at(a.expires_at),
        "D7",
        "lookup must return the stored lease as it is",
        "{kept:?} valid at its expiry instant"
    );
    ensure!(
        release(d, "d6-expired", "a", &a.lease_token).await,
        "D6",
        "the holder's release must delete its lease, expired or not",
        "an expired lease nobody took over: refused"
    );
    ensure_eq!(
        lookup(d, "d6-expired").await,
        None,
        "D6",
        "a release must delete the lease"
    );

    let a = ensure(d, "d6-expired", "a", t0, TTL).await;
    let b = ensure(d, "d6-expired", "b", a.expires_at, TTL).await;
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
        lookup(d, "d6-expired").await,
        Some(b),
        "D6",
        "a refused release must change nothing"
    );
}

/// D7: lookup returns an expired lease as stored (it has no `now`) and never takes
/// over; the caller judges it with `valid_at`.
pub async fn lookup_returns_an_expired_lease_without_taking_over(s: Subject) {
    let d = &*s.directory;
    let lease = ensure(d, "d7-expired", "a", start_time(), TTL).await;
    let kept = stored(d, "d7-expired").await;
    ensure_eq!(kept, lease, "D7", "lookup must return the stored lease");
    ensure!(
        !kept.valid_at(lease.expires_at),
        "D7",
        "lookup must return the stored lease as it is",
        "{kept:?} valid at its expiry instant"
    );
    ensure_eq!(
        lookup(d, "d7-expired").await,
        Some(lease),
        "D7",
        "lookup must never write"
    );
}

/// D6: a release names its holding by token: the holder's own node releasing with a token
/// of an earlier holding (a late release, after the room ran out and the node was granted
/// it again) or a token never issued answers false and leaves the newer holding.
pub async fn release_with_another_token_changes_nothing(s: Subject) {
    let d = &*s.directory;
    let t0 = start_time();
    let first = ensure(d, "d6-token", "a", t0, TTL).await;
    let again = ensure(d, "d6-token", "a", first.expires_at, TTL).await;
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
            lookup(d, "d6-token").await,
            Some(again.clone()),
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

/// D8: rooms never interfere: holders, releases and epochs of one room leave
/// another alone.
pub async fn rooms_are_independent(s: Subject) {
    let d = &*s.directory;
    let now = start_time();
    let r1 = ensure(d, "d8-room-1", "a", now, TTL).await;
    let r2 = ensure(d, "d8-room-2", "b", now, TTL).await;
    ensure!(
        r1.is_held_by("a") && r2.is_held_by("b") && r1.lease_token != r2.lease_token,
        "D8",
        "rooms must never interfere",
        "{r1:?} and {r2:?}"
    );
    ensure_eq!(
        ensure(d, "d8-room-2", "a", now, TTL).await,
        r2,
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
        lookup(d, "d8-room-2").await,
        Some(r2),
        "D8",
        "rooms must never interfere",
        "room 2 after room 1 was released"
    );
    ensure_eq!(
        lookup(d, "d8-room-1").await,
        None,
        "D6",
        "a release must delete the lease"
    );
}

/// D9: bad ids, tokens, times and ttls are `InvalidParams`, and nothing is written.
pub async fn invalid_lease_inputs_are_rejected_before_storage(s: Subject) {
    let d = &*s.directory;
    let now = start_time();
    let long = "x".repeat(MAX_ID_LEN + 1);
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
    ensure_eq!(
        lookup(d, "d9-bad-node").await,
        None,
        "D9",
        "a refused call must write nothing"
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
    ensure_eq!(
        lookup(d, "d9-time").await,
        None,
        "D9",
        "a refused call must write nothing"
    );
}

/// D9: ids of exactly the maximum length, with separators and non-ASCII, work and
/// do not collide with their prefixes.
pub async fn ids_at_the_length_limit_work(s: Subject) {
    let d = &*s.directory;
    let now = start_time();
    let mut room = String::from("d9:room/é");
    room.push_str(&"r".repeat(MAX_ID_LEN - room.len()));
    let node = "n".repeat(MAX_ID_LEN);
    let lease = ensure(d, &room, &node, now, TTL).await;
    ensure!(
        lease.is_held_by(&node),
        "D9",
        "ids of the maximum length must work",
        "{lease:?}"
    );
    ensure_eq!(
        lookup(d, &room).await,
        Some(lease.clone()),
        "D9",
        "ids of the maximum length must work"
    );
    ensure_eq!(
        lookup(d, "d9:room/é").await,
        None,
        "D9",
        "an id must not collide with its prefix"
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
