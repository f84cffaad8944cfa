//! One claim attempt through every branch of SPEC section 4: replay, kick decision, CAS.
//!
//! Each test scripts the store's snapshot, checks the exact outcome fields, the
//! store calls and kicks that happened, and what the observer saw.

mod common;

use std::time::Duration;

use common::{
    CLAIM_ID, ClaimEvent, Expect, Harness, KickBehaviour, KickCall, NEW_ENDPOINT, OLD_CLAIM_ID,
    OLD_ENDPOINT, ScriptedKicker, ScriptedStore, StoreCall, corrupt, input, key, new_owner,
    old_owner, old_session, online, replayed, tombstone, without_kicker,
};
use unique_core::{
    ClaimOutcome, DEFAULT_KICK_TIMEOUT, Error, KickDetail, KickPayload, Owner, OwnerState,
};

fn confirming() -> ScriptedKicker {
    ScriptedKicker::always(KickBehaviour::Confirm)
}

/// The one `on_claim` a successful single-attempt claim must produce.
fn claimed_once(outcome: &ClaimOutcome) -> Vec<ClaimEvent> {
    vec![ClaimEvent {
        result: Ok(outcome.clone()),
        attempts: 1,
    }]
}

/// The store calls of one read and one CAS from `snap`.
fn read_then_cas(snap: OwnerState) -> Vec<StoreCall> {
    vec![
        StoreCall::ReadOwner(key()),
        StoreCall::ClaimCas {
            key: key(),
            owner: new_owner(),
            claim_id: CLAIM_ID.to_owned(),
            snap,
        },
    ]
}

fn payload(generation: i64) -> KickPayload {
    KickPayload {
        project: "game".to_owned(),
        env: "prod".to_owned(),
        uid: 42,
        slot: String::new(),
        generation,
        reason: unique_core::KickReason::LoginElsewhere,
        message: None,
    }
}

#[tokio::test]
async fn first_login_writes_gen_one_without_kicking() {
    let store = ScriptedStore::new()
        .read(Ok(OwnerState::absent()))
        .cas(Ok(1));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    let expected = Expect {
        generation: 1,
        prev_generation: 0,
        has_prev: false,
        prev_owner: None,
        kicked: false,
        kick_detail: None,
    }
    .outcome();
    assert_eq!(outcome, expected);
    assert_eq!(h.store().calls(), read_then_cas(OwnerState::absent()));
    assert!(h.kicker.calls().is_empty());
    assert!(
        h.observer.kicks().is_empty(),
        "nothing to kick, no decision"
    );
    assert_eq!(h.observer.claims(), claimed_once(&expected));
}

#[tokio::test]
async fn replay_returns_the_stored_gen_without_kick_or_write() {
    let mine = online(7, new_owner(), CLAIM_ID);
    let h = Harness::new(ScriptedStore::new().read(Ok(mine)), confirming());

    let outcome = h.claim().await.unwrap();

    assert_eq!(outcome, replayed(7));
    assert_eq!(h.store().calls(), vec![StoreCall::ReadOwner(key())]);
    assert!(h.kicker.calls().is_empty());
    assert!(h.observer.kicks().is_empty());
    assert_eq!(h.observer.claims(), claimed_once(&replayed(7)));
}

#[tokio::test]
async fn replay_matches_on_claim_id_even_when_the_owner_moved() {
    // The same claim_id is the same login; where it was written from does not matter.
    let mine = online(3, old_owner(), CLAIM_ID);
    let h = Harness::new(ScriptedStore::new().read(Ok(mine)), confirming());

    assert_eq!(h.claim().await.unwrap(), replayed(3));
    assert!(h.kicker.calls().is_empty());
    assert_eq!(h.store().cas_count(), 0);
}

#[tokio::test]
async fn replay_is_answered_even_at_the_last_gen() {
    let mine = online(i64::MAX - 1, new_owner(), CLAIM_ID);
    let h = Harness::new(ScriptedStore::new().read(Ok(mine)), confirming());

    assert_eq!(h.claim().await.unwrap(), replayed(i64::MAX - 1));
}

#[tokio::test]
async fn corrupt_record_with_our_claim_id_is_not_a_replay() {
    // A replay needs a parseable owner; a corrupt one is replaced through the double pin.
    let snap = OwnerState {
        claim_id: Some(CLAIM_ID.to_owned()),
        ..corrupt(4)
    };
    let store = ScriptedStore::new().read(Ok(snap.clone())).cas(Ok(5));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    assert!(!outcome.replayed);
    assert_eq!(outcome.generation, 5);
    assert_eq!(outcome.kick_detail, Some(KickDetail::NoEndpoint));
    assert_eq!(h.store().calls(), read_then_cas(snap));
}

