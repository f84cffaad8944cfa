//! Releasing: only the holder with its token deletes the lease (D6).

use crate::{
    Subject, TTL, ensure, fresh_token, lookup, release, seen, seen_opt, stored, verify_is,
};

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
