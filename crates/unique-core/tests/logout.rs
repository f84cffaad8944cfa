//! `Arbiter::logout`, the admin logout (`docs/design.md#admin-logout`): what it reads,
//! writes and kicks for every kind of record, and that a login landing between its read and
//! its tombstone is never logged out.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    Harness, KickBehaviour, KickCall, LoginBeforeRelease, OLD_ENDPOINT, RecordingObserver,
    ScriptedKicker, ScriptedStore, StoreCall, corrupt, key, old_owner, old_session, online,
    tombstone, without_kicker,
};
use unique_core::{
    Arbiter, ClaimInput, DEFAULT_KICK_TIMEOUT, Error, Key, KickDetail, KickPayload, KickReason,
    LogoutInput, LogoutOutcome, MAX_LOGOUT_REASON_CHARS, Owner, OwnerState, Store,
};
use unique_store_memory::MemoryStore;

fn logout(reason: Option<&str>) -> LogoutInput {
    LogoutInput {
        key: key(),
        reason: reason.map(str::to_owned),
    }
}

fn outcome(
    released: bool,
    generation: i64,
    kicked: bool,
    kick_detail: Option<KickDetail>,
) -> LogoutOutcome {
    LogoutOutcome {
        released,
        generation,
        kicked,
        kick_detail,
    }
}

/// The admin kick of the session at `generation`: it announces `generation + 1`.
fn admin_kick(generation: i64, message: Option<&str>) -> KickCall {
    KickCall {
        endpoint: OLD_ENDPOINT.to_owned(),
        payload: KickPayload {
            message: message.map(str::to_owned),
            ..KickPayload::new(&key(), generation + 1, KickReason::Admin)
        },
        timeout: DEFAULT_KICK_TIMEOUT,
    }
}

#[tokio::test]
async fn an_online_session_is_tombstoned_at_its_gen_then_kicked_with_the_next_gen() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .release(Ok(true));
    let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Confirm));

    let done = h.arbiter.logout(&logout(Some("abuse"))).await.unwrap();

    assert_eq!(done, outcome(true, 5, true, None));
    assert_eq!(
        h.store().calls(),
        [StoreCall::ReadOwner(key()), StoreCall::Release(key(), 5)]
    );
    assert_eq!(h.kicker.calls(), [admin_kick(5, Some("abuse"))]);
    assert_eq!(h.observer.kicks(), [(None, true)]);
    assert_eq!(h.observer.logouts(), [(key(), done)]);
    assert!(
        h.observer.releases().is_empty(),
        "a logout is not a release"
    );
    // No claim of the key is in flight or waiting: the logout never entered the line.
    assert_eq!(h.arbiter.claiming_keys(), 0);
}

#[tokio::test]
async fn without_a_reason_the_kick_carries_no_message() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(1)))
        .release(Ok(true));
    let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Confirm));

    h.arbiter.logout(&logout(None)).await.unwrap();

    assert_eq!(h.kicker.calls(), [admin_kick(1, None)]);
}

#[tokio::test]
async fn no_session_means_no_write_and_no_kick() {
    for (record, generation) in [(OwnerState::absent(), 0), (tombstone(4), 4)] {
        let store = ScriptedStore::new().read(Ok(record.clone()));
        let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Confirm));

        let done = h.arbiter.logout(&logout(Some("r"))).await.unwrap();

        assert_eq!(done, outcome(false, generation, false, None), "{record:?}");
        assert_eq!(h.store().calls(), [StoreCall::ReadOwner(key())]);
        assert!(h.kicker.calls().is_empty());
        assert!(h.observer.kicks().is_empty());
        assert_eq!(h.observer.logouts(), [(key(), done)]);
    }
}

/// The fence: the tombstone is conditioned on the gen read, and a failed condition (a login
/// wrote since) kicks nobody.
#[tokio::test]
async fn a_tombstone_whose_gen_moved_on_kicks_nobody() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(5)))
        .release(Ok(false));
    let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Confirm));

    let done = h.arbiter.logout(&logout(None)).await.unwrap();

    assert_eq!(done, outcome(false, 5, false, None));
    assert_eq!(
        h.store().calls(),
        [StoreCall::ReadOwner(key()), StoreCall::Release(key(), 5)]
    );
    assert!(
        h.kicker.calls().is_empty(),
        "the newer session is not kicked"
    );
}

#[tokio::test]
async fn a_session_nobody_can_reach_is_released_as_no_endpoint() {
    let endpointless = online(3, Owner::new("eu", "c1", ""), "c");
    for record in [corrupt(3), endpointless] {
        let store = ScriptedStore::new()
            .read(Ok(record.clone()))
            .release(Ok(true));
        let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Confirm));

        let done = h.arbiter.logout(&logout(None)).await.unwrap();

        assert_eq!(
            done,
            outcome(true, 3, false, Some(KickDetail::NoEndpoint)),
            "{record:?}"
        );
        assert!(h.kicker.calls().is_empty());
        assert_eq!(h.observer.kicks(), [(Some(KickDetail::NoEndpoint), false)]);
    }
}

