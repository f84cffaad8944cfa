//! Three nodes compete for rooms on the in-memory directory; one stops renewing,
//! another takes over with a higher epoch, and a command fenced with the old token
//! and epoch is rejected — by the directory and by a downstream store.
//!
//! Run with `cargo run -p unique-lease --example rooms`. Time is simulated (a
//! `ManualClock`), so the story is the same on every run apart from the tokens.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use unique_lease::{
    Clock, Directory, Lease, LeaseError, ManualClock, MemoryDirectory, NodeRegistry,
};

const TTL: Duration = Duration::from_secs(10);
const RENEW_EVERY: Duration = Duration::from_secs(3);
const ROOMS: [&str; 3] = ["lobby", "arena", "market"];
const NODES: [(&str, &str); 3] = [
    ("node-1", "10.0.0.1:7000"),
    ("node-2", "10.0.0.2:7000"),
    ("node-3", "10.0.0.3:7000"),
];

/// A downstream store that accepts a room's writes only from the highest epoch it
/// has seen: ordered fencing without asking the directory.
#[derive(Default)]
struct RoomStore {
    highest_epoch: HashMap<String, u64>,
}

impl RoomStore {
    fn write(&mut self, lease: &Lease, what: &str) -> Result<(), String> {
        let highest = self.highest_epoch.entry(lease.room_id.clone()).or_default();
        if lease.epoch < *highest {
            return Err(format!(
                "store rejects {what:?}: epoch {} is older than {}",
                lease.epoch, highest
            ));
        }
        *highest = lease.epoch;
        Ok(())
    }
}

fn short(token: &str) -> &str {
    &token[..8]
}

fn at(clock: &ManualClock, start: SystemTime) -> String {
    let secs = clock
        .now()
        .duration_since(start)
        .unwrap_or_default()
        .as_secs();
    format!("t={secs:>2}s")
}

/// In turns, each node asks for every room, starting from a different one.
async fn compete(
    dir: &MemoryDirectory,
    clock: &ManualClock,
    start: SystemTime,
) -> Result<HashMap<&'static str, Lease>, LeaseError> {
    println!(
        "{} three nodes register and compete for three rooms",
        at(clock, start)
    );
    for (node, addr) in NODES {
        dir.register_node(node, addr, TTL).await?;
    }
    let mut held: HashMap<&str, Lease> = HashMap::new();
    for turn in 0..ROOMS.len() {
        for (i, (node, _)) in NODES.iter().enumerate() {
            let room = ROOMS[(i + turn) % ROOMS.len()];
            let lease = dir.ensure_owner(room, node, clock.now(), TTL).await?;
            if lease.is_held_by(node) {
                println!(
                    "       {node} owns {room:<6} epoch {} token {}…",
                    lease.epoch,
                    short(&lease.lease_token)
                );
                held.insert(room, lease);
            } else {
                println!(
                    "       {node} asks for {room:<6} -> held by {}",
                    lease.node_id
                );
            }
        }
    }

    Ok(held)
}

/// Background renewals every 3 s; node-2 freezes (a GC pause, a partition) at t=6.
async fn renew_while_node_2_freezes(
    dir: &MemoryDirectory,
    clock: &ManualClock,
    start: SystemTime,
    held: &HashMap<&'static str, Lease>,
) -> Result<(), LeaseError> {
    for round in 1..=6 {
        clock.advance(RENEW_EVERY);
        for (node, addr) in NODES {
            if node == "node-2" && round > 2 {
                continue;
            }
            dir.register_node(node, addr, TTL).await?;
            for lease in held.values().filter(|l| l.is_held_by(node)) {
                let renewed = dir
                    .ensure_owner(&lease.room_id, node, clock.now(), TTL)
                    .await?;
                assert_eq!(
                    renewed.lease_token, lease.lease_token,
                    "renewal keeps the token"
                );
            }
        }
        if round == 2 {
            println!("{} node-2 freezes and stops renewing", at(clock, start));
        }
    }

    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), LeaseError> {
    let start = SystemTime::now();
    let clock = Arc::new(ManualClock::new(start));
    let dir = Arc::new(MemoryDirectory::with_clock(clock.clone()));
    let mut store = RoomStore::default();

    let held = compete(&dir, &clock, start).await?;

    // node-2 accepts a command for its room and fences it with its lease.
    let victim = held
        .values()
        .find(|l| l.is_held_by("node-2"))
        .cloned()
        .expect("node-2 owns a room");
    let room = victim.room_id.clone();
    println!(
        "{} node-2 accepts a command for {room} under epoch {} token {}…",
        at(&clock, start),
        victim.epoch,
        short(&victim.lease_token)
    );
    store
        .write(&victim, "node-2 first write")
        .map_err(LeaseError::invalid)?;

    renew_while_node_2_freezes(&dir, &clock, start, &held).await?;

    // node-3 wants the room; node-2's lease ran out at t=16.
    let now = clock.now();
    let takeover = dir.ensure_owner(&room, "node-3", now, TTL).await?;
    println!(
        "{} node-3 takes over {room}: epoch {} -> {}, token {}… -> {}…",
        at(&clock, start),
        victim.epoch,
        takeover.epoch,
        short(&victim.lease_token),
        short(&takeover.lease_token)
    );
    store
        .write(&takeover, "node-3 first write")
        .map_err(LeaseError::invalid)?;

    // node-1 gets a command for the room and forwards it to the owner's address.
    let owner = dir.lookup(&room).await?.expect("room has an owner");
    let target = dir
        .lookup_node(&owner.node_id)
        .await?
        .expect("owner is registered");
    println!(
        "{} node-1 forwards a command for {room} to {} at {}",
        at(&clock, start),
        owner.node_id,
        target.grpc_addr
    );
    let stale = dir.lookup_node("node-2").await?;
    println!("       node-2's registration expired: lookup_node(node-2) = {stale:?}");

    // node-2 wakes up and tries to commit its old command.
    let still_mine = dir
        .verify_owner(&room, "node-2", &victim.lease_token, now)
        .await?;
    println!(
        "{} node-2 wakes up; verify_owner(old token) = {still_mine} -> command rejected",
        at(&clock, start)
    );
    assert!(!still_mine);
    match store.write(&victim, "node-2 stale write") {
        Err(reason) => println!("       {reason}"),
        Ok(()) => unreachable!("a stale epoch must be rejected"),
    }
    let back = dir.ensure_owner(&room, "node-2", now, TTL).await?;
    println!(
        "       node-2 asks for {room} again -> held by {} (epoch {})",
        back.node_id, back.epoch
    );
    Ok(())
}
