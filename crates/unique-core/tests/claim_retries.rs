//! The retry loop of SPEC section 4: lost races, carried snapshots, the attempt
//! budget, store error classification and the ambiguous write.

mod common;

use common::{
    CLAIM_ID, ClaimEvent, Expect, Harness, KickBehaviour, ScriptedKicker, ScriptedStore, new_owner,
    old_session, online, replayed, tombstone,
};
use unique_core::{Error, KickDetail, Owner, OwnerState};

const OTHER_ENDPOINT: &str = "https://other.node/kick?token=t";

/// The session that won the race we lost, at `generation`.
fn rival(generation: i64) -> OwnerState {
    online(
        generation,
        Owner::new("ap-south-1", "c3", OTHER_ENDPOINT),
        "claim-rival",
    )
}

fn confirming() -> ScriptedKicker {
    ScriptedKicker::always(KickBehaviour::Confirm)
}

fn failed(code: &'static str, attempts: u32) -> Vec<ClaimEvent> {
    vec![ClaimEvent {
        result: Err(code),
        attempts,
    }]
}

#[tokio::test]
async fn lost_race_rereads_rekicks_the_winner_and_wins_next_attempt() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .lost()
        .read(Ok(rival(6)))
        .cas(Ok(7));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    let expected = Expect {
        generation: 7,
        prev_generation: 6,
        has_prev: true,
        prev_owner: Some(rival(6).owner.unwrap()),
        kicked: true,
        kick_detail: None,
    }
    .outcome();
    assert_eq!(outcome, expected);
    assert_eq!(h.store().read_count(), 2, "no snapshot carried: re-read");
    assert_eq!(h.store().cas_snapshots(), vec![old_session(5), rival(6)]);
    let kicks = h.kicker.calls();
    assert_eq!(kicks.len(), 2, "each attempt kicks its own snapshot");
    assert_eq!(kicks[0].endpoint, common::OLD_ENDPOINT);
    assert_eq!(kicks[0].payload.generation, 6);
    assert_eq!(kicks[1].endpoint, OTHER_ENDPOINT);
    assert_eq!(kicks[1].payload.generation, 7);
    assert_eq!(h.observer.kicks(), vec![(None, true), (None, true)]);
    assert_eq!(
        h.observer.claims(),
        vec![ClaimEvent {
            result: Ok(expected),
            attempts: 2
        }]
    );
}

#[tokio::test]
async fn outcome_describes_the_winning_attempt_only() {
    // First attempt: kick confirmed, race lost. Second: a fresh record, no kick.
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .lost()
        .read(Ok(rival(6)))
        .cas(Ok(7));
    let kicker = ScriptedKicker::sequence(
        &[KickBehaviour::Confirm],
        KickBehaviour::Fail(KickDetail::Non2xx),
    );
    let h = Harness::new(store, kicker);

    let outcome = h.claim().await.unwrap();

    assert!(!outcome.kicked);
    assert_eq!(outcome.kick_detail, Some(KickDetail::Non2xx));
    assert_eq!(outcome.prev_generation, 6);
    assert_eq!(
        h.observer.kicks(),
        vec![(None, true), (Some(KickDetail::Non2xx), false)]
    );
}

#[tokio::test]
async fn lost_race_to_a_release_claims_the_tombstone_without_kicking_again() {
    let tomb = tombstone(5);
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .lost_to(tomb.clone())
        .cas(Ok(6));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    let expected = Expect {
        generation: 6,
        prev_generation: 5,
        has_prev: false,
        prev_owner: None,
        kicked: false,
        kick_detail: None,
    }
    .outcome();
    assert_eq!(outcome, expected);
    assert_eq!(
        h.kicker.calls().len(),
        1,
        "only the first snapshot held a session"
    );
    assert_eq!(h.store().cas_snapshots(), vec![old_session(5), tomb]);
}

#[tokio::test]
async fn lost_race_with_snapshot_is_used_without_a_second_read() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .lost_to(rival(6))
        .cas(Ok(7));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    assert_eq!(outcome.generation, 7);
    assert_eq!(outcome.prev_owner, rival(6).owner);
    assert_eq!(
        h.store().read_count(),
        1,
        "the carried snapshot saves a read"
    );
    assert_eq!(h.store().cas_snapshots(), vec![old_session(5), rival(6)]);
    let kicks = h.kicker.calls();
    assert_eq!(kicks.len(), 2);
    assert_eq!(kicks[1].endpoint, OTHER_ENDPOINT);
    assert_eq!(kicks[1].payload.generation, 7);
    assert_eq!(h.observer.claims()[0].attempts, 2);
}

