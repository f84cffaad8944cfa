//! Concurrent cases (D8): real races between tasks released together by a barrier.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Barrier;

use super::{SeedReport, Subject, TTL, plus, seed, start_time, whole_ms};
use unique_lease::{Directory, Lease};

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
    let now = start_time();
    for round in 0..10 {
        let room = format!("d8-race-{round}");
        let results = race(16, |i| {
            let (dir, room) = (s.directory.clone(), room.clone());
            async move { dir.ensure_owner(&room, &node(i), now, TTL).await.unwrap() }
        })
        .await;
        let winner = results[0].clone();
        assert!(
            results.iter().all(|l| *l == winner),
            "round {round}: callers saw different leases: {results:#?}"
        );
        let holders = (0..16).filter(|i| winner.is_held_by(&node(*i))).count();
        assert_eq!(holders, 1, "the holder is one of the racers");
        assert_eq!(
            s.directory.lookup(&room).await.unwrap(),
            Some(winner.clone())
        );
        let verified = race(16, |i| {
            let (dir, room, token) = (
                s.directory.clone(),
                room.clone(),
                winner.lease_token.clone(),
            );
            async move {
                dir.verify_owner(&room, &node(i), &token, now)
                    .await
                    .unwrap()
            }
        })
        .await;
        assert_eq!(
            verified.iter().filter(|v| **v).count(),
            1,
            "one node verifies"
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
            .ensure_owner(&room, &node(0), start_time(), TTL)
            .await
            .unwrap();
        let at = old.expires_at;
        let results = race(8, |i| {
            let (dir, room) = (s.directory.clone(), room.clone());
            async move { dir.ensure_owner(&room, &node(i), at, TTL).await.unwrap() }
        })
        .await;
        let winner = results[0].clone();
        assert!(
            results.iter().all(|l| *l == winner),
            "round {round}: {results:#?}"
        );
        assert_ne!(winner.lease_token, old.lease_token, "a new holding");
        assert!(winner.epoch > old.epoch);
        assert_eq!(winner.expires_at, at + TTL);
        assert!(
            !s.directory
                .verify_owner(&room, &node(0), &old.lease_token, at)
                .await
                .unwrap()
        );
        let holder = winner.node_id.clone();
        assert!(
            s.directory
                .verify_owner(&room, &holder, &winner.lease_token, at)
                .await
                .unwrap()
        );
    }
}

/// D8, D2, D3: one millisecond before expiry the holder renews while 7 nodes try to
/// take over at the expiry instant. Whichever is linearized first decides: either
/// the renewal (same token and epoch, expiry extended) or one takeover (new token,
/// higher epoch); every caller, the holder included, sees the same lease.
pub async fn early_renewal_races_takeover(s: Subject) {
    let mut outcomes = HashSet::new();
    for round in 0..20 {
        let room = format!("d8-early-{round}");
        let old = s
            .directory
            .ensure_owner(&room, &node(0), start_time(), TTL)
            .await
            .unwrap();
        let results = race(8, |i| {
            let (dir, room) = (s.directory.clone(), room.clone());
            let at = if i == 0 {
                old.expires_at - Duration::from_millis(1)
            } else {
                old.expires_at
            };
            async move { dir.ensure_owner(&room, &node(i), at, TTL).await.unwrap() }
        })
        .await;
        let winner = results[0].clone();
        assert!(
            results.iter().all(|l| *l == winner),
            "round {round}: {results:#?}"
        );
        if winner.is_held_by(&node(0)) {
            assert_eq!(
                winner.lease_token, old.lease_token,
                "renewal keeps the token"
            );
            assert_eq!(winner.epoch, old.epoch);
            assert_eq!(
                winner.expires_at,
                old.expires_at - Duration::from_millis(1) + TTL
            );
            outcomes.insert("renewed");
        } else {
            assert_ne!(winner.lease_token, old.lease_token);
            assert!(winner.epoch > old.epoch);
            assert_eq!(winner.expires_at, old.expires_at + TTL);
            outcomes.insert("taken over");
        }
        assert_eq!(s.directory.lookup(&room).await.unwrap(), Some(winner));
    }
    // Both outcomes are legal; which occur depends on scheduling, so none is required.
    assert!(!outcomes.is_empty());
}

