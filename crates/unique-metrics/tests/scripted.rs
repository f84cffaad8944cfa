//! A scripted sequence of claims, kicks, reads and releases through an `Arbiter` over a
//! `MeteredStore`, with exact counts read from a snapshot recorder.

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use unique_core::{
    Arbiter, CasOutcome, ClaimInput, CurrentView, Error, Key, KickDetail, KickOutcome, KickPayload,
    Kicker, Owner, OwnerState, Store, VacantClaims, async_trait,
};
use unique_metrics::{MeteredStore, MetricsObserver};
use unique_store_memory::MemoryStore;

const OK_NODE: &str = "http://ok.node/kick";
const DOWN_NODE: &str = "http://down.node/kick";
/// Its kick lets another login win the key first, then confirms.
const RACING_NODE: &str = "http://racing.node/kick";
const THROTTLED_UID: i64 = 900;
const UNAVAILABLE_UID: i64 = 901;

/// Confirms kicks to [`OK_NODE`], answers non-2xx for [`DOWN_NODE`], and for
/// [`RACING_NODE`] writes a competing claim (owner [`DOWN_NODE`]) straight into the memory
/// store before confirming, so the arbiter's write loses the race.
struct ScriptedKicker {
    memory: MemoryStore,
}

#[async_trait]
impl Kicker for ScriptedKicker {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, _: Duration) -> KickOutcome {
        match endpoint {
            OK_NODE => KickOutcome::Confirmed,
            RACING_NODE => {
                let key = payload.key();
                let snap = self.memory.read_owner(&key).await.unwrap();
                let racer = Owner::new("", "", DOWN_NODE);
                let won = self.memory.claim_cas(&key, &racer, "racer", &snap).await;
                assert!(matches!(won, Ok(CasOutcome::Written { .. })), "{won:?}");
                KickOutcome::Confirmed
            }
            _ => KickOutcome::Failed(KickDetail::Non2xx),
        }
    }
}

/// The memory store, except that reads of two uids fail.
struct Faulty(MemoryStore);

#[async_trait]
impl Store for Faulty {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        match key.uid {
            THROTTLED_UID => Err(Error::Throttled),
            UNAVAILABLE_UID => Err(Error::unavailable("disk on fire")),
            _ => self.0.read_owner(key).await,
        }
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        self.0.claim_cas(key, owner, claim_id, snap).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.0.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.0.release(key, generation).await
    }
}

fn login(uid: i64, endpoint: &str, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: Key::new("p", "e", uid),
        owner: Owner::new("eu", "c1", endpoint),
        claim_id: claim_id.into(),
    }
}

/// Every metric of the snapshot as `name{label=value,…}` (labels in registration order).
fn snapshot_of(recorder: &DebuggingRecorder) -> BTreeMap<String, DebugValue> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let name = if labels.is_empty() {
                key.name().to_owned()
            } else {
                format!("{}{{{}}}", key.name(), labels.join(","))
            };
            (name, value)
        })
        .collect()
}

fn counters(snapshot: &BTreeMap<String, DebugValue>) -> BTreeMap<String, u64> {
    snapshot
        .iter()
        .filter_map(|(name, value)| match value {
            DebugValue::Counter(n) => Some((name.clone(), *n)),
            _ => None,
        })
        .collect()
}

fn histogram(snapshot: &BTreeMap<String, DebugValue>, name: &str) -> Vec<f64> {
    match snapshot.get(name) {
        Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.0).collect(),
        other => panic!("{name} is not a histogram: {other:?}"),
    }
}