#[tokio::test]
async fn carried_snapshot_is_used_once_then_the_next_attempt_reads() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .lost_to(rival(6))
        .lost()
        .read(Ok(rival(8)))
        .cas(Ok(9));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    assert_eq!(outcome.generation, 9);
    assert_eq!(h.store().read_count(), 2);
    assert_eq!(
        h.store().cas_snapshots(),
        vec![old_session(5), rival(6), rival(8)]
    );
    assert_eq!(h.observer.claims()[0].attempts, 3);
}

#[tokio::test]
async fn budget_exhausted_is_unavailable_after_the_default_three_attempts() {
    let mut store = ScriptedStore::new();
    for generation in 5..8 {
        store = store.read(Ok(old_session(generation))).lost();
    }
    let h = Harness::new(store, confirming());

    let err = h.claim().await.unwrap_err();

    assert!(err.is_unavailable(), "{err}");
    assert_eq!(h.store().read_count(), 3);
    assert_eq!(h.store().cas_count(), 3);
    assert_eq!(h.kicker.calls().len(), 3, "every attempt re-kicks");
    assert_eq!(h.observer.kicks().len(), 3);
    assert_eq!(h.observer.claims(), failed("unavailable", 3));
}

#[tokio::test]
async fn budget_exhausted_with_carried_snapshots_reads_once() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .lost_to(rival(6))
        .lost_to(rival(7))
        .lost_to(rival(8));
    let h = Harness::new(store, confirming());

    let err = h.claim().await.unwrap_err();

    assert!(err.is_unavailable(), "{err}");
    assert_eq!(h.store().read_count(), 1);
    assert_eq!(h.store().cas_count(), 3);
}

#[tokio::test]
async fn max_claim_attempts_zero_behaves_as_one() {
    let store = ScriptedStore::new().read(Ok(old_session(5))).lost();
    let h = Harness::with(store, confirming(), |b| b.max_claim_attempts(0));

    let err = h.claim().await.unwrap_err();

    assert!(err.is_unavailable(), "{err}");
    assert_eq!(h.store().read_count(), 1);
    assert_eq!(h.store().cas_count(), 1);
    assert_eq!(h.observer.claims(), failed("unavailable", 1));
}

#[tokio::test]
async fn max_claim_attempts_one_wins_on_the_first_cas() {
    let store = ScriptedStore::new().read(Ok(old_session(5))).cas(Ok(6));
    let h = Harness::with(store, confirming(), |b| b.max_claim_attempts(1));

    assert_eq!(h.claim().await.unwrap().generation, 6);
}

#[tokio::test]
async fn a_larger_budget_allows_that_many_attempts() {
    let mut store = ScriptedStore::new();
    for generation in 1..5 {
        store = store.read(Ok(rival(generation))).lost();
    }
    let store = store.read(Ok(rival(5))).cas(Ok(6));
    let h = Harness::with(store, confirming(), |b| b.max_claim_attempts(5));

    let outcome = h.claim().await.unwrap();

    assert_eq!(outcome.generation, 6);
    assert_eq!(h.store().cas_count(), 5);
    assert_eq!(h.observer.claims()[0].attempts, 5);
}

#[tokio::test]
async fn throttled_read_is_passed_through_without_write() {
    let store = ScriptedStore::new().read(Err(Error::Throttled));
    let h = Harness::new(store, confirming());

    let err = h.claim().await.unwrap_err();

    assert!(matches!(err, Error::Throttled), "{err}");
    assert_eq!(h.store().cas_count(), 0);
    assert!(h.kicker.calls().is_empty());
    assert_eq!(h.observer.claims(), failed("throttled", 1));
}

#[tokio::test]
async fn throttled_cas_is_passed_through_without_retry() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .cas(Err(Error::Throttled));
    let h = Harness::new(store, confirming());

    let err = h.claim().await.unwrap_err();

    assert!(matches!(err, Error::Throttled), "{err}");
    assert_eq!(h.store().read_count(), 1, "throttling is not a lost race");
    assert_eq!(h.kicker.calls().len(), 1);
    assert_eq!(h.observer.claims(), failed("throttled", 1));
}

