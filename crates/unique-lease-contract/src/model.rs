//! Long seeded random operation sequences checked step by step against a small
//! reference model of the contract (D1–D7).

use crate::check::Answer;
use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{SeedReport, Seen, Subject, fresh_token, seen, seen_opt, whole_ms};
use unique_lease::STORE_CLOCK_RESOLUTION;

const ROOMS: usize = 3;
const NODES: [&str; 4] = ["a", "b", "c", "d"];

/// The model's view of one room's lease (times in milliseconds on the store's clock).
#[derive(Debug, Clone)]
struct ModelLease {
    node: usize,
    token: String,
    epoch: u64,
    exp: u64,
}

/// The reference model: what the contract says each room holds.
#[derive(Debug)]
struct Model {
    /// Room ids; each sequence uses its own, as sequences share one subject.
    rooms: [String; ROOMS],
    leases: [Option<ModelLease>; ROOMS],
    /// Highest epoch granted per room (D4: a new grant must exceed it).
    last_epoch: [u64; ROOMS],
    /// Every token ever issued anywhere (D1: a grant's token is fresh).
    issued: HashSet<String>,
    /// Tokens of earlier holdings per room, to try stale tokens on verify.
    history: [Vec<String>; ROOMS],
}

impl Model {
    fn new(sequence: u64) -> Self {
        Self {
            rooms: std::array::from_fn(|i| format!("model-{sequence}-{i}")),
            leases: Default::default(),
            last_epoch: [0; ROOMS],
            issued: HashSet::new(),
            history: Default::default(),
        }
    }

    fn valid(&self, room: usize, now: u64) -> Option<&ModelLease> {
        self.leases[room]
            .as_ref()
            .filter(|l| l.exp > 0 && now < l.exp)
    }

