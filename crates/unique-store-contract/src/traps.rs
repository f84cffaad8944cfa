//! Backend traps (`docs/design.md#traps`) that do not belong to a single clause.

use std::time::Duration;

use crate::Subject;
use crate::support::{Ctx, claimed, tombstoned};

/// C3/C4 (trap: an unconditional put): two logins read the same record, the
/// first claims; the second, from its now stale snapshot, must lose rather
/// than overwrite.
pub async fn stale_snapshot_loses(subject: Subject) {
    let ctx = Ctx::new(subject, "traps::stale_snapshot_loses");
    for (uid, initial) in [(1, None), (2, Some(4))] {
        let key = ctx.key(uid);
        if let Some(generation) = initial {
            ctx.session(&key, generation, "old").await;
        }
        let first = ctx.read(&key).await;
        let second = ctx.read(&key).await;
        let expected = initial.unwrap_or(0) + 1;
        assert_eq!(ctx.claim(&key, "first", &first).await.ok(), Some(expected));
        let result = ctx.claim(&key, "second", &second).await;
        ctx.assert_refused(
            &key,
            result,
            &claimed(expected, "first"),
            "stale second login",
        )
        .await;
    }
}

/// Record life (trap: a TTL on records): sessions and tombstones are still
/// there, unchanged, after more than a second (a TTL counted in seconds has
/// expired by then), and the next claim continues their gen.
pub async fn records_have_no_ttl(subject: Subject) {
    let ctx = Ctx::new(subject, "traps::records_have_no_ttl");
    let online = ctx.key(1);
    let released = ctx.key(2);
    let snap = ctx.read(&online).await;
    assert_eq!(ctx.claim(&online, "s", &snap).await.ok(), Some(1));
    let snap = ctx.read(&released).await;
    assert_eq!(ctx.claim(&released, "r", &snap).await.ok(), Some(1));
    assert!(ctx.release(&released, 1).await);
    // Observing the passage of time is the point here, not synchronisation.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(ctx.read(&online).await, claimed(1, "s"));
    let tomb = ctx.read(&released).await;
    assert_eq!(tomb, tombstoned(1));
    assert_eq!(ctx.claim(&released, "again", &tomb).await.ok(), Some(2));
}
