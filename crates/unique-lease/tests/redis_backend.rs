//! Redis-specific behaviour beyond the contract: the storage layout and its TTLs,
//! corrupt records, connection faults and configuration errors. Runs against a
//! real `redis-server` started by `unique-testsupport`.
#![cfg(feature = "redis")]

use std::time::{Duration, SystemTime};

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use unique_lease::{Directory, LeaseError, NodeRegistry, RedisDirectory};
use unique_testsupport::redis::{RedisServer, shared};

const TTL: Duration = Duration::from_secs(10);

async fn raw(server: &RedisServer) -> ConnectionManager {
    RedisDirectory::connection_manager(&server.url())
        .await
        .unwrap()
}

fn unique_prefix() -> String {
    format!("{{lease-test-{}}}", uuid::Uuid::new_v4())
}

async fn directory(server: &RedisServer, prefix: &str) -> RedisDirectory {
    RedisDirectory::builder(raw(server).await)
        .key_prefix(prefix)
        .build()
        .unwrap()
}

/// The lease key carries a TTL of `exp - now + grace` (garbage collection only);
/// the epoch counter has none, so it outlives every lease key.
#[tokio::test]
async fn lease_key_has_gc_ttl_and_epoch_counter_has_none() {
    let server = shared();
    let prefix = unique_prefix();
    let dir = directory(&server, &prefix).await;
    let mut conn = raw(&server).await;

    dir.ensure_owner("room", "a", SystemTime::now(), TTL)
        .await
        .unwrap();
    let lease_ttl: i64 = conn.pttl(format!("{prefix}:lease:room")).await.unwrap();
    let grace = i64::try_from(unique_lease::DEFAULT_GC_GRACE.as_millis()).unwrap();
    let ttl = i64::try_from(TTL.as_millis()).unwrap();
    assert!(
        lease_ttl > grace && lease_ttl <= grace + ttl,
        "lease key pttl {lease_ttl} must be in ({grace}, {}]",
        grace + ttl
    );
    let epoch_ttl: i64 = conn.pttl(format!("{prefix}:epoch")).await.unwrap();
    assert_eq!(epoch_ttl, -1, "the epoch counter must never expire");

    // A renewal moves the key's TTL with the lease.
    let later = SystemTime::now() + Duration::from_secs(100);
    dir.ensure_owner(
        "room",
        "a",
        later - Duration::from_secs(95),
        Duration::from_secs(200),
    )
    .await
    .unwrap();
    let renewed_ttl: i64 = conn.pttl(format!("{prefix}:lease:room")).await.unwrap();
    assert!(
        renewed_ttl > grace + ttl,
        "renewal extends the key ttl: {renewed_ttl}"
    );
}

/// D4 across garbage collection: when Redis drops a lease key (simulated with DEL,
/// which is what its TTL does), the next holder still gets a higher epoch.
#[tokio::test]
async fn epochs_survive_the_lease_key_disappearing() {
    let server = shared();
    let prefix = unique_prefix();
    let dir = directory(&server, &prefix).await;
    let mut conn = raw(&server).await;
    let now = SystemTime::now();
    let mut last = 0;
    for round in 0..5 {
        let lease = dir.ensure_owner("room", "a", now, TTL).await.unwrap();
        assert!(
            lease.epoch > last,
            "round {round}: {} after {last}",
            lease.epoch
        );
        last = lease.epoch;
        let removed: i64 = conn.del(format!("{prefix}:lease:room")).await.unwrap();
        assert_eq!(removed, 1);
    }
}

/// Node registrations carry a Redis TTL of exactly their ttl.
#[tokio::test]
async fn node_key_expires_with_its_registration() {
    let server = shared();
    let prefix = unique_prefix();
    let dir = directory(&server, &prefix).await;
    let mut conn = raw(&server).await;
    dir.register_node("n", "10.0.0.1:7000", TTL).await.unwrap();
    let ttl: i64 = conn.pttl(format!("{prefix}:node:n")).await.unwrap();
    assert!(ttl > 0 && ttl <= 10_000, "node key pttl {ttl}");
}

