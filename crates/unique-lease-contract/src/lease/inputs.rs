//! Inputs: invalid ids, tokens, times and ttls refused before storage, and ids at the
//! length limit (D9).

use std::time::{Duration, UNIX_EPOCH};

use crate::check::refused;
use crate::{Subject, TTL, ensure, lookup, release, seen, seen_opt, verify_is};
use unique_lease::{MAX_TIME_MILLIS, MAX_TOKEN_LEN, MAX_TTL};

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
