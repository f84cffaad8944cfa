//! Verifying a holding: only the current holder's node and token, never renewing or
//! taking over (D5).

use std::time::Duration;

use super::MS;
use crate::{Seen, Subject, TTL, ensure, fresh_token, lookup, seen, seen_opt, verify_is};

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
