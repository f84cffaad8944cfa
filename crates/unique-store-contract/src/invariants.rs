//! I2/I3 over long operation sequences, against the reference model.

use std::collections::HashMap;

use unique_core::{CasOutcome, OwnerState};

use crate::Subject;
use crate::check::violated;
use crate::model::{ClaimVerdict, RecordModel};
use crate::support::{Ctx, FailureNote, ensure_record, form, join, owner_for};

/// Operations per random sequence.
const OPERATIONS: usize = 3000;
/// Keys the random sequence spreads over.
const KEYS: i64 = 5;

/// The seed: `UNIQUE_CONTRACT_SEED` when set (to replay a failure), else random.
fn seed() -> u64 {
    std::env::var("UNIQUE_CONTRACT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..))
}

/// I2/C1–C7, C9: 3000 seeded random operations over five keys (reads, `current`,
/// claims from fresh and stale snapshots, releases at right and wrong gens,
/// raw tombstones, corrupt and empty-cid records), each checked against the
/// reference model; claimed gens strictly increase per key. The seed is
/// printed on failure; `UNIQUE_CONTRACT_SEED=<seed>` replays it.
pub async fn random_operations_match_model(subject: Subject) {
    let ctx = Ctx::new(subject, "invariants::random_operations_match_model");
    let seed = seed();
    let _note = FailureNote(format!(
        "random_operations_match_model failed with UNIQUE_CONTRACT_SEED={seed}"
    ));
    let mut walk = Walk {
        ctx,
        rng: fastrand::Rng::with_seed(seed),
        models: (1..=KEYS).map(|k| (k, RecordModel::new())).collect(),
        stale: HashMap::new(),
        last_won: HashMap::new(),
    };
    for step in 0..OPERATIONS {
        let uid = walk.rng.i64(1..=KEYS);
        let at = format!("seed {seed} step {step} on uid {uid}");
        match walk.rng.u8(0..100) {
            0..=14 => walk.read(uid, &at).await,
            15..=24 => walk.current(uid, &at).await,
            25..=64 => walk.claim(uid, &at).await,
            65..=84 => walk.release(uid, &at).await,
            85..=89 => walk.raw(uid, Some(""), None).await,
            90..=94 => walk.raw(uid, Some("{corrupt"), Some("z")).await,
            _ => {
                let json = unique_core::encode_owner(&owner_for("e")).expect("owner");
                walk.raw(uid, Some(&json), Some("")).await;
            }
        }
    }
    for uid in 1..=KEYS {
        walk.read(uid, &format!("seed {seed} final state")).await;
    }
}

/// The state of a random walk: the store, the model of each key, and
/// snapshots remembered to replay later as stale ones.
struct Walk {
    ctx: Ctx,
    rng: fastrand::Rng,
    models: HashMap<i64, RecordModel>,
    stale: HashMap<i64, Vec<OwnerState>>,
    last_won: HashMap<i64, i64>,
}

impl Walk {
    fn model(&mut self, uid: i64) -> &mut RecordModel {
        self.models.get_mut(&uid).expect("model per key")
    }

    async fn read(&mut self, uid: i64, at: &str) {
        let state = self.ctx.read_all(&self.ctx.key(uid)).await;
        ensure_record(
            &state,
            self.model(uid).state(),
            ("C2", "read_owner returns the latest committed write"),
            at,
        );
    }

    async fn current(&mut self, uid: i64, at: &str) {
        match (
            self.ctx.current(&self.ctx.key(uid)).await,
            self.model(uid).current(),
        ) {
            (Ok(view), Some(expected)) => ensure_eq!(
                view,
                expected,
                "C2",
                "current returns the latest committed write (the model's view)",
                "{at}"
            ),
            (Err(e), None) => ensure!(
                e.is_unavailable(),
                "C7",
                "current over a corrupt owner is Unavailable",
                "{at}: got {e:?}"
            ),
            (Ok(view), None) => violated(
                "C7",
                "current over a corrupt owner is Unavailable",
                format_args!("{at}: got {view:?}"),
            ),
            (Err(e), Some(expected)) => violated(
                "C7",
                "current answers unless the stored owner is corrupt",
                format_args!("{at}: got {e}, model {expected:?}"),
            ),
        }
    }

    /// Claims from a fresh snapshot, or from one remembered earlier.
    async fn claim(&mut self, uid: i64, at: &str) {
        let key = self.ctx.key(uid);
        let fresh = self.rng.bool();
        let remembered = self.stale.entry(uid).or_default();
        let snap = if fresh || remembered.is_empty() {
            let snap = self.ctx.read_all(&key).await;
            remembered.push(snap.clone());
            if remembered.len() > 8 {
                remembered.remove(0);
            }
            ensure_record(
                &snap,
                self.model(uid).state(),
                ("C2", "read_owner returns the latest committed write"),
                &format!("{at}: snapshot"),
            );
            snap
        } else {
            remembered[self.rng.usize(..remembered.len())].clone()
        };
        let claim_id = format!("c{}", self.rng.u8(0..4));
        let owner = owner_for(&claim_id);
        let result = self
            .ctx
            .store
            .claim_cas(&key, &owner, &claim_id, &snap)
            .await;
        let at = format!("{at}: claim {claim_id} {}", form(&snap));
        match (self.model(uid).claim(&owner, &claim_id, &snap), result) {
            (ClaimVerdict::Won(expected), Ok(CasOutcome::Written { generation })) => {
                ensure_eq!(
                    generation,
                    expected,
                    "C4",
                    "a claim writes and returns snap.gen + 1",
                    "{at}"
                );
                let previous = self.last_won.insert(uid, generation).unwrap_or(0);
                ensure!(
                    generation > previous,
                    "I2",
                    "gen is strictly monotone per key",
                    "{at}: gen went from {previous} to {generation}"
                );
            }
            (ClaimVerdict::ConditionFailed, Ok(CasOutcome::LostRace { current })) => {
                if let Some(carried) = current {
                    ensure_record(
                        &carried,
                        self.model(uid).state(),
                        ("C8", "a lost race carries the record as it stands"),
                        &at,
                    );
                }
            }
            (ClaimVerdict::Won(_), Ok(CasOutcome::LostRace { .. })) => {
                self.ctx.lost_holding(&key, &claim_id, &snap, &at).await;
            }
            (ClaimVerdict::Won(expected), Err(e)) => violated(
                "C8",
                "a claim on a healthy store fails only on a fault",
                format_args!("{at}: expected gen {expected}, failed with {e}"),
            ),
            (ClaimVerdict::ConditionFailed, result) => violated(
                "C3",
                "a claim whose condition fails must lose the race and write nothing",
                format_args!("{at}: got {result:?}"),
            ),
            (ClaimVerdict::GenExhausted, result) => violated(
                "C4",
                "a claim whose next gen would reach i64::MAX is refused with Unavailable",
                format_args!("{at}: got {result:?}"),
            ),
        }
    }

    /// Releases at the stored gen or at a nearby, often wrong, one.
    async fn release(&mut self, uid: i64, at: &str) {
        let stored = self.model(uid).state().generation;
        let generation = if self.rng.bool() {
            stored
        } else {
            self.rng.i64(-1..=stored + 2)
        };
        let before = self.model(uid).state().clone();
        let expected = self.model(uid).release(generation);
        let key = self.ctx.key(uid);
        let released = self.ctx.release(&key, generation).await;
        ensure_eq!(
            released,
            expected,
            "C5",
            "release answers true exactly when the stored gen equals its gen",
            "{at}: release {generation} over {before:?}"
        );
        if released {
            self.ctx.ensure_tombstone(&key, generation).await;
        }
    }

    /// Another writer's raw record at the stored gen (never moving it back).
    async fn raw(&mut self, uid: i64, owner: Option<&str>, claim_id: Option<&str>) {
        let generation = self.model(uid).state().generation.max(1);
        self.ctx
            .put(&self.ctx.key(uid), generation, owner, claim_id)
            .await;
        *self.model(uid) = RecordModel::from_state(OwnerState::from_record(
            generation,
            owner.into(),
            claim_id.map(str::to_owned),
            None,
        ));
    }
}

/// I2 under concurrency: six tasks do random claims and releases over two
/// keys while each also reads; every task sees each key's gen never decrease,
/// and every won gen is unique per key.
pub async fn gen_monotone_under_concurrency(subject: Subject) {
    let ctx = Ctx::new(subject, "invariants::gen_monotone_under_concurrency");
    let seed = seed();
    let _note = FailureNote(format!(
        "gen_monotone_under_concurrency failed with UNIQUE_CONTRACT_SEED={seed}"
    ));
    let tasks: Vec<_> = (0..6_u64)
        .map(|t| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(t));
                let mut floor = [0_i64; 2];
                let mut won: Vec<(i64, i64)> = Vec::new();
                for i in 0..150 {
                    let uid = rng.i64(1..=2);
                    let key = ctx.key(uid);
                    let slot = usize::from(uid == 2);
                    let snap = ctx.read(&key).await;
                    ensure!(
                        snap.generation >= floor[slot],
                        "I2",
                        "gen never decreases",
                        "seed {seed} task {t}: read gen {} after {}",
                        snap.generation,
                        floor[slot]
                    );
                    floor[slot] = snap.generation;
                    if rng.u8(0..4) == 0 {
                        ctx.release(&key, snap.generation).await;
                    } else if let Ok(generation) =
                        ctx.claim(&key, &format!("t{t}-{i}"), &snap).await
                    {
                        ensure!(
                            generation > floor[slot],
                            "I2",
                            "gen is strictly monotone per key",
                            "seed {seed} task {t}: won gen {generation} after reading {}",
                            floor[slot]
                        );
                        floor[slot] = generation;
                        won.push((uid, generation));
                    }
                }
                won
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(join(task).await);
    }
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    ensure!(
        all.len() == count,
        "I3",
        "each gen of a key is won once",
        "seed {seed}: {} gens were won twice",
        count - all.len()
    );
}
