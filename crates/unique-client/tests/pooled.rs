//! A pooled login evicted while its claim is in flight, against an in-process Arbiter
//! (memory store) that kicks in process: the kick for its place comes before the answer, finds
//! no session, and the login never goes online (as for a plain login's early kick).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::kicks;
use unique_client::{
    ClaimInput, ClaimOutcome, CurrentView, Error, Key, KickReason, Node, NodeEvent, NodeLoginError,
    PoolPolicy, PoolRequest, PooledOutcome, Transport, UserKey, async_trait,
};
use unique_core::{Arbiter, Owner};
use unique_store_memory::MemoryStore;

fn user() -> UserKey {
    UserKey::new("game", "prod", 42)
}

/// The Arbiter, except that the first pooled claim's answer is held back until another
/// node's pooled login has evicted the place it took (that login's kick comes first).
#[derive(Clone)]
struct EvictedInFlight {
    arbiter: Arbiter<MemoryStore>,
    once: Arc<AtomicBool>,
}

#[async_trait]
impl Transport for EvictedInFlight {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        self.arbiter.claim(request).await
    }
    async fn claim_pooled(
        &self,
        request: &ClaimInput,
        pool: &PoolRequest,
    ) -> Result<PooledOutcome, Error> {
        let answer = self.arbiter.claim_pooled(request, pool).await;
        if self.once.swap(false, Ordering::SeqCst) {
            let other = ClaimInput {
                key: user().key(""),
                owner: Owner::new("eu", "b", "http://b.internal/kick"),
                claim_id: "the-newer-login".to_owned(),
            };
            let newer = self.arbiter.claim_pooled(&other, pool).await.unwrap();
            assert!(newer.evicted && newer.claim.kicked, "{newer:?}");
        }
        answer
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.arbiter.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.arbiter.release(key, generation).await
    }
}

#[tokio::test]
async fn a_pooled_login_evicted_before_its_answer_never_goes_online() {
    let (arbiter, kicks) = kicks::arbiter();
    let transport = EvictedInFlight {
        arbiter,
        once: Arc::new(AtomicBool::new(true)),
    };
    let owner = Owner::new("eu", "a", "http://a.internal/kick");
    let (a, mut events) = Node::builder(transport, owner).build();
    kicks.serve(&a);
    let one = PoolRequest {
        policy: PoolPolicy::EvictOldest,
        limit: Some(1),
    };

    let err = a.login_pooled(&user(), one).await.unwrap_err();

    let NodeLoginError::Replaced(login) = &err else {
        panic!("expected Replaced, got {err:?}");
    };
    assert!(err.was_replaced(), "{err}");
    assert_eq!(login.generation(), 1);
    assert_eq!(a.sessions(), 0);
    assert_eq!(a.generation(&user().key("#0")), None);
    assert!(matches!(
        events.recv().await,
        Some(NodeEvent::LoggedIn { key, .. }) if key == user().key("#0")
    ));
    assert_eq!(
        events.recv().await,
        Some(NodeEvent::Kicked {
            key: user().key("#0"),
            generation: 1,
            reason: KickReason::LoginElsewhere,
            message: Some("session limit 1 reached".to_owned()),
        })
    );
    assert_eq!(a.kick_handler().remembered_early_kicks(), 0, "forgotten");
}
