//! Single-caller cases of the `Directory` contract (D1–D7, D9).

use crate::check::Answer;
use std::time::{Duration, UNIX_EPOCH};

use super::{Subject, TTL, fresh_token, plus, start_time, verify_is, whole_ms};
use unique_lease::{MAX_ID_LEN, MAX_TIME_MILLIS, MAX_TOKEN_LEN, MAX_TTL};

/// D7: a room nobody ever held reads as `None`.
pub async fn lookup_of_unknown_room_is_none(s: Subject) {
    assert_eq!(
        s.directory
            .lookup("d7-unknown")
            .await
            .answer("D7", "lookup must answer a valid call"),
        None
    );
}

/// D1: a free room is granted to the caller with a fresh token, an epoch >= 1 and
/// `expires_at = now + ttl`; lookup and verify then see exactly that lease.
pub async fn ensure_grants_a_free_room(s: Subject) {
    let now = start_time();
    let lease = s
        .directory
        .ensure_owner("d1-free", "a", now, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert_eq!(lease.room_id, "d1-free");
    assert!(lease.is_held_by("a"));
    assert!(!lease.lease_token.is_empty());
    assert!(lease.epoch >= 1, "epochs start at 1");
    assert_eq!(lease.expires_at, whole_ms(now) + TTL);
    assert!(lease.valid_at(now));
    assert_eq!(
        s.directory
            .lookup("d1-free")
            .await
            .answer("D7", "lookup must answer a valid call"),
        Some(lease.clone())
    );
    verify_is(&*s.directory, "d1-free", "a", &lease.lease_token, now, true).await;
}

/// D1, D9: `now` is truncated to the millisecond and the ttl rounded up to one.
pub async fn grant_uses_millisecond_resolution(s: Subject) {
    let now = whole_ms(start_time()) + Duration::from_micros(999);
    let ttl = Duration::from_micros(1_500);
    let lease = s
        .directory
        .ensure_owner("d9-ms", "a", now, ttl)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert_eq!(lease.expires_at, plus(whole_ms(now), 2));
    let stored = s
        .directory
        .lookup("d9-ms")
        .await
        .answer("D7", "lookup must answer a valid call")
        .unwrap();
    assert_eq!(
        stored.expires_at, lease.expires_at,
        "stored as whole milliseconds"
    );
}

/// D9: a zero ttl means the default 30 s.
pub async fn zero_ttl_means_thirty_seconds(s: Subject) {
    let now = start_time();
    let lease = s
        .directory
        .ensure_owner("d9-zero-ttl", "a", now, Duration::ZERO)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert_eq!(lease.expires_at, whole_ms(now) + Duration::from_secs(30));
}

/// D2: the holder renewing before expiry keeps token and epoch and moves the expiry
/// to `now + ttl`.
pub async fn renewal_keeps_token_and_epoch(s: Subject) {
    let t0 = start_time();
    let first = s
        .directory
        .ensure_owner("d2-renew", "a", t0, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    for step in 1..=5_u64 {
        let now = plus(t0, step * 4_000);
        let renewed = s
            .directory
            .ensure_owner("d2-renew", "a", now, TTL)
            .await
            .answer("D1", "ensure_owner must answer a valid call with a lease");
        assert_eq!(
            renewed.lease_token, first.lease_token,
            "renewal keeps the token"
        );
        assert_eq!(renewed.epoch, first.epoch, "renewal keeps the epoch");
        assert_eq!(renewed.expires_at, whole_ms(now) + TTL);
        verify_is(
            &*s.directory,
            "d2-renew",
            "a",
            &first.lease_token,
            now,
            true,
        )
        .await;
    }
    let stored = s
        .directory
        .lookup("d2-renew")
        .await
        .answer("D7", "lookup must answer a valid call")
        .unwrap();
    assert_eq!(stored.expires_at, plus(whole_ms(t0), 20_000) + TTL);
}

/// D2: a renewal never shortens the lease (a smaller ttl, or a delayed renewal with
/// an older `now`, leaves the expiry where it was).
pub async fn renewal_never_shortens_the_lease(s: Subject) {
    let t0 = start_time();
    let long = s
        .directory
        .ensure_owner("d2-shorten", "a", t0, Duration::from_mins(1))
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let short = s
        .directory
        .ensure_owner("d2-shorten", "a", plus(t0, 1_000), Duration::from_secs(1))
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert_eq!(short.expires_at, long.expires_at);
    let stale = s
        .directory
        .ensure_owner("d2-shorten", "a", t0 - Duration::from_secs(5), TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert_eq!(stale.expires_at, long.expires_at);
    assert_eq!(stale.lease_token, long.lease_token);
    assert_eq!(
        s.directory
            .lookup("d2-shorten")
            .await
            .answer("D7", "lookup must answer a valid call"),
        Some(long)
    );
}

/// D3: another node's valid lease is returned unchanged and nothing is written.
pub async fn valid_lease_of_another_node_is_returned_unchanged(s: Subject) {
    let t0 = start_time();
    let held = s
        .directory
        .ensure_owner("d3-held", "a", t0, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    for (node, at) in [("b", 0), ("c", 5_000), ("b", 9_999)] {
        let seen = s
            .directory
            .ensure_owner("d3-held", node, plus(t0, at), Duration::from_mins(10))
            .await
            .answer("D1", "ensure_owner must answer a valid call with a lease");
        assert_eq!(
            seen, held,
            "{node} must be told a holds the room, unchanged"
        );
    }
    assert_eq!(
        s.directory
            .lookup("d3-held")
            .await
            .answer("D7", "lookup must answer a valid call"),
        Some(held.clone())
    );
    let late = plus(t0, 9_999);
    verify_is(&*s.directory, "d3-held", "a", &held.lease_token, late, true).await;
    verify_is(
        &*s.directory,
        "d3-held",
        "b",
        &held.lease_token,
        late,
        false,
    )
    .await;
}

/// D1, D4: after expiry another node takes over with a new token and a higher
/// epoch; the old token is rejected from then on.
pub async fn takeover_after_expiry_issues_new_token_and_higher_epoch(s: Subject) {
    let t0 = start_time();
    let old = s
        .directory
        .ensure_owner("d4-takeover", "a", t0, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let later = old.expires_at + Duration::from_secs(1);
    let new = s
        .directory
        .ensure_owner("d4-takeover", "b", later, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert!(new.is_held_by("b"));
    assert_ne!(new.lease_token, old.lease_token);
    assert!(
        new.epoch > old.epoch,
        "{} must exceed {}",
        new.epoch,
        old.epoch
    );
    assert_eq!(new.expires_at, whole_ms(later) + TTL);
    verify_is(
        &*s.directory,
        "d4-takeover",
        "a",
        &old.lease_token,
        later,
        false,
    )
    .await;
    verify_is(
        &*s.directory,
        "d4-takeover",
        "b",
        &new.lease_token,
        later,
        true,
    )
    .await;
    // The old holder coming back is told b has the room.
    let back = s
        .directory
        .ensure_owner("d4-takeover", "a", later, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert_eq!(back, new);
}

/// D1: the expiry instant itself is expired; one millisecond before it is not.
pub async fn expiry_instant_is_already_expired(s: Subject) {
    let t0 = start_time();
    let old = s
        .directory
        .ensure_owner("d1-instant", "a", t0, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let before = old.expires_at - Duration::from_millis(1);
    let still = s
        .directory
        .ensure_owner("d1-instant", "b", before, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert_eq!(still, old, "valid one millisecond before expiry");
    let taken = s
        .directory
        .ensure_owner("d1-instant", "b", old.expires_at, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert!(taken.is_held_by("b"), "expired at the expiry instant");
    assert!(taken.epoch > old.epoch);
}

/// D1: the holder itself returning after expiry starts a new holding: new token,
/// higher epoch, and its old token is dead.
pub async fn holder_returning_after_expiry_gets_a_new_token(s: Subject) {
    let t0 = start_time();
    let old = s
        .directory
        .ensure_owner("d1-return", "a", t0, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let new = s
        .directory
        .ensure_owner("d1-return", "a", old.expires_at, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert!(new.is_held_by("a"));
    assert_ne!(new.lease_token, old.lease_token);
    assert!(new.epoch > old.epoch);
    let at = old.expires_at;
    verify_is(&*s.directory, "d1-return", "a", &old.lease_token, at, false).await;
    verify_is(&*s.directory, "d1-return", "a", &new.lease_token, at, true).await;
}

/// D4: epochs strictly increase over many holdings ended by release or by expiry,
/// and no token is ever issued twice.
pub async fn epoch_grows_across_release_and_expiry(s: Subject) {
    let mut now = start_time();
    let mut last = 0;
    let mut tokens = std::collections::HashSet::new();
    for round in 0..20_u32 {
        let node = ["a", "b", "c"][(round % 3) as usize];
        let lease = s
            .directory
            .ensure_owner("d4-cycle", node, now, TTL)
            .await
            .answer("D1", "ensure_owner must answer a valid call with a lease");
        assert!(lease.is_held_by(node), "round {round}");
        assert!(
            lease.epoch > last,
            "round {round}: epoch {} after {last}",
            lease.epoch
        );
        assert!(tokens.insert(lease.lease_token.clone()), "token reused");
        last = lease.epoch;
        if round % 2 == 0 {
            assert!(
                s.directory
                    .release_owner("d4-cycle", node)
                    .await
                    .answer("D6", "release_owner must answer a valid call")
            );
            assert_eq!(
                s.directory
                    .lookup("d4-cycle")
                    .await
                    .answer("D7", "lookup must answer a valid call"),
                None
            );
        } else {
            now = lease.expires_at;
        }
    }
}

/// D5: only the current holder's node and token verify.
pub async fn verify_accepts_only_the_current_holding(s: Subject) {
    let now = start_time();
    let lease = s
        .directory
        .ensure_owner("d5-verify", "a", now, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let d = &s.directory;
    verify_is(&**d, "d5-verify", "a", &lease.lease_token, now, true).await;
    verify_is(&**d, "d5-verify", "b", &lease.lease_token, now, false).await;
    let forged = fresh_token();
    verify_is(&**d, "d5-verify", "a", &forged, now, false).await;
    let prefix = &lease.lease_token[..lease.lease_token.len() - 1];
    verify_is(&**d, "d5-verify", "a", prefix, now, false).await;
    verify_is(&**d, "d5-other-room", "a", &lease.lease_token, now, false).await;
}

/// D5: a lease is rejected from its expiry instant on, even with the right token.
pub async fn verify_rejects_an_expired_lease(s: Subject) {
    let lease = s
        .directory
        .ensure_owner("d5-expired", "a", start_time(), TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let d = &s.directory;
    let token = &lease.lease_token;
    let before = lease.expires_at - Duration::from_millis(1);
    verify_is(&**d, "d5-expired", "a", token, before, true).await;
    verify_is(&**d, "d5-expired", "a", token, lease.expires_at, false).await;
    let much_later = lease.expires_at + Duration::from_hours(24 * 365);
    verify_is(&**d, "d5-expired", "a", token, much_later, false).await;
}

/// D5: verify never renews and never takes over, whatever it answers.
pub async fn verify_never_renews_or_takes_over(s: Subject) {
    let lease = s
        .directory
        .ensure_owner("d5-readonly", "a", start_time(), TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let late = lease.expires_at + Duration::from_secs(5);
    let token = &lease.lease_token;
    verify_is(&*s.directory, "d5-readonly", "a", token, late, false).await;
    verify_is(&*s.directory, "d5-readonly", "b", token, late, false).await;
    let early = lease.expires_at - Duration::from_secs(1);
    verify_is(&*s.directory, "d5-readonly", "a", token, early, true).await;
    assert_eq!(
        s.directory
            .lookup("d5-readonly")
            .await
            .answer("D7", "lookup must answer a valid call"),
        Some(lease),
        "verify wrote something"
    );
}

/// D5: a room without a lease verifies as `false` (not an error).
pub async fn verify_of_unknown_room_is_false(s: Subject) {
    let token = fresh_token();
    verify_is(&*s.directory, "d5-none", "a", &token, start_time(), false).await;
    assert_eq!(
        s.directory
            .lookup("d5-none")
            .await
            .answer("D7", "lookup must answer a valid call"),
        None
    );
}

/// D6: the holder's release deletes the lease; a second release is `false`; the
/// room is then free for anyone, with a higher epoch.
pub async fn release_by_holder_deletes_the_lease(s: Subject) {
    let now = start_time();
    let lease = s
        .directory
        .ensure_owner("d6-release", "a", now, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert!(
        s.directory
            .release_owner("d6-release", "a")
            .await
            .answer("D6", "release_owner must answer a valid call")
    );
    assert_eq!(
        s.directory
            .lookup("d6-release")
            .await
            .answer("D7", "lookup must answer a valid call"),
        None
    );
    verify_is(
        &*s.directory,
        "d6-release",
        "a",
        &lease.lease_token,
        now,
        false,
    )
    .await;
    assert!(
        !s.directory
            .release_owner("d6-release", "a")
            .await
            .answer("D6", "release_owner must answer a valid call"),
        "nothing left"
    );
    let next = s
        .directory
        .ensure_owner("d6-release", "b", now, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert!(next.is_held_by("b"), "no need to wait for the ttl");
    assert!(next.epoch > lease.epoch);
}

/// D6: another node's release is `false` and changes nothing; so is releasing a
/// room that has no lease.
pub async fn release_by_another_node_changes_nothing(s: Subject) {
    let now = start_time();
    let lease = s
        .directory
        .ensure_owner("d6-other", "a", now, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert!(
        !s.directory
            .release_owner("d6-other", "b")
            .await
            .answer("D6", "release_owner must answer a valid call")
    );
    assert_eq!(
        s.directory
            .lookup("d6-other")
            .await
            .answer("D7", "lookup must answer a valid call"),
        Some(lease.clone())
    );
    verify_is(
        &*s.directory,
        "d6-other",
        "a",
        &lease.lease_token,
        now,
        true,
    )
    .await;
    assert!(
        !s.directory
            .release_owner("d6-never-held", "a")
            .await
            .answer("D6", "release_owner must answer a valid call")
    );
}

/// D6: a holder may release its own expired lease; once another node took over,
/// the old holder's release is refused.
pub async fn release_of_an_expired_lease_by_its_holder(s: Subject) {
    let t0 = start_time();
    let a = s
        .directory
        .ensure_owner("d6-expired", "a", t0, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let stored = s
        .directory
        .lookup("d6-expired")
        .await
        .answer("D7", "lookup must answer a valid call")
        .unwrap();
    assert!(!stored.valid_at(a.expires_at), "expired, nobody took over");
    assert!(
        s.directory
            .release_owner("d6-expired", "a")
            .await
            .answer("D6", "release_owner must answer a valid call")
    );
    assert_eq!(
        s.directory
            .lookup("d6-expired")
            .await
            .answer("D7", "lookup must answer a valid call"),
        None
    );

    let a = s
        .directory
        .ensure_owner("d6-expired", "a", t0, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let b = s
        .directory
        .ensure_owner("d6-expired", "b", a.expires_at, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert!(b.is_held_by("b"));
    assert!(
        !s.directory
            .release_owner("d6-expired", "a")
            .await
            .answer("D6", "release_owner must answer a valid call")
    );
    assert_eq!(
        s.directory
            .lookup("d6-expired")
            .await
            .answer("D7", "lookup must answer a valid call"),
        Some(b)
    );
}

/// D7: lookup returns an expired lease as stored (it has no `now`) and never takes
/// over; the caller judges it with `valid_at`.
pub async fn lookup_returns_an_expired_lease_without_taking_over(s: Subject) {
    let lease = s
        .directory
        .ensure_owner("d7-expired", "a", start_time(), TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let stored = s
        .directory
        .lookup("d7-expired")
        .await
        .answer("D7", "lookup must answer a valid call")
        .unwrap();
    assert_eq!(stored, lease);
    assert!(!stored.valid_at(lease.expires_at));
    assert_eq!(
        s.directory
            .lookup("d7-expired")
            .await
            .answer("D7", "lookup must answer a valid call"),
        Some(lease)
    );
}

/// D8: rooms never interfere: holders, releases and epochs of one room leave
/// another alone.
pub async fn rooms_are_independent(s: Subject) {
    let now = start_time();
    let r1 = s
        .directory
        .ensure_owner("d8-room-1", "a", now, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let r2 = s
        .directory
        .ensure_owner("d8-room-2", "b", now, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert!(r1.is_held_by("a") && r2.is_held_by("b"));
    assert_ne!(r1.lease_token, r2.lease_token);
    assert_eq!(
        s.directory
            .ensure_owner("d8-room-2", "a", now, TTL)
            .await
            .answer("D1", "ensure_owner must answer a valid call with a lease"),
        r2
    );
    verify_is(&*s.directory, "d8-room-2", "a", &r1.lease_token, now, false).await;
    assert!(
        s.directory
            .release_owner("d8-room-1", "a")
            .await
            .answer("D6", "release_owner must answer a valid call")
    );
    assert!(
        !s.directory
            .release_owner("d8-room-2", "a")
            .await
            .answer("D6", "release_owner must answer a valid call")
    );
    assert_eq!(
        s.directory
            .lookup("d8-room-2")
            .await
            .answer("D7", "lookup must answer a valid call"),
        Some(r2)
    );
    assert_eq!(
        s.directory
            .lookup("d8-room-1")
            .await
            .answer("D7", "lookup must answer a valid call"),
        None
    );
}

/// D9: bad ids, tokens, times and ttls are `InvalidParams`, and nothing is written.
pub async fn invalid_lease_inputs_are_rejected_before_storage(s: Subject) {
    let d = &s.directory;
    let now = start_time();
    let long = "x".repeat(MAX_ID_LEN + 1);
    let bad_ids = ["", "d9\nroom", "d9\0", "d9\u{1b}[31m", long.as_str()];
    for bad in bad_ids {
        let e = d.ensure_owner(bad, "a", now, TTL).await.unwrap_err();
        assert!(e.is_invalid_params(), "room {bad:?}: {e}");
        let e = d
            .ensure_owner("d9-bad-node", bad, now, TTL)
            .await
            .unwrap_err();
        assert!(e.is_invalid_params(), "node {bad:?}: {e}");
        assert!(d.lookup(bad).await.unwrap_err().is_invalid_params());
        assert!(
            d.release_owner(bad, "a")
                .await
                .unwrap_err()
                .is_invalid_params()
        );
        assert!(
            d.release_owner("d9-bad-node", bad)
                .await
                .unwrap_err()
                .is_invalid_params()
        );
        assert!(
            d.verify_owner(bad, "a", "t", now)
                .await
                .unwrap_err()
                .is_invalid_params()
        );
        assert!(
            d.verify_owner("d9-bad-node", bad, "t", now)
                .await
                .unwrap_err()
                .is_invalid_params()
        );
    }
    assert_eq!(
        d.lookup("d9-bad-node")
            .await
            .answer("D7", "lookup must answer a valid call"),
        None,
        "nothing written"
    );

    let long_token = "t".repeat(MAX_TOKEN_LEN + 1);
    for token in ["", "t\n", long_token.as_str()] {
        let e = d
            .verify_owner("d9-token", "a", token, now)
            .await
            .unwrap_err();
        assert!(e.is_invalid_params(), "token {token:?}: {e}");
    }

    let before_epoch = UNIX_EPOCH - Duration::from_millis(1);
    let too_late = UNIX_EPOCH + Duration::from_millis(MAX_TIME_MILLIS);
    for bad_now in [before_epoch, too_late] {
        let e = d
            .ensure_owner("d9-time", "a", bad_now, TTL)
            .await
            .unwrap_err();
        assert!(e.is_invalid_params(), "{e}");
        let e = d
            .verify_owner("d9-time", "a", "t", bad_now)
            .await
            .unwrap_err();
        assert!(e.is_invalid_params(), "{e}");
    }
    let too_long = MAX_TTL + Duration::from_millis(1);
    let e = d
        .ensure_owner("d9-time", "a", now, too_long)
        .await
        .unwrap_err();
    assert!(e.is_invalid_params(), "{e}");
    assert_eq!(
        d.lookup("d9-time")
            .await
            .answer("D7", "lookup must answer a valid call"),
        None,
        "nothing written"
    );
}

/// D9: ids of exactly the maximum length, with separators and non-ASCII, work and
/// do not collide with their prefixes.
pub async fn ids_at_the_length_limit_work(s: Subject) {
    let now = start_time();
    let mut room = String::from("d9:room/é");
    room.push_str(&"r".repeat(MAX_ID_LEN - room.len()));
    let node = "n".repeat(MAX_ID_LEN);
    let lease = s
        .directory
        .ensure_owner(&room, &node, now, TTL)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    assert!(lease.is_held_by(&node));
    assert_eq!(
        s.directory
            .lookup(&room)
            .await
            .answer("D7", "lookup must answer a valid call"),
        Some(lease.clone())
    );
    assert_eq!(
        s.directory
            .lookup("d9:room/é")
            .await
            .answer("D7", "lookup must answer a valid call"),
        None
    );
    verify_is(&*s.directory, &room, &node, &lease.lease_token, now, true).await;
    assert!(
        s.directory
            .release_owner(&room, &node)
            .await
            .answer("D6", "release_owner must answer a valid call")
    );
}
