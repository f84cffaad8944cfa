//! Owners that name a node instead of an endpoint (`docs/design.md#push-kicks`), on the
//! memory store: exactly one of endpoint and node is accepted; a node owner's kick goes
//! through `Kicker::kick_node` on every kick path (a takeover, a pooled eviction, an admin
//! logout), never through `kick` or the endpoint policy; a kicker without a push channel
//! answers `connect-error`; a claim from the same node is `self-replace-skipped`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use unique_core::{
    Arbiter, ClaimInput, Error, Key, KickDetail, KickOutcome, KickPayload, KickReason, Kicker,
    LogoutInput, OWNER_TARGET_RULE, Owner, PoolPolicy, PoolRequest, async_trait,
};
use unique_store_memory::MemoryStore;

/// Which method a kick came through, with its target and the payload's gen and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sent {
    Endpoint(String, i64, KickReason),
    Node(String, i64, KickReason),
}

/// Records every kick and endpoint check; every kick confirms. `push: false` keeps the
/// trait's default `kick_node`.
#[derive(Clone, Default)]
struct Recorder {
    sent: Arc<Mutex<Vec<Sent>>>,
    checked: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn sent(&self) -> Vec<Sent> {
        self.sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn checked(&self) -> Vec<String> {
        self.checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl Kicker for Recorder {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, _: Duration) -> KickOutcome {
        let sent = Sent::Endpoint(endpoint.into(), payload.generation, payload.reason.clone());
        self.sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sent);
        KickOutcome::Confirmed
    }

    async fn kick_node(&self, node: &str, payload: &KickPayload, _: Duration) -> KickOutcome {
        let sent = Sent::Node(node.into(), payload.generation, payload.reason.clone());
        self.sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sent);
        KickOutcome::Confirmed
    }

    fn check_endpoint(&self, endpoint: &str) -> Result<(), String> {
        self.checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(endpoint.into());
        Ok(())
    }
}

/// Only `kick`: the trait's default `kick_node` (no push channel).
struct EndpointOnly;

#[async_trait]
impl Kicker for EndpointOnly {
    async fn kick(&self, _: &str, _: &KickPayload, _: Duration) -> KickOutcome {
        KickOutcome::Confirmed
    }
}

fn key() -> Key {
    Key::new("game", "prod", 7)
}

fn claim(owner: Owner, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key(),
        owner,
        claim_id: claim_id.into(),
    }
}

fn arbiter(kicker: impl Kicker) -> Arbiter<MemoryStore> {
    Arbiter::builder(MemoryStore::new()).kicker(kicker).build()
}

const EP: &str = "http://ep.test:9000/kick";

#[tokio::test]
async fn an_owner_names_exactly_one_of_endpoint_and_node() {
    let a = arbiter(Recorder::default());
    let both = Owner {
        node: "n1".into(),
        ..Owner::new("", "", EP)
    };
    for (owner, rule) in [
        (both, OWNER_TARGET_RULE.to_owned()),
        (Owner::new("eu", "c1", ""), OWNER_TARGET_RULE.to_owned()),
        (
            Owner::with_node("", "", "n/1"),
            "node must be 1 to 64 characters of A-Z a-z 0-9 . _ -".to_owned(),
        ),
        (
            Owner::with_node("", "", "x".repeat(65)),
            "node must be 1 to 64 characters of A-Z a-z 0-9 . _ -".to_owned(),
        ),
    ] {
        let e = a.claim(&claim(owner.clone(), "c")).await.unwrap_err();
        assert!(
            matches!(&e, Error::InvalidParams(why) if *why == rule),
            "{owner:?}: {e:?}"
        );
    }
    for node in ["n1", "A.b_c-9", &"x".repeat(64)] {
        let outcome = a
            .claim(&claim(Owner::with_node("eu", "c1", node), node))
            .await
            .unwrap();
        assert!(outcome.generation > 0, "{node}");
    }
}