/// Directories with different prefixes share nothing, epochs included.
#[tokio::test]
async fn prefixes_isolate_directories() {
    let server = shared();
    let one = directory(&server, &unique_prefix()).await;
    let two = directory(&server, &unique_prefix()).await;
    let now = SystemTime::now();
    let a = one.ensure_owner("room", "a", now, TTL).await.unwrap();
    let b = two.ensure_owner("room", "b", now, TTL).await.unwrap();
    assert!(a.is_held_by("a") && b.is_held_by("b"));
    assert_eq!((a.epoch, b.epoch), (1, 1));
}

/// Records this crate did not write fail closed as `Corrupt`: no lease is granted
/// over them and nothing panics. A registration is simply overwritten.
#[tokio::test]
async fn corrupt_records_fail_closed() {
    let server = shared();
    let prefix = unique_prefix();
    let dir = directory(&server, &prefix).await;
    let mut conn = raw(&server).await;
    let now = SystemTime::now();
    let key = format!("{prefix}:lease:room");

    let _: () = conn.set(&key, "not a hash").await.unwrap();
    assert_corrupt(dir.ensure_owner("room", "a", now, TTL).await);
    assert_corrupt(dir.lookup("room").await);
    assert_corrupt(dir.verify_owner("room", "a", "token", now).await);
    assert_corrupt(dir.release_owner("room", "a", "t").await);

    let _: () = conn.del(&key).await.unwrap();
    let _: () = conn.hset(&key, "node", "a").await.unwrap();
    assert_corrupt(dir.ensure_owner("room", "b", now, TTL).await);
    assert_corrupt(dir.lookup("room").await);

    let fields = [("node", "a"), ("token", "t"), ("epoch", "x"), ("exp", "1")];
    let _: () = conn.hset_multiple(&key, &fields).await.unwrap();
    assert_corrupt(dir.lookup("room").await);
    let fields = [("epoch", "1"), ("exp", "soon")];
    let _: () = conn.hset_multiple(&key, &fields).await.unwrap();
    assert_corrupt(dir.ensure_owner("room", "b", now, TTL).await);
    let stored: String = conn.hget(&key, "node").await.unwrap();
    assert_eq!(stored, "a", "nothing was granted over the corrupt record");

    let node_key = format!("{prefix}:node:n");
    let _: () = conn.hset(&node_key, "addr", "10.0.0.1:7000").await.unwrap();
    assert_corrupt(dir.lookup_node("n").await);
    let _: () = conn.set(&node_key, "junk").await.unwrap();
    assert_corrupt(dir.lookup_node("n").await);
    let written = dir.register_node("n", "10.0.0.2:7000", TTL).await.unwrap();
    let read = dir.lookup_node("n").await.unwrap().expect("registered");
    assert_eq!(read.grpc_addr, written.grpc_addr);
}

/// D10 on the production path (no test clock): Redis's `TIME` judges, so callers whose
/// clocks disagree by ten minutes never both hold a room, a caller a year ahead gets
/// the ttl it asked for, and the room frees by Redis's clock.
#[tokio::test]
async fn redis_time_decides_expiry_whatever_the_callers_clocks() {
    let server = shared();
    let prefix = unique_prefix();
    let a_dir = directory(&server, &prefix).await;
    let b_dir = directory(&server, &prefix).await;
    let now = SystemTime::now();
    let ten_minutes = Duration::from_mins(10);
    let ttl = Duration::from_millis(300);

    let a = a_dir.ensure_owner("room", "a", now, ttl).await.unwrap();
    assert!(a.is_held_by("a"));
    assert!(a.ttl_left <= ttl && a.ttl_left > ttl / 2, "{a:?}");
    let told = b_dir
        .ensure_owner("room", "b", now + ten_minutes, ttl)
        .await
        .unwrap();
    assert!(
        told.same_holding(&a),
        "b's clock ahead took a's room: {told:?}"
    );
    assert!(
        b_dir
            .verify_owner("room", "a", &a.lease_token, now + ten_minutes)
            .await
            .unwrap()
    );

    let year = Duration::from_hours(365 * 24);
    let pinned = a_dir
        .ensure_owner("room", "a", now + year, ttl)
        .await
        .unwrap();
    assert!(
        pinned.same_holding(&a) && pinned.ttl_left <= ttl,
        "{pinned:?}"
    );

    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    let b = b_dir
        .ensure_owner("room", "b", now - ten_minutes, ttl)
        .await
        .unwrap();
    assert!(b.is_held_by("b") && b.epoch > a.epoch, "{b:?}");
    assert!(
        !a_dir
            .verify_owner("room", "a", &a.lease_token, now + year)
            .await
            .unwrap()
    );
}