/// D6, D8: the holder releases while 3 nodes ask for the room. The release always
/// succeeds (nobody can take a valid lease); callers before it see the old lease,
/// callers after it see the one new holding (at most one), which is what remains.
pub async fn release_races_ensure(s: Subject) {
    let now = start_time();
    for round in 0..10 {
        let room = format!("d8-release-{round}");
        let old = s
            .directory
            .ensure_owner(&room, &node(0), now, TTL)
            .await
            .unwrap();
        let results = race(4, |i| {
            let (dir, room) = (s.directory.clone(), room.clone());
            async move {
                if i == 0 {
                    Err(dir.release_owner(&room, &node(0)).await.unwrap())
                } else {
                    Ok(dir.ensure_owner(&room, &node(i), now, TTL).await.unwrap())
                }
            }
        })
        .await;
        assert_eq!(
            results[0],
            Err(true),
            "round {round}: the holder's release must succeed"
        );
        let grants: HashSet<Lease> = results[1..]
            .iter()
            .map(|r| r.clone().expect("ensure result"))
            .filter(|l| *l != old)
            .collect();
        assert!(
            grants.len() <= 1,
            "round {round}: several new holdings {grants:#?}"
        );
        let remaining = s.directory.lookup(&room).await.unwrap();
        assert_eq!(remaining, grants.iter().next().cloned(), "round {round}");
        if let Some(new) = remaining {
            assert!(new.epoch > old.epoch);
        }
    }
}

/// What one task saw: `(room index, lease)` in program order.
type Observations = Vec<(usize, Lease)>;

/// D4, D8: 8 tasks run seeded random ensure / release / lookup sequences on 2 rooms
/// under a shared, advancing logical clock. Afterwards: every token maps to one
/// epoch and node and every epoch to one token (never reused); each task saw a
/// room's epoch never decrease; a remaining lease carries the highest epoch seen.
pub async fn concurrent_random_operations_keep_epochs_ordered(s: Subject) {
    let base_seed = seed();
    let _report = SeedReport(base_seed);
    let clock = Arc::new(AtomicU64::new(0));
    let rooms = ["d4-random-0", "d4-random-1"];
    let seen: Vec<Observations> = race(8, |task| {
        let dir = s.directory.clone();
        let clock = clock.clone();
        let mut rng = fastrand::Rng::with_seed(base_seed.wrapping_add(task as u64));
        async move { random_walk(&*dir, &rooms, task, &clock, &mut rng).await }
    })
    .await;

    let mut by_token: HashMap<&str, (u64, &str)> = HashMap::new();
    let mut by_epoch: HashMap<u64, &str> = HashMap::new();
    let mut highest = [0_u64; 2];
    for (task, observations) in seen.iter().enumerate() {
        let mut last = [0_u64; 2];
        for (room, lease) in observations {
            let known = by_token
                .entry(&lease.lease_token)
                .or_insert((lease.epoch, &lease.node_id));
            assert_eq!(
                *known,
                (lease.epoch, lease.node_id.as_str()),
                "token changed epoch or node"
            );
            let token = by_epoch.entry(lease.epoch).or_insert(&lease.lease_token);
            assert_eq!(
                *token, lease.lease_token,
                "epoch {} issued twice",
                lease.epoch
            );
            assert!(
                lease.epoch >= last[*room],
                "task {task} saw epoch go back in {}",
                rooms[*room]
            );
            last[*room] = lease.epoch;
            highest[*room] = highest[*room].max(lease.epoch);
        }
    }
    for (i, room) in rooms.iter().enumerate() {
        if let Some(lease) = s.directory.lookup(room).await.unwrap() {
            assert_eq!(
                lease.epoch, highest[i],
                "{room} holds a lease older than one seen"
            );
        }
    }
}

async fn random_walk(
    dir: &dyn Directory,
    rooms: &[&str; 2],
    task: usize,
    clock: &AtomicU64,
    rng: &mut fastrand::Rng,
) -> Observations {
    let me = node(task % 4);
    let mut seen = Vec::new();
    for _ in 0..150 {
        let room = rng.usize(0..2);
        let now = plus(
            whole_ms(start_time()),
            clock.fetch_add(rng.u64(0..40), Ordering::SeqCst),
        );
        match rng.u8(0..10) {
            0..=5 => {
                let ttl = Duration::from_millis(rng.u64(50..400));
                let lease = dir.ensure_owner(rooms[room], &me, now, ttl).await.unwrap();
                seen.push((room, lease));
            }
            6..=7 => {
                dir.release_owner(rooms[room], &me).await.unwrap();
            }
            _ => {
                if let Some(lease) = dir.lookup(rooms[room]).await.unwrap() {
                    seen.push((room, lease));
                }
            }
        }
    }
    seen
}