/// The script: seven successful claims (a replay, three kicks ending three ways, a lost
/// race), four failed ones (one superseded), a read and three releases.
async fn run_script<S: Store>(arbiter: &Arbiter<S>) {
    let claim = |input: ClaimInput| {
        let arbiter = arbiter.clone();
        async move { arbiter.claim(&input).await }
    };
    // First login, gen 1: no kick.
    let first = claim(login(1, OK_NODE, "c1")).await.unwrap();
    assert_eq!(first.generation, 1);
    // The same claim again: a replay, no kick, no write.
    assert!(claim(login(1, OK_NODE, "c1")).await.unwrap().replayed);
    // Takeovers: confirmed (gen 2), non-2xx (gen 3), self-replace (gen 4), confirmed (gen 5).
    let confirmed = claim(login(1, DOWN_NODE, "c2")).await.unwrap();
    assert!(confirmed.kicked);
    let refused = claim(login(1, OK_NODE, "c3")).await.unwrap();
    assert_eq!(refused.kick_detail, Some(KickDetail::Non2xx));
    let own = claim(login(1, OK_NODE, "c4")).await.unwrap();
    assert_eq!(own.kick_detail, Some(KickDetail::SelfReplaceSkipped));
    claim(login(1, RACING_NODE, "c5")).await.unwrap();
    // Kicking the racing node lets the racer win gen 6; the second attempt kicks
    // the racer's node (non-2xx) and wins gen 7.
    let raced = claim(login(1, OK_NODE, "c6")).await.unwrap();
    assert_eq!(raced.generation, 7);
    // Refused before the store; then two store faults.
    let invalid = claim(login(0, OK_NODE, "c7")).await.unwrap_err();
    assert!(invalid.is_invalid_params());
    let throttled = claim(login(THROTTLED_UID, OK_NODE, "c8")).await;
    assert!(throttled.unwrap_err().is_throttled());
    let unavailable = claim(login(UNAVAILABLE_UID, OK_NODE, "c9")).await;
    assert!(unavailable.unwrap_err().is_unavailable());
    // A retry of c2, which won gen 2 and was replaced since: superseded, no kick.
    let superseded = claim(login(1, OK_NODE, "c2")).await;
    assert!(superseded.unwrap_err().is_superseded());

    let key = Key::new("p", "e", 1);
    assert_eq!(arbiter.current(&key).await.unwrap().generation, 7);
    assert!(arbiter.release(&key, 7).await.unwrap());
    assert!(!arbiter.release(&key, 1).await.unwrap(), "stale gen");
    assert!(!arbiter.release(&key, 0).await.unwrap(), "no store call");
}

/// Every `unique_store_errors_total` series (each operation by each kind), 0 unless listed.
fn store_errors(nonzero: &[(&str, &str, u64)]) -> BTreeMap<String, u64> {
    let mut series = BTreeMap::new();
    for operation in [
        "read_owner",
        "claim_cas",
        "current",
        "release",
        "read_owners",
        "list_sessions",
        "claim_vacant",
        "count_online",
    ] {
        for kind in ["throttled", "unavailable", "invalid_params"] {
            let count = nonzero
                .iter()
                .find(|(o, k, _)| *o == operation && *k == kind)
                .map_or(0, |(_, _, n)| *n);
            series.insert(
                format!("unique_store_errors_total{{operation={operation},kind={kind}}}"),
                count,
            );
        }
    }
    series
}

#[test]
fn a_scripted_sequence_is_counted_exactly() {
    let recorder = DebuggingRecorder::new();
    let memory = MemoryStore::new();
    metrics::with_local_recorder(&recorder, || {
        let arbiter = Arbiter::builder(MeteredStore::new(Faulty(memory.clone())))
            .kicker(ScriptedKicker {
                memory: memory.clone(),
            })
            .observer(MetricsObserver::new())
            .build();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(run_script(&arbiter));
    });

    let snapshot = snapshot_of(&recorder);
    let mut expected_counters: BTreeMap<String, u64> = [
        ("unique_claims_total{result=ok}", 7),
        ("unique_claims_total{result=invalid_params}", 1),
        ("unique_claims_total{result=throttled}", 1),
        ("unique_claims_total{result=unavailable}", 1),
        ("unique_claims_total{result=superseded}", 1),
        ("unique_claims_total{result=limit_reached}", 0),
        ("unique_claims_shed_total{reason=queue-full}", 0),
        ("unique_claims_shed_total{reason=deadline}", 0),
        ("unique_claim_replays_total", 1),
        ("unique_kicks_total{detail=confirmed}", 3),
        ("unique_kicks_total{detail=no-endpoint}", 0),
        ("unique_kicks_total{detail=self-replace-skipped}", 1),
        ("unique_kicks_total{detail=timeout}", 0),
        ("unique_kicks_total{detail=connect-error}", 0),
        ("unique_kicks_total{detail=non-2xx}", 2),
        ("unique_releases_total{released=false}", 2),
        ("unique_releases_total{released=true}", 1),
        ("unique_store_lost_races_total", 1),
    ]
    .into_iter()
    .map(|(name, count)| (name.to_owned(), count))
    .collect();
    expected_counters.extend(store_errors(&[
        ("read_owner", "throttled", 1),
        ("read_owner", "unavailable", 1),
    ]));
    assert_eq!(counters(&snapshot), expected_counters);

    // Ten claims reached the store; the raced one took two attempts.
    let mut attempts = histogram(&snapshot, "unique_claim_attempts");
    attempts.sort_by(f64::total_cmp);
    assert_eq!(attempts, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0]);
    assert_eq!(
        histogram(&snapshot, "unique_claim_duration_seconds").len(),
        11,
        "every claim, the invalid one included"
    );
    let operations = |operation: &str| {
        let name = format!("unique_store_operation_duration_seconds{{operation={operation}}}");
        histogram(&snapshot, &name).len()
    };
    // The raced claim's second attempt starts from the record its lost race returned.
    assert_eq!(operations("read_owner"), 10);
    assert_eq!(operations("claim_cas"), 7);
    assert_eq!(operations("current"), 1);
    assert_eq!(operations("release"), 2);
}

