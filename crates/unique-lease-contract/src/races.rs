//! Concurrent cases (D8): real races between tasks released together by a barrier.

use crate::check::Answer;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Barrier;

use super::{SeedReport, Seen, Subject, TTL, fresh_token, seed, seen, seen_opt, verify_is};
use unique_lease::{Clock, Directory, Lease, ManualClock};

/// Runs `op(i)` for `i in 0..n` on `n` spawned tasks that start together, and
/// returns the results in index order.
async fn race<T, F, Fut>(n: usize, op: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let barrier = barrier.clone();
            let work = op(i);
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(n);
    for task in tasks {
        results.push(task.await.expect("racing task panicked"));
    }
    results
}

fn node(i: usize) -> String {
    format!("node-{i:02}")
}

/// D8: 16 nodes call `ensure_owner` on one free room at once: exactly one holding
/// is granted and every caller receives that same lease (one holder, one token,
/// one epoch). Repeated on 10 rooms.
pub async fn many_nodes_race_for_one_free_room(s: Subject) {
    let now = s.now();
    for round in 0..10 {
        let room = format!("d8-race-{round}");
        let results = race(16, |i| {
            let (dir, room) = (s.directory.clone(), room.clone());
            async move {
                dir.ensure_owner(&room, &node(i), now, TTL)
                    .await
                    .answer("D1", "ensure_owner must answer a valid call with a lease")
            }
        })
        .await;
        let winner = results[0].clone();
        ensure!(
            results.iter().all(|l| seen(l) == seen(&winner)),
            "D8",
            "every racing caller must receive the one lease that won",
            "round {round}: {results:#?}"
        );
        let holders = (0..16).filter(|i| winner.is_held_by(&node(*i))).count();
        ensure_eq!(
            holders,
            1,
            "D8",
            "exactly one racer must win a free room",
            "round {round}: holders among the racers"
        );
        ensure_eq!(
            seen_opt(
                s.directory
                    .lookup(&room)
                    .await
                    .answer("D7", "lookup must answer a valid call")
                    .as_ref()
            ),
            Some(seen(&winner)),
            "D8",
            "the lease every racer received must be the one stored",
            "round {round}"
        );
        let verified = race(16, |i| {
            let (dir, room, token) = (
                s.directory.clone(),
                room.clone(),
                winner.lease_token.clone(),
            );
            async move {
                dir.verify_owner(&room, &node(i), &token, now).await.answer(
                    "D5",
                    "verify_owner must answer a valid call with true or false",
                )
            }
        })
        .await;
        ensure_eq!(
            verified.iter().filter(|v| **v).count(),
            1,
            "D5",
            "only the holder's node must verify with its token",
            "round {round}: nodes that verified"
        );
    }
}

/// D8, D1: at the exact expiry instant the holder's renewal races 7 takeovers. The
/// instant is already expired, so the holder's call is a takeover too: exactly one
/// new holding wins, everyone sees it, and the old token is dead.
pub async fn renewal_races_takeover_at_the_expiry_instant(s: Subject) {
    for round in 0..10 {
        let room = format!("d8-expiry-{round}");
        let old = s
            .directory
            .ensure_owner(&room, &node(0), s.now(), TTL)
            .await
            .answer("D1", "ensure_owner must answer a valid call with a lease");
        s.pass(TTL);
        let at = s.now();
        let results = race(8, |i| {
            let (dir, room) = (s.directory.clone(), room.clone());
            async move {
                dir.ensure_owner(&room, &node(i), at, TTL)
                    .await
                    .answer("D1", "ensure_owner must answer a valid call with a lease")
            }
        })
        .await;
        let winner = results[0].clone();
        ensure!(
            results.iter().all(|l| seen(l) == seen(&winner)),
            "D8",
            "every racing caller must receive the one lease that won",
            "round {round}: {results:#?}"
        );
        ensure!(
            winner.lease_token != old.lease_token,
            "D1",
            "a lease at its expiry instant is expired: the call must grant a new token",
            "round {round}: the old token was kept"
        );
        ensure!(
            winner.epoch > old.epoch,
            "D4",
            "a new lease must carry a higher epoch",
            "round {round}: epoch {} after {}",
            winner.epoch,
            old.epoch
        );
        ensure_eq!(
            winner.ttl_left,
            TTL,
            "D1",
            "a grant must have the whole ttl left",
            "round {round}"
        );
        verify_is(&*s.directory, &room, &node(0), &old.lease_token, at, false).await;
        let holder = winner.node_id.clone();
        verify_is(&*s.directory, &room, &holder, &winner.lease_token, at, true).await;
    }
}

