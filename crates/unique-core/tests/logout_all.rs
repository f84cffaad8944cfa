//! `Arbiter::logout_all`, the admin logout of all of a user's sessions
//! (`docs/design.md#admin-logout`, "All of a user's sessions"), on the memory store: the
//! default slot, a named slot and pool places are each tombstoned at their gen and kicked
//! with gen + 1, exactly as `Arbiter::logout` of that slot; a login landing between a slot's
//! read and its tombstone is neither logged out nor kicked.

mod common;

use std::sync::Arc;

use common::{KickBehaviour, KickCall, LoginBeforeRelease, RecordingObserver, ScriptedKicker};
use unique_core::{
    Arbiter, CasOutcome, ClaimInput, CurrentView, DEFAULT_KICK_TIMEOUT, Error, Key, KickPayload,
    KickReason, LogoutOutcome, Owner, OwnerState, PoolPolicy, PoolRequest, Store, UserKey,
    UserLogoutInput, UserSession, async_trait,
};
use unique_store_memory::MemoryStore;

fn user() -> UserKey {
    UserKey::new("game", "prod", 42)
}

fn endpoint(slot: &str) -> String {
    format!("http://node-{}.test:9000/kick", slot.replace('#', "place"))
}

fn owner(slot: &str) -> Owner {
    Owner::new("eu", "c1", endpoint(slot))
}

/// Logs the user in on the default slot (twice: gen 2), on `mobile` (gen 1) and on two pool
/// places (`#0`, `#1`, gen 1 each), through an arbiter of its own.
async fn four_sessions(memory: &Arc<MemoryStore>) {
    let arbiter = Arbiter::new(Arc::clone(memory));
    for (slot, claim_id) in [("", "d1"), ("", "d2"), ("mobile", "m1")] {
        arbiter
            .claim(&ClaimInput {
                key: user().key(slot),
                owner: owner(slot),
                claim_id: claim_id.into(),
            })
            .await
            .unwrap();
    }
    for place in ["#0", "#1"] {
        let pooled = arbiter
            .claim_pooled(
                &ClaimInput {
                    key: user().key(""),
                    owner: owner(place),
                    claim_id: format!("pool{place}"),
                },
                &PoolRequest {
                    policy: PoolPolicy::DenyNew,
                    limit: Some(2),
                },
            )
            .await
            .unwrap();
        assert_eq!(pooled.slot, place);
    }
}

/// The admin kick of `slot`'s session at `generation`: gen + 1, reason `admin`, the message.
fn admin_kick(slot: &str, generation: i64) -> KickCall {
    KickCall {
        endpoint: endpoint(slot),
        payload: KickPayload {
            message: Some("chargeback".into()),
            ..KickPayload::new(&user().key(slot), generation + 1, KickReason::Admin)
        },
        timeout: DEFAULT_KICK_TIMEOUT,
    }
}

fn released(generation: i64) -> LogoutOutcome {
    LogoutOutcome {
        released: true,
        generation,
        kicked: true,
        kick_detail: None,
    }
}

fn input() -> UserLogoutInput {
    UserLogoutInput {
        user: user(),
        reason: Some("chargeback".into()),
    }
}

/// The slots and results of `logout_all`'s answer, each result unwrapped.
async fn logout_all(
    arbiter: &Arbiter<impl Store>,
    input: &UserLogoutInput,
) -> Vec<(String, LogoutOutcome)> {
    arbiter
        .logout_all(input)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.slot, s.result.unwrap()))
        .collect()
}

#[tokio::test]
async fn every_slot_and_place_is_tombstoned_at_its_gen_and_kicked_with_the_next() {
    let memory = Arc::new(MemoryStore::new());
    four_sessions(&memory).await;
    let kicker = ScriptedKicker::always(KickBehaviour::Confirm);
    let observer = RecordingObserver::default();
    let arbiter = Arbiter::builder(Arc::clone(&memory))
        .kicker(kicker.clone())
        .observer(observer.clone())
        .build();

    let done = logout_all(&arbiter, &input()).await;

    let expected = [("", 2), ("#0", 1), ("#1", 1), ("mobile", 1)];
    assert_eq!(
        done,
        expected.map(|(slot, generation)| (slot.to_owned(), released(generation)))
    );
    let mut kicks = kicker.calls();
    kicks.sort_by(|a, b| a.payload.slot.cmp(&b.payload.slot));
    assert_eq!(kicks, expected.map(|(slot, g)| admin_kick(slot, g)));
    for (slot, generation) in expected {
        let view = memory.current(&user().key(slot)).await.unwrap();
        assert_eq!(
            (view.exists, view.generation, view.owner),
            (true, generation, None),
            "slot {slot:?} is a tombstone at its gen"
        );
    }
    let mut logouts = observer.logouts();
    logouts.sort_by(|a, b| a.0.slot.cmp(&b.0.slot));
    assert_eq!(
        logouts,
        expected.map(|(slot, g)| (user().key(slot), released(g)))
    );
    assert_eq!(
        observer.kicks(),
        [(None, true); 4],
        "one confirmed kick per session"
    );

    // Nobody left: the repeat finds no session and kicks nobody.
    assert!(logout_all(&arbiter, &input()).await.is_empty());
    assert_eq!(kicker.calls().len(), 4);
}