#[tokio::test]
async fn claim_id_match_is_exact() {
    for near in ["", "claim-new ", "Claim-new", "claim-ne"] {
        let snap = online(2, old_owner(), near);
        let store = ScriptedStore::new().read(Ok(snap)).cas(Ok(3));
        let h = Harness::new(store, confirming());

        let outcome = h.claim().await.unwrap();

        assert!(!outcome.replayed, "stored cid {near:?} is not ours");
        assert_eq!(outcome.generation, 3);
        assert_eq!(h.kicker.calls().len(), 1);
    }
}

#[tokio::test]
async fn tombstone_is_claimed_with_next_gen_and_no_kick() {
    let store = ScriptedStore::new().read(Ok(tombstone(5))).cas(Ok(6));
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
    assert_eq!(h.store().calls(), read_then_cas(tombstone(5)));
    assert!(h.kicker.calls().is_empty());
    assert!(h.observer.kicks().is_empty());
    assert_eq!(h.observer.claims(), claimed_once(&expected));
}

#[tokio::test]
async fn corrupt_owner_is_presumed_offline_as_no_endpoint() {
    let store = ScriptedStore::new().read(Ok(corrupt(5))).cas(Ok(6));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    let expected = Expect {
        generation: 6,
        prev_generation: 5,
        has_prev: true,
        prev_owner: None,
        kicked: false,
        kick_detail: Some(KickDetail::NoEndpoint),
    }
    .outcome();
    assert_eq!(outcome, expected);
    assert_eq!(h.store().calls(), read_then_cas(corrupt(5)));
    assert!(h.kicker.calls().is_empty(), "no endpoint to call");
    assert_eq!(
        h.observer.kicks(),
        vec![(Some(KickDetail::NoEndpoint), false)]
    );
    assert_eq!(h.observer.claims(), claimed_once(&expected));
}

#[tokio::test]
async fn empty_old_endpoint_is_presumed_offline_as_no_endpoint() {
    let endpointless = Owner::new("us-east-1", "c1", "");
    let snap = online(5, endpointless.clone(), OLD_CLAIM_ID);
    let store = ScriptedStore::new().read(Ok(snap.clone())).cas(Ok(6));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    let expected = Expect {
        generation: 6,
        prev_generation: 5,
        has_prev: true,
        prev_owner: Some(endpointless),
        kicked: false,
        kick_detail: Some(KickDetail::NoEndpoint),
    }
    .outcome();
    assert_eq!(outcome, expected);
    assert_eq!(h.store().calls(), read_then_cas(snap));
    assert!(h.kicker.calls().is_empty());
    assert_eq!(
        h.observer.kicks(),
        vec![(Some(KickDetail::NoEndpoint), false)]
    );
}

#[tokio::test]
async fn same_endpoint_is_self_replace_skipped_without_a_call() {
    let same_node = Owner::new("eu-west-1", "c9", NEW_ENDPOINT);
    let snap = online(5, same_node.clone(), OLD_CLAIM_ID);
    let store = ScriptedStore::new().read(Ok(snap.clone())).cas(Ok(6));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    let expected = Expect {
        generation: 6,
        prev_generation: 5,
        has_prev: true,
        prev_owner: Some(same_node),
        kicked: false,
        kick_detail: Some(KickDetail::SelfReplaceSkipped),
    }
    .outcome();
    assert_eq!(outcome, expected);
    assert_eq!(h.store().calls(), read_then_cas(snap));
    assert!(h.kicker.calls().is_empty());
    assert_eq!(
        h.observer.kicks(),
        vec![(Some(KickDetail::SelfReplaceSkipped), false)]
    );
}

