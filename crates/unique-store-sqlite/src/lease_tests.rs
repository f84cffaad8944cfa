//! Unit tests of `lease.rs`.
use std::time::{SystemTime, UNIX_EPOCH};

use unique_lease::{Directory, ManualClock, NodeRegistry};

use super::*;

const TTL: Duration = Duration::from_secs(30);

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn directory(path: &Path, clock: &Arc<ManualClock>) -> SqliteDirectory {
    SqliteDirectory::builder(path)
        .clock(clock.clone())
        .open()
        .expect("open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_renews_and_takes_over_on_its_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(at(1_000)));
    let d = directory(&dir.path().join("l.db"), &clock);
    // The callers' `now` never decides: 10 minutes apart, one holder.
    let a = d.ensure_owner("room", "a", at(1_000), TTL).await.unwrap();
    assert!(a.is_held_by("a"));
    assert_eq!(a.epoch, 1);
    let b = d.ensure_owner("room", "b", at(1_600), TTL).await.unwrap();
    assert!(b.same_holding(&a));
    clock.advance(Duration::from_secs(10));
    let renewed = d.ensure_owner("room", "a", at(0), TTL).await.unwrap();
    assert!(renewed.same_holding(&a));
    assert_eq!(renewed.ttl_left, TTL);
    clock.advance(TTL);
    let taken = d.ensure_owner("room", "b", at(0), TTL).await.unwrap();
    assert!(taken.is_held_by("b"));
    assert_eq!(taken.epoch, 2);
    assert!(
        d.release_owner("room", "b", &taken.lease_token)
            .await
            .unwrap()
    );
    assert_eq!(d.lookup("room").await.unwrap(), None);
    let again = d.ensure_owner("room", "a", at(0), TTL).await.unwrap();
    assert_eq!(again.epoch, 3, "the counter survives a release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epochs_survive_reopening_and_two_directories_share_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let clock = Arc::new(ManualClock::new(at(1_000)));
    let first = directory(&path, &clock);
    let lease = first.ensure_owner("room", "a", at(0), TTL).await.unwrap();
    let second = directory(&path, &clock);
    let seen = second.ensure_owner("room", "b", at(0), TTL).await.unwrap();
    assert!(seen.same_holding(&lease));
    drop((first, second));
    clock.advance(TTL);
    let reopened = directory(&path, &clock);
    let next = reopened
        .ensure_owner("room", "b", at(0), TTL)
        .await
        .unwrap();
    assert_eq!(next.epoch, lease.epoch + 1);
    reopened
        .register_node("n", "10.0.0.1:7000", TTL)
        .await
        .unwrap();
    assert!(reopened.lookup_node("n").await.unwrap().is_some());
    clock.advance(TTL);
    assert_eq!(reopened.lookup_node("n").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_files_and_records_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store_file = dir.path().join("store.db");
    drop(crate::SqliteStore::open(&store_file).unwrap());
    let e = SqliteDirectory::open(&store_file).unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    assert!(e.to_string().contains("another application"), "{e}");
    let lease_file = dir.path().join("leases.db");
    drop(SqliteDirectory::open(&lease_file).unwrap());
    let e = crate::SqliteStore::open(&lease_file).unwrap_err();
    assert!(e.to_string().contains("another application"), "{e}");

    let clock = Arc::new(ManualClock::new(at(1_000)));
    let d = directory(&lease_file, &clock);
    let raw = Connection::open(&lease_file).unwrap();
    raw.execute(
        "INSERT INTO leases VALUES ('room', 'a', 'tok', 'seven', 0, NULL)",
        [],
    )
    .unwrap();
    assert!(d.lookup("room").await.unwrap_err().is_corrupt());
    let e = d.ensure_owner("room", "b", at(0), TTL).await.unwrap_err();
    assert!(e.is_corrupt(), "{e}");
    let epoch: String = raw
        .query_row("SELECT epoch FROM leases WHERE room = 'room'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(epoch, "seven", "nothing granted over it");
    let e = SqliteDirectory::open(dir.path().join("missing/l.db")).unwrap_err();
    assert!(e.is_unavailable(), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_reads_the_counter_every_lease_and_every_registration() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(at(1_000)));
    let d = directory(&dir.path().join("l.db"), &clock);
    assert_eq!(d.export().unwrap(), LeaseDump::default(), "a new file");

    let released = d.ensure_owner("gone", "a", at(0), TTL).await.unwrap();
    assert!(
        d.release_owner("gone", "a", &released.lease_token)
            .await
            .unwrap()
    );
    let expired = d
        .ensure_owner("old", "b", at(0), Duration::from_secs(1))
        .await
        .unwrap();
    let held = d.ensure_owner("room", "a", at(0), TTL).await.unwrap();
    d.register_node("n1", "10.0.0.1:7000", TTL).await.unwrap();
    d.register_node("n2", "10.0.0.2:7000", Duration::from_secs(1))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(5));

    let dump = d.export().unwrap();
    assert_eq!(dump.last_epoch, 3, "the released holding's epoch counts");
    let start = 1_000_000;
    assert_eq!(
        dump.leases,
        [
            (
                "old".to_owned(),
                LeaseRow {
                    node_id: "b".into(),
                    lease_token: expired.lease_token,
                    epoch: 2,
                    expires_ms: start + 1_000,
                    ttl_ms: Some(1_000),
                }
            ),
            (
                "room".to_owned(),
                LeaseRow {
                    node_id: "a".into(),
                    lease_token: held.lease_token,
                    epoch: 3,
                    expires_ms: start + 30_000,
                    ttl_ms: Some(30_000),
                }
            ),
        ]
    );
    let node = |addr: &str, ttl_ms| NodeRow {
        grpc_addr: addr.into(),
        updated_ms: start,
        expires_ms: start + ttl_ms,
    };
    assert_eq!(
        dump.nodes,
        [
            ("n1".to_owned(), node("10.0.0.1:7000", 30_000)),
            ("n2".to_owned(), node("10.0.0.2:7000", 1_000)),
        ],
        "the expired registration too"
    );

    let raw = Connection::open(d.path()).unwrap();
    raw.execute("UPDATE leases SET epoch = 0 WHERE room = 'old'", [])
        .unwrap();
    assert!(d.export().unwrap_err().is_corrupt());
    raw.execute("UPDATE leases SET epoch = -4 WHERE room = 'old'", [])
        .unwrap();
    assert!(d.export().unwrap_err().is_corrupt());
}

/// A version 1 file (no `ttl_ms`) opens migrated: its row keeps its holding, judged on its
/// expiry alone (ttl unknown), and the next write stores the ttl (D11).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_file_is_migrated_and_its_rows_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let old = Connection::open(&path).unwrap();
    old.execute_batch(
        "CREATE TABLE leases (room TEXT PRIMARY KEY NOT NULL, node TEXT NOT NULL, \
         token TEXT NOT NULL, epoch INTEGER NOT NULL, expires_ms INTEGER NOT NULL) WITHOUT ROWID;
         CREATE TABLE lease_epoch (id INTEGER PRIMARY KEY CHECK (id = 1), last INTEGER NOT NULL);
         INSERT INTO lease_epoch (id, last) VALUES (1, 7);
         CREATE TABLE nodes (node TEXT PRIMARY KEY NOT NULL, addr TEXT NOT NULL, \
         updated_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL) WITHOUT ROWID;
         INSERT INTO leases VALUES ('room', 'a', 'tok', 7, 1060000);
         PRAGMA application_id = 1970367603;
         PRAGMA user_version = 1;",
    )
    .unwrap();
    drop(old);
    let clock = Arc::new(ManualClock::new(at(1_000)));
    let d = directory(&path, &clock);
    let held = d.lookup("room").await.unwrap().expect("the old row");
    assert_eq!((held.epoch, held.ttl_left), (7, Duration::from_mins(1)));
    let renewed = d.ensure_owner("room", "a", at(0), TTL).await.unwrap();
    assert_eq!(renewed.lease_token, "tok");
    let raw = Connection::open(&path).unwrap();
    let version: i32 = raw
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 2);
    let granted = d.ensure_owner("other", "b", at(0), TTL).await.unwrap();
    assert_eq!(granted.epoch, 8);
    let ttl: Option<i64> = raw
        .query_row("SELECT ttl_ms FROM leases WHERE room = 'other'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(ttl, Some(30_000));
}
