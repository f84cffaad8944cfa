//! I2/I3 over long operation sequences, against the reference model.

use std::collections::HashMap;

use unique_core::{Error, OwnerState};

use crate::Subject;
use crate::model::{ClaimVerdict, RecordModel};
use crate::support::{Ctx, FailureNote, owner_for};

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

/// I2/C1–C7: 3000 seeded random operations over five keys (reads, `current`,
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
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut models: HashMap<i64, RecordModel> =
        (1..=KEYS).map(|k| (k, RecordModel::new())).collect();
    let mut stale: HashMap<i64, Vec<OwnerState>> = HashMap::new();
    let mut last_won: HashMap<i64, i64> = HashMap::new();
    for step in 0..OPERATIONS {
        let uid = rng.i64(1..=KEYS);
        let key = ctx.key(uid);
        let model = models.get_mut(&uid).expect("model per key");
        let at = format!("step {step} on uid {uid}");
        match rng.u8(0..100) {
            0..=14 => {
                assert_eq!(ctx.read(&key).await, *model.state(), "{at}: read_owner");
            }
            15..=24 => match (ctx.current(&key).await, model.current()) {
                (Ok(view), Some(expected)) => assert_eq!(view, expected, "{at}: current"),
                (Err(e), None) => assert!(e.is_unavailable(), "{at}: current {e:?}"),
                (got, expected) => panic!("{at}: current {got:?}, model {expected:?}"),
            },
            25..=64 => {
                // Claim from a fresh snapshot, or from one remembered earlier.
                let remembered = stale.entry(uid).or_default();
                let snap = if rng.bool() || remembered.is_empty() {
                    let snap = ctx.read(&key).await;
                    assert_eq!(snap, *model.state(), "{at}: snapshot");
                    remembered.push(snap.clone());
                    if remembered.len() > 8 {
                        remembered.remove(0);
                    }
                    snap
                } else {
                    remembered[rng.usize(..remembered.len())].clone()
                };
                let claim_id = format!("c{}", rng.u8(0..4));
                let result = ctx
                    .store
                    .claim_cas(&key, &owner_for(&claim_id), &claim_id, &snap)
                    .await;
                match (model.claim(&owner_for(&claim_id), &claim_id, &snap), result) {
                    (ClaimVerdict::Won(expected), Ok(generation)) => {
                        assert_eq!(generation, expected, "{at}: claim gen");
                        let previous = last_won.insert(uid, generation).unwrap_or(0);
                        assert!(
                            generation > previous,
                            "{at}: gen went from {previous} to {generation}"
                        );
                    }
                    (ClaimVerdict::ConditionFailed, Err(Error::CasFailed { current })) => {
                        if let Some(carried) = current {
                            assert_eq!(*carried, *model.state(), "{at}: carried snapshot");
                        }
                    }
                    (verdict, result) => panic!("{at}: claim {result:?}, model {verdict:?}"),
                }
            }
            65..=84 => {
                let generation = if rng.bool() {
                    model.state().generation
                } else {
                    rng.i64(-1..=model.state().generation + 2)
                };
                let expected = model.release(generation);
                assert_eq!(
                    ctx.release(&key, generation).await,
                    expected,
                    "{at}: release {generation}"
                );
            }
            85..=89 => {
                // Raw tombstone at the current gen (another writer's logout).
                let generation = model.state().generation.max(1);
                ctx.put(&key, generation, Some(""), None).await;
                *model = RecordModel::from_state(OwnerState {
                    exists: true,
                    generation,
                    ..OwnerState::default()
                });
            }
            90..=94 => {
                // Raw corrupt record: must stay replaceable through its cid.
                let generation = model.state().generation.max(1);
                ctx.put(&key, generation, Some("{corrupt"), Some("z")).await;
                *model = RecordModel::from_state(OwnerState {
                    exists: true,
                    generation,
                    owner: None,
                    owner_corrupt: true,
                    claim_id: Some("z".into()),
                });
            }
            _ => {
                // Raw session with an empty cid.
                let generation = model.state().generation.max(1);
                let owner = owner_for("e");
                let json = unique_core::encode_owner(&owner).expect("owner");
                ctx.put(&key, generation, Some(&json), Some("")).await;
                *model = RecordModel::from_state(OwnerState {
                    exists: true,
                    generation,
                    owner: Some(owner),
                    owner_corrupt: false,
                    claim_id: Some(String::new()),
                });
            }
        }
    }
    for uid in 1..=KEYS {
        assert_eq!(
            ctx.read(&ctx.key(uid)).await,
            *models[&uid].state(),
            "final state of uid {uid}"
        );
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
                let mut seen = [0_i64; 2];
                let mut won: Vec<(i64, i64)> = Vec::new();
                for i in 0..150 {
                    let uid = rng.i64(1..=2);
                    let key = ctx.key(uid);
                    let slot = usize::from(uid == 2);
                    let snap = ctx.read(&key).await;
                    assert!(
                        snap.generation >= seen[slot],
                        "task {t}: gen went backwards"
                    );
                    seen[slot] = snap.generation;
                    if rng.u8(0..4) == 0 {
                        ctx.release(&key, snap.generation).await;
                    } else if let Ok(generation) =
                        ctx.claim(&key, &format!("t{t}-{i}"), &snap).await
                    {
                        assert!(generation > seen[slot]);
                        seen[slot] = generation;
                        won.push((uid, generation));
                    }
                }
                won
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("worker task"));
    }
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "a (key, gen) was won twice");
}
