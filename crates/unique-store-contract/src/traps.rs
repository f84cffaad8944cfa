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
        ctx.win(&key, "first", &first, expected).await;
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

/// Record life (trap: a TTL on records): a session and a tombstone left idle
/// for more than a second (when a TTL counted in seconds has expired) are
/// still there, unchanged, and the next claim continues their gen. A suite
/// cannot wait out every TTL; one second catches the TTL written by mistake.
pub async fn records_outlive_an_idle_second(subject: Subject) {
    let ctx = Ctx::new(subject, "traps::records_outlive_an_idle_second");
    let online = ctx.key(1);
    let released = ctx.key(2);
    let snap = ctx.read(&online).await;
    ctx.win(&online, "s", &snap, 1).await;
    let snap = ctx.read(&released).await;
    ctx.win(&released, "r", &snap, 1).await;
    ctx.release_keeps_gen(&released, 1).await;
    // Observing the passage of time is the point here, not synchronisation.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ensure_eq!(
        ctx.read(&online).await,
        claimed(1, "s"),
        "Records",
        "a record lives forever (no TTL): a session is still there after an idle second"
    );
    let tomb = ctx.read(&released).await;
    ensure_eq!(
        tomb,
        tombstoned(1),
        "Records",
        "a record lives forever (no TTL): a tombstone is still there after an idle second"
    );
    ctx.win(&released, "again", &tomb, 2).await;
}