/// D8, D2, D3: one millisecond before expiry the holder renews while 7 nodes try to
/// take over (their clocks a whole ttl ahead, which must not matter, D10). The lease
/// is still valid on the store's clock, so the renewal wins whenever it is
/// linearized: every caller is told the holder's lease (same token and epoch), and
/// what remains has the whole ttl left.
pub async fn early_renewal_races_takeover(s: Subject) {
    for round in 0..20 {
        let room = format!("d8-early-{round}");
        let old = s
            .directory
            .ensure_owner(&room, &node(0), s.now(), TTL)
            .await
            .answer("D1", "ensure_owner must answer a valid call with a lease");
        s.pass(TTL.saturating_sub(Duration::from_millis(1)));
        let (now, ahead) = (s.now(), s.now() + TTL);
        let results = race(8, |i| {
            let (dir, room) = (s.directory.clone(), room.clone());
            let at = if i == 0 { now } else { ahead };
            async move {
                dir.ensure_owner(&room, &node(i), at, TTL)
                    .await
                    .answer("D1", "ensure_owner must answer a valid call with a lease")
            }
        })
        .await;
        ensure!(
            results.iter().all(|l| l.same_holding(&old)),
            "D8",
            "a valid lease's renewal must win over takeovers whenever it is linearized",
            "round {round}: {results:#?} after {old:?}"
        );
        ensure_eq!(
            results[0].ttl_left,
            TTL,
            "D2",
            "a renewal must expire at max(expiry, now + ttl)",
            "round {round}"
        );
        ensure_eq!(
            seen_opt(
                s.directory
                    .lookup(&room)
                    .await
                    .answer("D7", "lookup must answer a valid call")
                    .as_ref()
            ),
            Some(seen(&results[0])),
            "D8",
            "the renewal must be the lease stored",
            "round {round}"
        );
    }
}

/// D6, D8: the holder releases while 3 nodes ask for the room. The release always
/// succeeds (nobody can take a valid lease); callers before it see the old lease,
/// callers after it see the one new holding (at most one), which is what remains.
pub async fn release_races_ensure(s: Subject) {
    let now = s.now();
    for round in 0..10 {
        let room = format!("d8-release-{round}");
        let old = s
            .directory
            .ensure_owner(&room, &node(0), now, TTL)
            .await
            .answer("D1", "ensure_owner must answer a valid call with a lease");
        let results = race(4, |i| {
            let (dir, room) = (s.directory.clone(), room.clone());
            let token = old.lease_token.clone();
            async move {
                if i == 0 {
                    Err(dir
                        .release_owner(&room, &node(0), &token)
                        .await
                        .answer("D6", "release_owner must answer a valid call"))
                } else {
                    Ok(dir
                        .ensure_owner(&room, &node(i), now, TTL)
                        .await
                        .answer("D1", "ensure_owner must answer a valid call with a lease"))
                }
            }
        })
        .await;
        ensure_eq!(
            results[0],
            Err(true),
            "D6",
            "the holder's release must delete its valid lease whatever races it",
            "round {round}: the release's answer"
        );
        let grants: HashSet<Seen> = results[1..]
            .iter()
            .map(|r| r.clone().expect("ensure result"))
            .filter(|l| !l.same_holding(&old))
            .map(|l| seen(&l))
            .collect();
        ensure!(
            grants.len() <= 1,
            "D8",
            "among concurrent grants of a free room exactly one must win",
            "round {round}: several new holdings {grants:#?}"
        );
        let remaining = s
            .directory
            .lookup(&room)
            .await
            .answer("D7", "lookup must answer a valid call");
        ensure_eq!(
            seen_opt(remaining.as_ref()),
            grants.iter().next().cloned(),
            "D8",
            "what remains must be the one new holding a caller received",
            "round {round}"
        );
        if let Some(new) = remaining {
            ensure!(
                new.epoch > old.epoch,
                "D4",
                "a new lease must carry a higher epoch",
                "round {round}: epoch {} after {}",
                new.epoch,
                old.epoch
            );
        }
    }
}

