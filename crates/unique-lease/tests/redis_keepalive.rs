//! `KeepAlive` on a real `redis-server` (started by `unique-testsupport`). Redis
//! keeps real time, so these use short ttls instead of tokio's paused clock.
#![cfg(feature = "redis")]

use std::time::{Duration, SystemTime};

use unique_lease::{Directory, KeepAlive, LeaseLost, LeaseState, RedisDirectory};
use unique_testsupport::redis::{RedisServer, shared};

// Renewals every ttl/3 (333 ms) leave room for a loaded machine.
const TTL: Duration = Duration::from_secs(1);

/// Long enough for any report in these tests, short enough to fail fast.
const BOUND: Duration = Duration::from_secs(10);

async fn directory(url: &str) -> RedisDirectory {
    RedisDirectory::builder(RedisDirectory::connection_manager(url).await.unwrap())
        .key_prefix(format!("{{keepalive-{}}}", uuid::Uuid::new_v4()))
        .build()
        .unwrap()
}

/// Renewals every ttl/3 keep the same holding valid for several ttls.
#[tokio::test]
async fn renewal_keeps_the_lease_past_several_ttls() {
    let server = shared();
    let dir = directory(&server.url()).await;
    let first = dir
        .ensure_owner("room", "a", SystemTime::now(), TTL)
        .await
        .unwrap();
    let keep = KeepAlive::start(dir.clone(), first.clone(), TTL);

    tokio::time::sleep(TTL * 4).await;

    let now = SystemTime::now();
    assert!(now > first.expires_at, "the first expiry has passed");
    assert!(
        dir.verify_owner("room", "a", &first.lease_token, now)
            .await
            .unwrap(),
        "the original token still verifies: {:?}",
        keep.state()
    );
    let LeaseState::Held { lease, .. } = keep.state() else {
        panic!("lost: {:?}", keep.state());
    };
    assert_eq!(lease.epoch, first.epoch);
}

/// Another node takes the room once the lease expired (forced: its stored expiry set
/// to zero, which Redis's clock has passed); the keep-alive's next renewal reports the
/// takeover.
#[tokio::test]
async fn takeover_after_forced_expiry_is_reported() {
    let server = shared();
    let prefix = format!("{{keepalive-{}}}", uuid::Uuid::new_v4());
    let conn = RedisDirectory::connection_manager(&server.url())
        .await
        .unwrap();
    let dir = RedisDirectory::builder(conn.clone())
        .key_prefix(&prefix)
        .build()
        .unwrap();
    let mine = dir
        .ensure_owner("room", "a", SystemTime::now(), TTL)
        .await
        .unwrap();
    let keep = KeepAlive::start(dir.clone(), mine.clone(), TTL);

    let () = redis::AsyncCommands::hset(
        &mut conn.clone(),
        format!("{prefix}:lease:room"),
        "exp",
        "0",
    )
    .await
    .unwrap();
    let theirs = dir
        .ensure_owner("room", "b", SystemTime::now(), Duration::from_mins(1))
        .await
        .unwrap();
    assert!(theirs.is_held_by("b"));

    match tokio::time::timeout(BOUND, keep.lost()).await.unwrap() {
        LeaseLost::TakenOver { by } => {
            assert_eq!(by.lease_token, theirs.lease_token);
            assert!(by.epoch > mine.epoch);
        }
        other => panic!("expected a takeover, got {other:?}"),
    }
}

/// A stopped Redis: renewals fail, and the loss is reported as "renewal failing
/// until the lease ran out" once it ran out.
#[tokio::test]
async fn stopped_redis_is_reported_when_the_lease_runs_out() {
    // A private server: this test kills it.
    let mut server = RedisServer::start();
    let dir = directory(&server.url()).await;
    let mine = dir
        .ensure_owner("room", "a", SystemTime::now(), TTL)
        .await
        .unwrap();
    let keep = KeepAlive::start(dir, mine, TTL);
    let mut states = keep.subscribe();

    server.stop();
    // The last lease held before the failures began (a renewal may have run in between).
    let held = keep.state().lease().cloned().expect("still held");

    let lost = tokio::time::timeout(BOUND, keep.lost()).await.unwrap();
    let reported_at = SystemTime::now();
    match lost {
        LeaseLost::RenewalFailed { error } => assert!(error.is_unavailable(), "{error}"),
        other => panic!("expected failing renewals, got {other:?}"),
    }
    let published = states.borrow_and_update().clone();
    assert!(published.is_lost(), "{published:?}");
    assert!(
        reported_at >= held.expires_at,
        "reported at expiry, not before"
    );
}