/// The fence per slot: `mobile`'s logout read gen 1, a rival login wrote gen 2 before the
/// tombstone, and that newer session stays online, unkicked, while the other three go.
#[tokio::test]
async fn a_login_racing_in_between_is_not_logged_out_nor_kicked() {
    let memory = Arc::new(MemoryStore::new());
    four_sessions(&memory).await;
    let newer = Owner::new("us", "c9", "http://newer.test:9000/kick");
    let store = LoginBeforeRelease::new(
        Arc::clone(&memory),
        ClaimInput {
            key: user().key("mobile"),
            owner: newer.clone(),
            claim_id: "newer".into(),
        },
    );
    let kicker = ScriptedKicker::always(KickBehaviour::Confirm);
    let arbiter = Arbiter::builder(store).kicker(kicker.clone()).build();

    let done = logout_all(&arbiter, &input()).await;

    let not_released = LogoutOutcome {
        released: false,
        generation: 1,
        kicked: false,
        kick_detail: None,
    };
    assert_eq!(
        done,
        [
            (String::new(), released(2)),
            ("#0".to_owned(), released(1)),
            ("#1".to_owned(), released(1)),
            ("mobile".to_owned(), not_released),
        ]
    );
    let endpoints: Vec<String> = kicker.calls().into_iter().map(|k| k.endpoint).collect();
    assert!(
        !endpoints.contains(&newer.endpoint) && !endpoints.contains(&endpoint("mobile")),
        "neither the newer session nor the replaced one is kicked by the logout: {endpoints:?}"
    );
    assert_eq!(endpoints.len(), 3);
    let view = memory.current(&user().key("mobile")).await.unwrap();
    assert_eq!(
        (view.generation, view.owner),
        (2, Some(newer)),
        "the newer session is still online"
    );
}

#[tokio::test]
async fn a_user_without_sessions_gets_an_empty_answer_and_bad_input_touches_nothing() {
    let memory = Arc::new(MemoryStore::new());
    four_sessions(&memory).await;
    let kicker = ScriptedKicker::always(KickBehaviour::Confirm);
    let arbiter = Arbiter::builder(Arc::clone(&memory))
        .kicker(kicker.clone())
        .build();

    let nobody = UserLogoutInput {
        user: UserKey::new("game", "prod", 43),
        reason: None,
    };
    assert!(logout_all(&arbiter, &nobody).await.is_empty());

    for (bad, rule) in [
        (
            UserLogoutInput {
                user: UserKey::new("game", "prod", 0),
                reason: None,
            },
            "uid must be >= 1",
        ),
        (
            UserLogoutInput {
                reason: Some("two\nlines".into()),
                ..input()
            },
            "reason must not contain control characters",
        ),
    ] {
        let e = arbiter.logout_all(&bad).await.unwrap_err();
        assert!(e.is_invalid_params() && e.to_string().contains(rule), "{e}");
    }
    assert!(kicker.calls().is_empty());
    assert_eq!(arbiter.sessions(&user()).await.unwrap().len(), 4);
}

/// A memory store whose tombstone of one slot fails.
struct FailingRelease {
    inner: Arc<MemoryStore>,
    slot: &'static str,
}

#[async_trait]
impl Store for FailingRelease {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.inner.read_owner(key).await
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        self.inner.claim_cas(key, owner, claim_id, snap).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.inner.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        if key.slot == self.slot {
            return Err(Error::unavailable("write failed"));
        }
        self.inner.release(key, generation).await
    }
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        self.inner.list_sessions(user).await
    }
}

/// One slot's store failure is that slot's error; the other slots are logged out all the same,
/// and the failed one is neither kicked nor reported to the observer.
#[tokio::test]
async fn a_slots_store_failure_is_its_own_and_the_others_are_logged_out() {
    let memory = Arc::new(MemoryStore::new());
    four_sessions(&memory).await;
    let kicker = ScriptedKicker::always(KickBehaviour::Confirm);
    let observer = RecordingObserver::default();
    let store = FailingRelease {
        inner: Arc::clone(&memory),
        slot: "#0",
    };
    let arbiter = Arbiter::builder(store)
        .kicker(kicker.clone())
        .observer(observer.clone())
        .build();

    let done = arbiter.logout_all(&input()).await.unwrap();

    let slots: Vec<&str> = done.iter().map(|s| s.slot.as_str()).collect();
    assert_eq!(slots, ["", "#0", "#1", "mobile"]);
    assert!(done[1].result.as_ref().unwrap_err().is_unavailable());
    for (i, generation) in [(0, 2), (2, 1), (3, 1)] {
        assert_eq!(done[i].result.as_ref().unwrap(), &released(generation));
    }
    let mut slots_kicked: Vec<String> =
        kicker.calls().into_iter().map(|k| k.payload.slot).collect();
    slots_kicked.sort();
    assert_eq!(slots_kicked, ["", "#1", "mobile"]);
    assert_eq!(observer.logouts().len(), 3);
    let left = memory.current(&user().key("#0")).await.unwrap();
    assert_eq!(
        left.owner.map(|o| o.endpoint),
        Some(endpoint("#0")),
        "the failed slot is still online"
    );
}