/// What one task saw: `(room index, lease)` in program order.
type Observations = Vec<(usize, Lease)>;

/// D4, D8: 8 tasks run seeded random ensure / release / lookup sequences on 2 rooms
/// while each moves the store's clock on a little before every call. Afterwards: every token maps to one
/// epoch and node and every epoch to one token (never reused); each task saw a
/// room's epoch never decrease; a remaining lease carries the highest epoch seen.
pub async fn concurrent_random_operations_keep_epochs_ordered(s: Subject) {
    let base_seed = seed();
    let _report = SeedReport(base_seed);
    let clock = s.clock.clone();
    let rooms = ["d4-random-0", "d4-random-1"];
    let observed: Vec<Observations> = race(8, |task| {
        let dir = s.directory.clone();
        let clock = clock.clone();
        let mut rng = fastrand::Rng::with_seed(base_seed.wrapping_add(task as u64));
        async move { random_walk(&*dir, &rooms, task, &clock, &mut rng).await }
    })
    .await;

    let mut by_token: HashMap<&str, (u64, &str)> = HashMap::new();
    let mut by_epoch: HashMap<u64, &str> = HashMap::new();
    let mut highest = [0_u64; 2];
    for (task, observations) in observed.iter().enumerate() {
        let mut last = [0_u64; 2];
        for (room, lease) in observations {
            let known = by_token
                .entry(&lease.lease_token)
                .or_insert((lease.epoch, &lease.node_id));
            ensure_eq!(
                *known,
                (lease.epoch, lease.node_id.as_str()),
                "D4",
                "a token must belong to one holding (one epoch, one node)",
                "token {:?}",
                lease.lease_token
            );
            let token = by_epoch.entry(lease.epoch).or_insert(&lease.lease_token);
            ensure_eq!(
                *token,
                lease.lease_token,
                "D4",
                "an epoch must never be reused",
                "epoch {} issued twice",
                lease.epoch
            );
            ensure!(
                lease.epoch >= last[*room],
                "D4",
                "epochs of a room must never go back",
                "task {task} saw epoch {} after {} in {}",
                lease.epoch,
                last[*room],
                rooms[*room]
            );
            last[*room] = lease.epoch;
            highest[*room] = highest[*room].max(lease.epoch);
        }
    }
    for (i, room) in rooms.iter().enumerate() {
        if let Some(lease) = s
            .directory
            .lookup(room)
            .await
            .answer("D7", "lookup must answer a valid call")
        {
            ensure_eq!(
                lease.epoch,
                highest[i],
                "D4",
                "the lease that remains must carry the highest epoch issued",
                "{room}"
            );
        }
    }
}

async fn random_walk(
    dir: &dyn Directory,
    rooms: &[&str; 2],
    task: usize,
    clock: &ManualClock,
    rng: &mut fastrand::Rng,
) -> Observations {
    let me = node(task % 4);
    let mut seen = Vec::new();
    for _ in 0..150 {
        let room = rng.usize(0..2);
        clock.advance(Duration::from_millis(rng.u64(0..40)));
        let now = clock.now();
        match rng.u8(0..10) {
            0..=5 => {
                let ttl = Duration::from_millis(rng.u64(50..400));
                let lease = dir
                    .ensure_owner(rooms[room], &me, now, ttl)
                    .await
                    .answer("D1", "ensure_owner must answer a valid call with a lease");
                seen.push((room, lease));
            }
            6..=7 => {
                // The token of this node's latest holding of the room seen, maybe stale.
                let token = seen
                    .iter()
                    .rev()
                    .find(|(r, lease): &&(usize, Lease)| *r == room && lease.is_held_by(&me))
                    .map_or_else(fresh_token, |(_, lease)| lease.lease_token.clone());
                dir.release_owner(rooms[room], &me, &token)
                    .await
                    .answer("D6", "release_owner must answer a valid call");
            }
            _ => {
                if let Some(lease) = dir
                    .lookup(rooms[room])
                    .await
                    .answer("D7", "lookup must answer a valid call")
                {
                    seen.push((room, lease));
                }
            }
        }
    }
    seen
}