#[tokio::test]
async fn throttled_read_on_a_retry_is_passed_through() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .lost()
        .read(Err(Error::Throttled));
    let h = Harness::new(store, confirming());

    let err = h.claim().await.unwrap_err();

    assert!(matches!(err, Error::Throttled), "{err}");
    assert_eq!(h.store().cas_count(), 1);
    assert_eq!(h.observer.claims(), failed("throttled", 2));
}

/// Store errors a claim must report as `Unavailable` (fail-closed).
fn faults() -> Vec<(&'static str, Error)> {
    vec![
        ("unavailable", Error::unavailable("table gone")),
        ("invalid params", Error::invalid("store rejected input")),
        (
            "unavailable with source",
            Error::unavailable_with("io", std::io::Error::other("reset")),
        ),
    ]
}

#[tokio::test]
async fn any_other_read_error_is_unavailable() {
    for (name, fault) in faults() {
        let h = Harness::new(ScriptedStore::new().read(Err(fault)), confirming());

        let err = h.claim().await.unwrap_err();

        assert!(err.is_unavailable(), "{name}: {err}");
        assert_eq!(h.store().cas_count(), 0, "{name}");
        assert_eq!(h.observer.claims(), failed("unavailable", 1), "{name}");
    }
}

#[tokio::test]
async fn any_other_cas_error_is_unavailable_without_retry() {
    for (name, fault) in faults() {
        let store = ScriptedStore::new()
            .read(Ok(old_session(5)))
            .cas(Err(fault));
        let h = Harness::new(store, confirming());

        let err = h.claim().await.unwrap_err();

        assert!(err.is_unavailable(), "{name}: {err}");
        assert_eq!(h.store().read_count(), 1, "{name}: a fault is not a race");
        assert_eq!(h.observer.claims(), failed("unavailable", 1), "{name}");
    }
}

#[tokio::test]
async fn ambiguous_write_ends_in_replay_with_the_written_gen_and_no_second_kick() {
    // The CAS was applied but reported as failed; the re-read shows our own claim.
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .lost()
        .read(Ok(online(6, new_owner(), CLAIM_ID)));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    assert_eq!(outcome, replayed(6));
    assert_eq!(h.kicker.calls().len(), 1, "the old session was kicked once");
    assert_eq!(h.observer.kicks(), vec![(None, true)]);
    assert_eq!(h.store().cas_count(), 1, "no second write");
    assert_eq!(
        h.observer.claims(),
        vec![ClaimEvent {
            result: Ok(replayed(6)),
            attempts: 2
        }]
    );
}

#[tokio::test]
async fn ambiguous_write_with_carried_snapshot_replays_without_reading() {
    let mine = online(6, new_owner(), CLAIM_ID);
    let store = ScriptedStore::new().read(Ok(old_session(5))).lost_to(mine);
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    assert_eq!(outcome, replayed(6));
    assert_eq!(h.store().read_count(), 1);
    assert_eq!(h.store().cas_count(), 1);
    assert_eq!(h.kicker.calls().len(), 1);
}

#[tokio::test]
async fn ambiguous_write_on_the_last_attempt_is_unavailable() {
    // With the budget spent, nobody re-reads: the caller retries with the same
    // claim_id and gets the replay then (the client's job, SPEC section 5).
    let store = ScriptedStore::new().read(Ok(old_session(5))).lost();
    let h = Harness::with(store, confirming(), |b| b.max_claim_attempts(1));

    assert!(h.claim().await.unwrap_err().is_unavailable());
}

#[tokio::test]
async fn gen_exhausted_on_a_retry_stops_before_the_second_kick() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(i64::MAX - 2)))
        .lost_to(rival(i64::MAX - 1));
    let h = Harness::new(store, confirming());

    let err = h.claim().await.unwrap_err();

    assert!(err.is_unavailable(), "{err}");
    assert_eq!(h.kicker.calls().len(), 1);
    assert_eq!(h.store().cas_count(), 1);
    assert_eq!(h.observer.claims(), failed("unavailable", 2));
}