#[tokio::test]
async fn a_failed_kick_is_reported_and_does_not_fail_the_logout() {
    for detail in [
        KickDetail::ConnectError,
        KickDetail::Non2xx,
        KickDetail::Timeout,
    ] {
        let store = ScriptedStore::new()
            .read(Ok(old_session(2)))
            .release(Ok(true));
        let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Fail(detail)));

        let done = h.arbiter.logout(&logout(None)).await.unwrap();

        assert_eq!(done, outcome(true, 2, false, Some(detail)));
        assert_eq!(h.observer.kicks(), [(Some(detail), false)]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_kick_that_hangs_is_cut_at_the_kick_timeout() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(2)))
        .release(Ok(true));
    let h = Harness::with(store, ScriptedKicker::always(KickBehaviour::Hang), |b| {
        b.kick_timeout(Duration::from_millis(300))
    });
    let started = tokio::time::Instant::now();

    let done = h.arbiter.logout(&logout(None)).await.unwrap();

    assert_eq!(done, outcome(true, 2, false, Some(KickDetail::Timeout)));
    assert_eq!(started.elapsed(), Duration::from_millis(300));
}

#[tokio::test]
async fn without_a_kicker_every_kick_counts_as_confirmed() {
    let store = ScriptedStore::new()
        .read(Ok(old_session(9)))
        .release(Ok(true));
    let (arbiter, observer) = without_kicker(store);

    let done = arbiter.logout(&logout(None)).await.unwrap();

    assert_eq!(done, outcome(true, 9, true, None));
    assert_eq!(observer.kicks(), [(None, true)]);
}

#[tokio::test]
async fn bad_input_touches_nothing() {
    let long = "x".repeat(MAX_LOGOUT_REASON_CHARS + 1);
    let cases = [
        (
            LogoutInput {
                key: Key::new("game", "prod", 0),
                reason: None,
            },
            "uid must be >= 1",
        ),
        (
            LogoutInput {
                key: Key::new("ga#me", "prod", 1),
                reason: None,
            },
            "project must not contain '#'",
        ),
        (logout(Some(&long)), "reason must be at most 256 characters"),
        (logout(Some("")), "reason must not be empty"),
        (
            logout(Some("two\nlines")),
            "reason must not contain control characters",
        ),
    ];
    for (input, rule) in cases {
        let h = Harness::new(
            ScriptedStore::new(),
            ScriptedKicker::always(KickBehaviour::Confirm),
        );

        let e = h.arbiter.logout(&input).await.unwrap_err();

        assert!(e.is_invalid_params(), "{input:?}: {e}");
        assert!(e.to_string().contains(rule), "{input:?}: {e}");
        assert!(
            !e.to_string().contains("two\nlines"),
            "the text is not echoed"
        );
        assert!(h.store().calls().is_empty());
        assert!(h.observer.logouts().is_empty());
    }
    let at_limit = "x".repeat(MAX_LOGOUT_REASON_CHARS);
    let store = ScriptedStore::new().read(Ok(OwnerState::absent()));
    let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Confirm));
    assert!(h.arbiter.logout(&logout(Some(&at_limit))).await.is_ok());
}

#[tokio::test]
async fn a_store_fault_kicks_nobody() {
    let faults: [(ScriptedStore, &str); 3] = [
        (
            ScriptedStore::new().read(Err(Error::Throttled)),
            "throttled",
        ),
        (
            ScriptedStore::new().read(Err(Error::unavailable("down"))),
            "unavailable",
        ),
        (
            ScriptedStore::new()
                .read(Ok(old_session(5)))
                .release(Err(Error::unavailable("write failed"))),
            "unavailable",
        ),
    ];
    for (store, code) in faults {
        let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Confirm));

        let e = h.arbiter.logout(&logout(None)).await.unwrap_err();

        assert_eq!(e.code(), code);
        assert!(h.kicker.calls().is_empty());
        assert!(h.observer.logouts().is_empty());
    }
    // A store answering InvalidParams after validation is a store fault (fail-closed).
    let store = ScriptedStore::new().read(Err(Error::invalid("odd")));
    let h = Harness::new(store, ScriptedKicker::always(KickBehaviour::Confirm));
    assert!(
        h.arbiter
            .logout(&logout(None))
            .await
            .unwrap_err()
            .is_unavailable()
    );
}

/// The race the fence exists for, on a real store: the logout read gen 1, a login wrote gen 2
/// before the tombstone, and the newer session stays online, unkicked.
#[tokio::test]
async fn a_login_between_read_and_tombstone_is_never_logged_out() {
    let memory = Arc::new(MemoryStore::new());
    let first = Arbiter::new(Arc::clone(&memory));
    first
        .claim(&ClaimInput {
            key: key(),
            owner: old_owner(),
            claim_id: "first".into(),
        })
        .await
        .unwrap();
    let newer = Owner::new("eu", "c9", "http://newer.node:9000/kick");
    let store = LoginBeforeRelease::new(
        Arc::clone(&memory),
        ClaimInput {
            key: key(),
            owner: newer.clone(),
            claim_id: "newer".into(),
        },
    );
    let kicker = ScriptedKicker::always(KickBehaviour::Confirm);
    let observer = RecordingObserver::default();
    let arbiter = Arbiter::builder(store)
        .kicker(kicker.clone())
        .observer(observer.clone())
        .build();

    let done = arbiter.logout(&logout(Some("abuse"))).await.unwrap();

    assert_eq!(done, outcome(false, 1, false, None));
    assert!(kicker.calls().is_empty(), "the newer session is not kicked");
    let view = memory.current(&key()).await.unwrap();
    assert_eq!(
        (view.generation, view.owner),
        (2, Some(newer)),
        "the newer session is still online"
    );
}
