//! The kicker's endpoint check (`docs/design.md#kick-endpoint-policy`): a claim whose
//! new endpoint the kicker refuses is `InvalidParams` before any store call or kick.

mod common;

use common::{
    ClaimEvent, Harness, KickBehaviour, KickCall, NEW_ENDPOINT, OLD_ENDPOINT, ScriptedKicker,
    ScriptedStore, StoreCall, input, key, old_session,
};
use unique_core::{DEFAULT_KICK_TIMEOUT, KickPayload, Owner};

const SECRET_ENDPOINT: &str = "http://169.254.169.254/latest?token=s3cr3t";

#[tokio::test]
async fn a_refused_new_endpoint_writes_nothing_and_kicks_nobody() {
    let kicker = ScriptedKicker::always(KickBehaviour::Confirm).refusing(SECRET_ENDPOINT);
    // An empty script: any store call at all panics.
    let harness = Harness::new(ScriptedStore::new(), kicker);
    let mut claim = input();
    claim.owner = Owner::new("eu-west-1", "c2", SECRET_ENDPOINT);

    let error = harness.arbiter.claim(&claim).await.unwrap_err();

    assert!(error.is_invalid_params(), "{error}");
    let message = error.to_string();
    assert_eq!(
        message,
        "invalid params: owner.endpoint is refused: refused by the script"
    );
    assert!(!message.contains("s3cr3t") && !message.contains("169.254"));
    assert!(harness.store().calls().is_empty(), "the store was touched");
    assert!(harness.kicker.calls().is_empty(), "somebody was kicked");
    assert_eq!(harness.kicker.checked(), [SECRET_ENDPOINT]);
    assert!(harness.observer.kicks().is_empty());
    assert_eq!(
        harness.observer.claims(),
        [ClaimEvent {
            result: Err("invalid_params"),
            attempts: 0
        }]
    );
}

#[tokio::test]
async fn an_accepted_new_endpoint_is_checked_once_and_the_claim_goes_on() {
    let kicker = ScriptedKicker::always(KickBehaviour::Confirm).refusing(OLD_ENDPOINT);
    let store = ScriptedStore::new()
        .read(Ok(old_session(7)))
        .lost()
        .read(Ok(old_session(7)))
        .cas(Ok(8));
    let harness = Harness::new(store, kicker);

    let outcome = harness.arbiter.claim(&input()).await.unwrap();

    assert_eq!(outcome.generation, 8);
    // Checked once per claim, not per attempt, and only the new endpoint: the old
    // session's endpoint is the kicker's business at kick time.
    assert_eq!(harness.kicker.checked(), [NEW_ENDPOINT]);
    let kick = KickCall {
        endpoint: OLD_ENDPOINT.to_owned(),
        payload: KickPayload {
            project: key().project,
            env: key().env,
            uid: key().uid,
            slot: String::new(),
            generation: 8,
            reason: unique_core::KickReason::LoginElsewhere,
            message: None,
        },
        timeout: DEFAULT_KICK_TIMEOUT,
    };
    assert_eq!(harness.kicker.calls(), [kick.clone(), kick]);
    assert_eq!(harness.store().cas_count(), 2);
}

#[tokio::test]
async fn invalid_input_is_refused_before_the_kicker_is_asked() {
    let kicker = ScriptedKicker::always(KickBehaviour::Confirm);
    let harness = Harness::new(ScriptedStore::new(), kicker);
    let mut claim = input();
    claim.owner.endpoint = "ftp://new.node/kick".to_owned();

    let error = harness.arbiter.claim(&claim).await.unwrap_err();

    assert!(error.is_invalid_params(), "{error}");
    assert!(harness.kicker.checked().is_empty());
    assert_eq!(harness.store().calls(), Vec::<StoreCall>::new());
}