/// The wrapper keeps the wrapped store's write-first claims (C11): `Faulty` above does not
/// write first, so the script reads first; the memory store does, and so must the wrapper.
#[test]
fn a_store_that_writes_first_still_does_through_the_wrapper() {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        let store = MeteredStore::new(MemoryStore::new());
        assert_eq!(
            store.vacant_claims(),
            MemoryStore::new().vacant_claims(),
            "the wrapped store's answer"
        );
        assert_eq!(store.vacant_claims(), VacantClaims::AbsentAndTombstones);
        let arbiter = Arbiter::builder(store)
            .kicker(ScriptedKicker {
                memory: MemoryStore::new(),
            })
            .build();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let first = arbiter.claim(&login(1, OK_NODE, "a")).await.unwrap();
            assert_eq!(first.generation, 1);
            let takeover = arbiter.claim(&login(1, OK_NODE, "b")).await.unwrap();
            assert_eq!(takeover.generation, 2);
        });
    });
    let snapshot = snapshot_of(&recorder);
    let operations = |operation: &str| {
        let name = format!("unique_store_operation_duration_seconds{{operation={operation}}}");
        histogram(&snapshot, &name).len()
    };
    // The first login is the vacant write alone; the takeover finds the key occupied
    // (the record in the same call), then makes its fenced write. Nothing reads first.
    assert_eq!(operations("claim_vacant"), 2);
    assert_eq!(operations("read_owner"), 0);
    assert_eq!(operations("claim_cas"), 1);
}

/// Ready only by a check of its own, which this one fails, while its reads work.
struct OwnReadiness(MemoryStore);

#[async_trait]
impl Store for OwnReadiness {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.0.read_owner(key).await
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        self.0.claim_cas(key, owner, claim_id, snap).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.0.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.0.release(key, generation).await
    }
    async fn check_ready(&self) -> Result<(), Error> {
        Err(Error::unavailable("its own check failed"))
    }
}

/// The wrapper keeps the wrapped store's own readiness check instead of the trait's
/// default (a read of the sentinel key, which would pass here).
#[test]
fn a_store_with_its_own_readiness_check_keeps_it_through_the_wrapper() {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        let store = MeteredStore::new(OwnReadiness(MemoryStore::new()));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ready = runtime.block_on(store.check_ready());
        assert!(ready.unwrap_err().is_unavailable());
    });
    let snapshot = snapshot_of(&recorder);
    let name = "unique_store_operation_duration_seconds{operation=read_owner}";
    assert!(
        histogram(&snapshot, name).is_empty(),
        "the default's sentinel read was made"
    );
}

#[test]
fn without_a_recorder_everything_is_a_no_op() {
    let observer = MetricsObserver::new();
    unique_core::Observer::on_kick(&observer, None, true);
    let store = MeteredStore::new(MemoryStore::new());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let view = runtime
        .block_on(store.current(&Key::new("p", "e", 1)))
        .unwrap();
    assert!(!view.exists);
}