#[tokio::test]
async fn confirmed_kick_goes_to_the_old_endpoint_with_the_next_gen() {
    let store = ScriptedStore::new().read(Ok(old_session(5))).cas(Ok(6));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    let expected = Expect {
        generation: 6,
        prev_generation: 5,
        has_prev: true,
        prev_owner: Some(old_owner()),
        kicked: true,
        kick_detail: None,
    }
    .outcome();
    assert_eq!(outcome, expected);
    assert_eq!(
        h.kicker.calls(),
        vec![KickCall {
            endpoint: OLD_ENDPOINT.to_owned(),
            payload: payload(6),
            timeout: DEFAULT_KICK_TIMEOUT,
        }]
    );
    assert_eq!(h.store().calls(), read_then_cas(old_session(5)));
    assert_eq!(h.observer.kicks(), vec![(None, true)]);
    assert_eq!(h.observer.claims(), claimed_once(&expected));
}

#[tokio::test]
async fn kick_payload_announces_snapshot_gen_plus_one_for_other_tenants() {
    let mut claim = input();
    claim.key = unique_core::Key::new("other-game", "staging", 9_000_000_000);
    let store = ScriptedStore::new().read(Ok(old_session(41))).cas(Ok(42));
    let h = Harness::new(store, confirming());

    h.arbiter.claim(&claim).await.unwrap();

    let kicks = h.kicker.calls();
    assert_eq!(kicks.len(), 1);
    assert_eq!(
        kicks[0].payload,
        KickPayload {
            project: "other-game".to_owned(),
            env: "staging".to_owned(),
            uid: 9_000_000_000,
            slot: String::new(),
            generation: 42,
            reason: unique_core::KickReason::LoginElsewhere,
            message: None,
        }
    );
}

/// A kick that fails with `detail` is presumed offline: the claim still writes.
async fn claim_after_failed_kick(detail: KickDetail) {
    let store = ScriptedStore::new().read(Ok(old_session(5))).cas(Ok(6));
    let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Fail(detail)));

    let outcome = h.claim().await.unwrap();

    let expected = Expect {
        generation: 6,
        prev_generation: 5,
        has_prev: true,
        prev_owner: Some(old_owner()),
        kicked: false,
        kick_detail: Some(detail),
    }
    .outcome();
    assert_eq!(outcome, expected, "{detail}");
    assert_eq!(h.kicker.calls().len(), 1, "{detail}");
    assert_eq!(h.kicker.calls()[0].endpoint, OLD_ENDPOINT);
    assert_eq!(h.store().calls(), read_then_cas(old_session(5)), "{detail}");
    assert_eq!(h.observer.kicks(), vec![(Some(detail), false)], "{detail}");
    assert_eq!(h.observer.claims(), claimed_once(&expected), "{detail}");
}

#[tokio::test]
async fn kick_timeout_reported_by_the_kicker_fails_open() {
    claim_after_failed_kick(KickDetail::Timeout).await;
}

#[tokio::test]
async fn kick_connect_error_fails_open() {
    claim_after_failed_kick(KickDetail::ConnectError).await;
}

#[tokio::test]
async fn kick_non_2xx_fails_open() {
    claim_after_failed_kick(KickDetail::Non2xx).await;
}

/// Fails the test, instead of hanging it, if the Arbiter does not cut the kick.
/// The paused clock jumps straight to whichever timer fires first.
async fn unhung<T>(claim: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_hours(1), claim)
        .await
        .expect("the claim hung on a kicker that never answers")
}

#[tokio::test(start_paused = true)]
async fn hanging_kicker_is_cut_at_the_configured_kick_timeout() {
    let timeout = Duration::from_millis(250);
    let store = ScriptedStore::new().read(Ok(old_session(5))).cas(Ok(6));
    let h = Harness::with(store, ScriptedKicker::always(KickBehaviour::Hang), |b| {
        b.kick_timeout(timeout)
    });
    let started = tokio::time::Instant::now();

    let outcome = unhung(h.claim()).await.unwrap();

    assert_eq!(outcome.generation, 6);
    assert!(!outcome.kicked);
    assert_eq!(outcome.kick_detail, Some(KickDetail::Timeout));
    // Paused clock: this is the Arbiter's timer, not wall time.
    assert_eq!(started.elapsed(), timeout);
    assert_eq!(
        h.kicker.calls()[0].timeout,
        timeout,
        "kicker told its deadline"
    );
    assert_eq!(h.store().cas_count(), 1);
    assert_eq!(h.observer.kicks(), vec![(Some(KickDetail::Timeout), false)]);
}

#[tokio::test(start_paused = true)]
async fn hanging_kicker_is_cut_at_the_default_kick_timeout() {
    let store = ScriptedStore::new().read(Ok(old_session(5))).cas(Ok(6));
    let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Hang));
    let started = tokio::time::Instant::now();

    let outcome = unhung(h.claim()).await.unwrap();

    assert_eq!(outcome.kick_detail, Some(KickDetail::Timeout));
    assert_eq!(started.elapsed(), DEFAULT_KICK_TIMEOUT);
}