fn assert_corrupt<T: std::fmt::Debug>(result: Result<T, LeaseError>) {
    match result {
        Err(e) => assert!(e.is_corrupt(), "expected a corrupt-record error, got {e}"),
        Ok(v) => panic!("expected a corrupt-record error, got {v:?}"),
    }
}

/// A server that goes away turns every operation into `Unavailable` (retryable),
/// never a panic or a hang.
#[tokio::test]
async fn stopped_server_is_unavailable() {
    // A private server: this test kills it (never the shared one, which may be a
    // server the developer runs, named by UNIQUE_TEST_REDIS_URL).
    let mut server = RedisServer::start();
    let dir = RedisDirectory::connect(&server.url()).await.unwrap();
    let now = SystemTime::now();
    dir.ensure_owner("room", "a", now, TTL).await.unwrap();
    server.stop();

    let errors = [
        dir.ensure_owner("room", "a", now, TTL).await.unwrap_err(),
        dir.lookup("room").await.unwrap_err(),
        dir.verify_owner("room", "a", "token", now)
            .await
            .unwrap_err(),
        dir.release_owner("room", "a", "t").await.unwrap_err(),
        dir.register_node("n", "10.0.0.1:7000", TTL)
            .await
            .unwrap_err(),
        dir.lookup_node("n").await.unwrap_err(),
        dir.unregister_node("n").await.unwrap_err(),
    ];
    for e in errors {
        assert!(e.is_unavailable() && e.is_retryable(), "{e}");
        assert!(!e.to_string().contains("redis://"), "no url in {e}");
    }
}

/// When Redis drops the connection (CLIENT KILL), the directory reconnects by
/// itself: calls fail with `Unavailable` at most until the connection is back, and
/// the lease is intact afterwards.
#[tokio::test]
async fn dropped_connection_recovers() {
    // A private server: CLIENT KILL would also cut other tests' connections.
    let server = RedisServer::start();
    let prefix = unique_prefix();
    let dir = directory(&server, &prefix).await;
    let now = SystemTime::now();
    let lease = dir.ensure_owner("room", "a", now, TTL).await.unwrap();

    let mut admin = raw(&server).await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(killed >= 1, "the directory's connection was dropped");

    let mut failures = 0;
    let renewed = loop {
        match dir.ensure_owner("room", "a", now, TTL).await {
            Ok(renewed) => break renewed,
            Err(e) => {
                assert!(e.is_unavailable(), "{e}");
                failures += 1;
                assert!(failures < 5, "no reconnect after {failures} attempts: {e}");
            }
        }
    };
    assert_eq!(renewed.lease_token, lease.lease_token, "the lease survived");
}

/// Configuration errors are clear and never echo the URL (it may hold a password).
#[tokio::test]
async fn connect_errors_do_not_echo_the_url() {
    let e = RedisDirectory::connect("redis://user:secret@127.0.0.1:notaport/")
        .await
        .unwrap_err();
    assert!(e.is_invalid_params(), "{e}");
    assert!(!e.to_string().contains("secret"), "{e}");

    let port = unique_testsupport::free_port();
    let e = RedisDirectory::connect(&format!("redis://user:secret@127.0.0.1:{port}/"))
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    assert!(!e.to_string().contains("secret"), "{e}");

    let server = shared();
    for bad in ["", "bad\nprefix"] {
        let e = RedisDirectory::builder(raw(&server).await)
            .key_prefix(bad)
            .build()
            .unwrap_err();
        assert!(e.is_invalid_params(), "{e}");
    }
}
