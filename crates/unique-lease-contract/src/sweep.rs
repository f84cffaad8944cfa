//! Sweeping (D12), for the row backends ([`LeaseRows`]: memory, fjall, SQLite, PostgreSQL):
//! a directory whose callers churn room names keeps its live rows, not its history, and a
//! sweep never frees a room the rules count as held nor lowers an epoch.

use std::sync::Arc;
use std::time::Duration;

use unique_lease::{Directory, LeaseRows, NodeRegistry, Swept, sweep_pass};

use crate::check::Answer;
use crate::{Subject, ensure, lookup};

/// How many room names a churn case takes and lets expire.
pub const CHURN: usize = 100_000;

/// How many node registrations it lets expire.
const NODE_CHURN: usize = 1_000;

/// The rooms and nodes held throughout.
const LIVE: usize = 10;

/// The grace the cases sweep with.
const GRACE: Duration = Duration::from_mins(10);

/// The ttl of a churned room or registration.
const SHORT: Duration = Duration::from_secs(1);

/// The ttl of a room held throughout.
const LONG: Duration = Duration::from_hours(1);

/// Concurrent callers of a churn (so group commits and pools share the work).
const CALLERS: usize = 32;

fn rows(s: &Subject) -> &Arc<dyn LeaseRows> {
    s.rows.as_ref().unwrap_or_else(|| {
        unique_suite_kit::violated(
            "D12",
            "a sweep case needs the backend's LeaseRows (Subject::with_rows)",
            format_args!("the factory gave none"),
        )
    })
}

/// One whole sweep pass (its failure breaks D12).
async fn pass(s: &Subject) -> Swept {
    sweep_pass(&**rows(s), GRACE)
        .await
        .answer("D12", "a sweep must answer")
}

/// `count` rooms `prefix-<i>`, each granted for [`SHORT`] by [`CALLERS`] callers at once.
async fn churn_rooms(directory: &Arc<dyn Directory>, s: &Subject, prefix: &str, count: usize) {
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        let (directory, now, prefix) = (Arc::clone(directory), s.now(), prefix.to_owned());
        callers.spawn(async move {
            for i in (caller..count).step_by(CALLERS) {
                directory
                    .ensure_owner(&format!("{prefix}-{i}"), "churner", now, SHORT)
                    .await
                    .answer("D1", "ensure_owner must answer a valid call with a lease");
            }
        });
    }
    while let Some(done) = callers.join_next().await {
        done.expect("a churning caller panicked");
    }
}

async fn register(registry: &dyn NodeRegistry, node: &str, ttl: Duration) {
    registry
        .register_node(node, "10.0.0.1:7000", ttl)
        .await
        .answer("N1", "register_node must answer a valid call");
}

/// D12: after [`CHURN`] room names and a thousand registrations expired past the grace, one
/// sweep pass deletes every one of them and keeps exactly the live rows; churning again
/// (a tenth as many) and sweeping again leaves the same count: the table is bounded by the
/// live rows.
pub async fn sweeping_keeps_the_table_to_its_live_rows(s: Subject) {
    let mut held = Vec::new();
    for i in 0..LIVE {
        held.push(ensure(&*s.directory, &format!("live-{i}"), "keeper", s.now(), LONG).await);
        register(&*s.registry, &format!("live-node-{i}"), LONG).await;
    }
    // A second, smaller round: the count after it is the same.
    for (round, churned) in [("a", CHURN), ("b", CHURN / 10)] {
        churn_rooms(&s.directory, &s, &format!("churn-{round}"), churned).await;
        for i in 0..NODE_CHURN {
            register(&*s.registry, &format!("gone-{round}-{i}"), SHORT).await;
        }
        s.pass(SHORT + GRACE);
        let swept = pass(&s).await;
        ensure_eq!(
            (swept.kept_rooms, swept.kept_nodes, swept.rooms, swept.nodes),
            (LIVE, LIVE, churned, NODE_CHURN),
            "D12",
            "a sweep pass must delete every row expired past its grace and keep the live ones",
            "round {round}: {swept:?} after {churned} rooms and {NODE_CHURN} registrations \
             expired beside {LIVE} live of each"
        );
    }
    for lease in &held {
        let now = lookup(&*s.directory, &lease.room_id).await;
        ensure!(
            now.as_ref().is_some_and(|now| now.same_holding(lease)),
            "D12",
            "a sweep must never touch a room in force",
            "{} read {now:?}, held {lease:?}",
            lease.room_id
        );
    }
}

/// D12, D4, D11: a sweep keeps a room in force, a room expired within the grace (its
/// lookup still reports it, D7) and a room a forward step holds; a room granted again
/// after its row was swept gets an epoch above every earlier one.
pub async fn a_sweep_never_frees_a_held_room_nor_lowers_an_epoch(s: Subject) {
    let d = &*s.directory;
    let held = ensure(d, "d12-held", "a", s.now(), LONG).await;
    let old = ensure(d, "d12-old", "a", s.now(), SHORT).await;
    register(&*s.registry, "d12-old-node", SHORT).await;
    s.pass(SHORT + GRACE);
    let recent = ensure(d, "d12-recent", "a", s.now(), SHORT).await;
    register(&*s.registry, "d12-recent-node", SHORT).await;
    s.pass(SHORT * 2);
    let swept = pass(&s).await;
    ensure_eq!(
        (swept.rooms, swept.nodes),
        (1, 1),
        "D12",
        "a sweep must delete the rows expired past their grace, and only those",
        "{swept:?}"
    );
    ensure!(
        lookup(d, "d12-old").await.is_none()
            && lookup(d, "d12-recent")
                .await
                .is_some_and(|l| l.same_holding(&recent))
            && lookup(d, "d12-held")
                .await
                .is_some_and(|l| l.same_holding(&held)),
        "D12",
        "a sweep must keep rooms in force and rooms expired within the grace",
        "after the sweep"
    );
    // A forward step far beyond the grace: the holding written before it is held for
    // its ttl in real time (D11), so the sweep keeps it.
    let stepped = ensure(d, "d12-stepped", "a", s.now(), Duration::from_secs(10)).await;
    s.step_forward(GRACE * 3);
    let swept = pass(&s).await;
    let other = ensure(d, "d12-stepped", "b", s.now(), SHORT).await;
    ensure!(
        other.same_holding(&stepped),
        "D12",
        "a sweep must never delete a holding a forward step keeps in force (D11)",
        "after {swept:?}, b was told {other:?}, held {stepped:?}"
    );
    let again = ensure(d, "d12-old", "b", s.now(), SHORT).await;
    let highest = [&held, &old, &recent, &stepped]
        .iter()
        .map(|l| l.epoch)
        .max()
        .unwrap_or_default();
    ensure!(
        again.is_held_by("b") && again.epoch > highest,
        "D4",
        "a room granted again after its row was swept must carry a higher epoch than every \
         earlier holding",
        "granted {again:?}, highest before {highest}"
    );
}