#[tokio::test]
async fn no_kicker_is_fail_open_and_reports_kicked() {
    let store = ScriptedStore::new().read(Ok(old_session(5))).cas(Ok(6));
    let (arbiter, observer) = without_kicker(store);

    let outcome = arbiter.claim(&input()).await.unwrap();

    let expected = Expect {
        generation: 6,
        prev_generation: 5,
        has_prev: true,
        prev_owner: Some(old_owner()),
        kicked: true,
        kick_detail: None,
    }
    .outcome();
    assert_eq!(outcome, expected);
    assert_eq!(observer.kicks(), vec![(None, true)]);
    assert_eq!(observer.claims(), claimed_once(&expected));
}

#[tokio::test]
async fn no_kicker_still_reports_the_synthesised_kick_details() {
    // Fail-open covers the call that would be made; no call is made for these.
    let same_node = online(2, Owner::new("", "", NEW_ENDPOINT), OLD_CLAIM_ID);
    for (snap, detail) in [
        (corrupt(2), KickDetail::NoEndpoint),
        (same_node, KickDetail::SelfReplaceSkipped),
    ] {
        let store = ScriptedStore::new().read(Ok(snap)).cas(Ok(3));
        let (arbiter, observer) = without_kicker(store);

        let outcome = arbiter.claim(&input()).await.unwrap();

        assert!(!outcome.kicked, "{detail}");
        assert_eq!(outcome.kick_detail, Some(detail));
        assert_eq!(observer.kicks(), vec![(Some(detail), false)]);
    }
}

#[tokio::test]
async fn no_kicker_first_login_reports_nothing_kicked() {
    let store = ScriptedStore::new()
        .read(Ok(OwnerState::absent()))
        .cas(Ok(1));
    let (arbiter, observer) = without_kicker(store);

    let outcome = arbiter.claim(&input()).await.unwrap();

    assert!(!outcome.kicked, "kicked means a session was evicted");
    assert_eq!(outcome.kick_detail, None);
    assert!(observer.kicks().is_empty());
}

#[tokio::test]
async fn gen_at_max_minus_one_is_refused_before_kicking() {
    let store = ScriptedStore::new().read(Ok(old_session(i64::MAX - 1)));
    let h = Harness::new(store, confirming());

    let err = h.claim().await.unwrap_err();

    assert!(err.is_unavailable(), "{err}");
    assert!(
        h.kicker.calls().is_empty(),
        "a session we cannot replace stays"
    );
    assert!(h.observer.kicks().is_empty());
    assert_eq!(h.store().calls(), vec![StoreCall::ReadOwner(key())]);
    assert_eq!(
        h.observer.claims(),
        vec![ClaimEvent {
            result: Err("unavailable"),
            attempts: 1
        }]
    );
}

#[tokio::test]
async fn tombstone_at_max_minus_one_is_refused_without_writing() {
    let store = ScriptedStore::new().read(Ok(tombstone(i64::MAX - 1)));
    let h = Harness::new(store, confirming());

    let err = h.claim().await.unwrap_err();

    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert_eq!(h.store().cas_count(), 0);
}

#[tokio::test]
async fn gen_at_max_minus_two_still_claims_the_last_gen() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(i64::MAX - 2)))
        .cas(Ok(i64::MAX - 1));
    let h = Harness::new(store, confirming());

    let outcome = h.claim().await.unwrap();

    assert_eq!(outcome.generation, i64::MAX - 1);
    assert_eq!(outcome.prev_generation, i64::MAX - 2);
    assert_eq!(h.kicker.calls()[0].payload, payload(i64::MAX - 1));
}

#[tokio::test]
async fn arbiter_clones_share_one_configuration() {
    let store = ScriptedStore::new()
        .read(Ok(OwnerState::absent()))
        .cas(Ok(1))
        .read(Ok(online(1, new_owner(), CLAIM_ID)));
    let h = Harness::new(store, confirming());
    let clone = h.arbiter.clone();

    assert_eq!(h.claim().await.unwrap().generation, 1);
    assert_eq!(clone.claim(&input()).await.unwrap(), replayed(1));
    assert_eq!(h.observer.claims().len(), 2, "one observer behind both");
}