#[tokio::test]
async fn a_node_owner_is_not_put_to_the_endpoint_policy() {
    let kicker = Recorder::default();
    let a = arbiter(kicker.clone());
    a.claim(&claim(Owner::with_node("", "", "n1"), "c1"))
        .await
        .unwrap();
    assert!(kicker.checked().is_empty(), "{:?}", kicker.checked());
    a.claim(&claim(Owner::new("", "", EP), "c2")).await.unwrap();
    assert_eq!(kicker.checked(), vec![EP.to_owned()]);
}

/// Clause: a takeover of a node owner's session calls `kick_node` (never `kick`) with the
/// node id and gen + 1, whatever the new owner names.
#[tokio::test]
async fn a_takeover_of_a_node_owner_kicks_its_node() {
    let kicker = Recorder::default();
    let a = arbiter(kicker.clone());
    a.claim(&claim(Owner::with_node("", "", "n1"), "c1"))
        .await
        .unwrap();
    let by_node = a
        .claim(&claim(Owner::with_node("", "", "n2"), "c2"))
        .await
        .unwrap();
    assert!(by_node.kicked);
    let by_endpoint = a.claim(&claim(Owner::new("", "", EP), "c3")).await.unwrap();
    assert!(by_endpoint.kicked);
    let back_to_node = a
        .claim(&claim(Owner::with_node("", "", "n1"), "c4"))
        .await
        .unwrap();
    assert!(back_to_node.kicked);
    assert_eq!(
        kicker.sent(),
        vec![
            Sent::Node("n1".into(), 2, KickReason::LoginElsewhere),
            Sent::Node("n2".into(), 3, KickReason::LoginElsewhere),
            Sent::Endpoint(EP.into(), 4, KickReason::LoginElsewhere),
        ]
    );
}

/// Clause: a claim from the node that holds the session is `self-replace-skipped`, nothing
/// sent; the same region and cluster with another node is a takeover.
#[tokio::test]
async fn a_claim_from_the_same_node_is_self_replace() {
    let kicker = Recorder::default();
    let a = arbiter(kicker.clone());
    a.claim(&claim(Owner::with_node("eu", "c1", "n1"), "c1"))
        .await
        .unwrap();
    let again = a
        .claim(&claim(Owner::with_node("us", "c9", "n1"), "c2"))
        .await
        .unwrap();
    assert!(!again.kicked);
    assert_eq!(again.kick_detail, Some(KickDetail::SelfReplaceSkipped));
    assert!(kicker.sent().is_empty(), "{:?}", kicker.sent());
}

#[tokio::test]
async fn without_a_push_channel_a_node_kick_is_connect_error() {
    let a = arbiter(EndpointOnly);
    a.claim(&claim(Owner::with_node("", "", "n1"), "c1"))
        .await
        .unwrap();
    let outcome = a.claim(&claim(Owner::new("", "", EP), "c2")).await.unwrap();
    assert!(!outcome.kicked);
    assert_eq!(outcome.kick_detail, Some(KickDetail::ConnectError));
}

#[tokio::test]
async fn an_admin_logout_of_a_node_owner_kicks_its_node() {
    let kicker = Recorder::default();
    let a = arbiter(kicker.clone());
    a.claim(&claim(Owner::with_node("", "", "n1"), "c1"))
        .await
        .unwrap();
    let out = a
        .logout(&LogoutInput {
            key: key(),
            reason: None,
        })
        .await
        .unwrap();
    assert!(out.released && out.kicked, "{out:?}");
    assert_eq!(
        kicker.sent(),
        vec![Sent::Node("n1".into(), 2, KickReason::Admin)]
    );
}

#[tokio::test]
async fn a_pooled_eviction_of_a_node_owner_kicks_its_node() {
    let kicker = Recorder::default();
    let a = arbiter(kicker.clone());
    let pool = PoolRequest {
        policy: PoolPolicy::EvictOldest,
        limit: Some(1),
    };
    a.claim_pooled(&claim(Owner::with_node("", "", "n1"), "p1"), &pool)
        .await
        .unwrap();
    a.claim_pooled(&claim(Owner::with_node("", "", "n2"), "p2"), &pool)
        .await
        .unwrap();
    let sent = kicker.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        matches!(&sent[0], Sent::Node(node, _, _) if node == "n1"),
        "{sent:?}"
    );
}