    /// What the store must report about `room` at `now`.
    fn as_seen(&self, room: usize, now: u64) -> Option<Seen> {
        self.leases[room].as_ref().map(|l| Seen {
            room_id: self.rooms[room].clone(),
            node_id: NODES[l.node].to_owned(),
            lease_token: l.token.clone(),
            epoch: l.epoch,
            ttl_left: Duration::from_millis(l.exp.saturating_sub(now)),
        })
    }
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn millis(t: SystemTime) -> u64 {
    u64::try_from(t.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// D1–D7, D10: three seeded sequences of 1500 random operations while the store's
/// clock moves on (ensure with random ttls and sometimes a caller clock behind or
/// ahead, verify with current / stale / forged tokens,
/// release, lookup) over 3 rooms and 4 nodes, each result compared with the
/// reference model: held-elsewhere and renewal results exactly, grants by node,
/// expiry, a never-issued token and an epoch above every earlier one of the room.
pub async fn random_sequences_match_the_reference_model(s: Subject) {
    let base = super::seed();
    for offset in 0..3 {
        let seed = base.wrapping_add(offset);
        let report = SeedReport(seed);
        run_sequence(&s, seed, Model::new(offset)).await;
        drop(report);
    }
}

async fn run_sequence(s: &Subject, seed: u64, mut model: Model) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut clock = millis(whole_ms(s.now()));
    for step in 0..1500 {
        let pass = rng.u64(0..2_500);
        s.pass(Duration::from_millis(pass));
        clock += pass;
        // One call in ten comes from a caller whose clock is off by up to 5 s.
        let caller = match rng.u8(0..20) {
            0 => clock - rng.u64(0..5_000),
            1 => clock + rng.u64(0..5_000),
            _ => clock,
        };
        let room = rng.usize(0..ROOMS);
        let node = rng.usize(0..NODES.len());
        let ctx = format!(
            "seed {seed} step {step} room {room} node {node} store's clock {clock} caller's {caller}"
        );
        let now = Now {
            store: clock,
            caller,
        };
        match rng.u8(0..20) {
            0..=9 => ensure(s, &mut model, &mut rng, room, node, now, &ctx).await,
            10..=13 => verify(s, &model, &mut rng, room, node, now, &ctx).await,
            14..=16 => {
                let token = pick_token(&model, &mut rng, room);
                let expected = model.leases[room]
                    .as_ref()
                    .is_some_and(|l| l.node == node && l.token == token);
                let released = s
                    .directory
                    .release_owner(&model.rooms[room], NODES[node], &token)
                    .await
                    .answer("D6", "release_owner must answer a valid call");
                ensure_eq!(
                    released,
                    expected,
                    "D6",
                    "release_owner must delete exactly when the caller holds the lease by that token",
                    "{ctx}"
                );
                if released {
                    model.leases[room] = None;
                }
            }
            _ => {
                let stored = s
                    .directory
                    .lookup(&model.rooms[room])
                    .await
                    .answer("D7", "lookup must answer a valid call");
                ensure_eq!(
                    seen_opt(stored.as_ref()),
                    model.as_seen(room, clock),
                    "D7",
                    "lookup must return the stored lease, expired ones included",
                    "{ctx}"
                );
            }
        }
    }
}

/// One step's two clocks, in ms: the store's (which judges) and the caller's.
#[derive(Clone, Copy)]
struct Now {
    store: u64,
    caller: u64,
}

async fn ensure(
    s: &Subject,
    model: &mut Model,
    rng: &mut fastrand::Rng,
    room: usize,
    node: usize,
    now: Now,
    ctx: &str,
) {
    let (ttl, ttl_ms) = match rng.u8(0..20) {
        0 => (Duration::ZERO, 30_000),
        1 => (Duration::from_micros(1_500), 2),
        _ => {
            let ms = rng.u64(1..4_000);
            (Duration::from_millis(ms), ms)
        }
    };
    let got = s
        .directory
        .ensure_owner(&model.rooms[room], NODES[node], at(now.caller), ttl)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease");
    let (now, caller) = (now.store, now.caller);
    ensure_eq!(
        got.expires_at,
        at(caller) + got.ttl_left.saturating_sub(STORE_CLOCK_RESOLUTION),
        "D1",
        "a lease must be placed on the caller's clock at now + ttl left, less the store clock's resolution",
        "{ctx}"
    );
    match model.valid(room, now).cloned() {
        Some(held) if held.node != node => {
            ensure_eq!(
                Some(seen(&got)),
                model.as_seen(room, now),
                "D3",
                "another node's valid lease must be returned unchanged",
                "{ctx}"
            );
        }
        Some(mut mine) => {
            mine.exp = mine.exp.max(now + ttl_ms);
            model.leases[room] = Some(mine);
            ensure_eq!(
                Some(seen(&got)),
                model.as_seen(room, now),
                "D2",
                "a renewal must keep token and epoch and never shorten the lease",
                "{ctx}"
            );
        }
        None => {
            ensure_eq!(
                (got.room_id.as_str(), got.node_id.as_str()),
                (model.rooms[room].as_str(), NODES[node]),
                "D1",
                "a free or expired room must be granted to the caller",
                "{ctx}"
            );
            ensure_eq!(
                got.ttl_left,
                Duration::from_millis(ttl_ms),
                "D1",
                "a grant must have the whole ttl left",
                "{ctx}"
            );
            ensure!(
                model.issued.insert(got.lease_token.clone()),
                "D1",
                "a grant must carry a fresh token",
                "token reused: {ctx}"
            );
            ensure!(
                got.epoch > model.last_epoch[room],
                "D4",
                "a new lease must carry an epoch above every earlier one",
                "epoch {} after {}: {ctx}",
                got.epoch,
                model.last_epoch[room]
            );
            if let Some(old) = model.leases[room].take() {
                model.history[room].push(old.token);
            }
            model.last_epoch[room] = got.epoch;
            model.leases[room] = Some(ModelLease {
                node,
                token: got.lease_token,
                epoch: got.epoch,
                exp: now + ttl_ms,
            });
        }
    }
}

/// A token to verify or release `room` with: the current holding's (half the time), an
/// earlier holding's, or one never issued.
fn pick_token(model: &Model, rng: &mut fastrand::Rng, room: usize) -> String {
    let current = model.leases[room].as_ref().map(|l| l.token.clone());
    let old = &model.history[room];
    match (rng.u8(0..4), current) {
        (0 | 1, Some(token)) => token,
        (2, _) if !old.is_empty() => old[rng.usize(0..old.len())].clone(),
        _ => fresh_token(),
    }
}

async fn verify(
    s: &Subject,
    model: &Model,
    rng: &mut fastrand::Rng,
    room: usize,
    node: usize,
    now: Now,
    ctx: &str,
) {
    let token = pick_token(model, rng, room);
    let expected = model
        .valid(room, now.store)
        .is_some_and(|l| l.node == node && l.token == token);
    let got = s
        .directory
        .verify_owner(&model.rooms[room], NODES[node], &token, at(now.caller))
        .await
        .answer(
            "D5",
            "verify_owner must answer a valid call with true or false",
        );
    ensure_eq!(
        got,
        expected,
        "D5",
        "verify_owner must be true iff the lease has this node and token and is valid",
        "{ctx}"
    );
}
