//! C12 wrappers forward: a store that wraps another answers every method with the same
//! method of the store it wraps, called once, and passes that answer through.
//!
//! These cases run on a wrapper, not on a backend: [`wrapper_contract_tests!`] builds the
//! wrapper around a witness, a store that records which of its methods were called and what
//! each answered, itself around the backend's store. Each case calls one method on the
//! wrapper and checks that the witness saw exactly that method, once, and that the wrapper
//! answered what the witness answered. A wrapper that leaves a method to the trait's default
//! fails the case named for the method: the default `check_ready` reads with `read_owner`,
//! the default `claim_vacant` and `vacant_claims` call nothing, the default `read_owners`
//! calls `read_owner` per key, the default `list_sessions` and `count_online` call nothing.
//!
//! [`wrapper_contract_tests!`]: crate::wrapper_contract_tests

use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};

use unique_core::{
    CasOutcome, CurrentView, Error, Key, Owner, OwnerState, Store, UserKey, UserSession,
    VacantClaim, VacantClaims, async_trait,
};

use crate::Subject;
use crate::support::{Ctx, owner_for};

/// One call the witness answered: the method, then its answer once it had one.
type Call = (&'static str, Option<String>);

/// The store under the wrapper: calls the store it stands on and records every call.
struct Witness {
    inner: Arc<dyn Store>,
    calls: Mutex<Vec<Call>>,
}

impl Witness {
    fn calls(&self) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records `method`, runs it on the store below and records its answer.
    async fn record<T: Debug>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let index = {
            let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
            calls.push((method, None));
            calls.len() - 1
        };
        let answer = call.await;
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)[index].1 =
            Some(format!("{answer:?}"));
        answer
    }
}

/// Spells every method itself (not a `StoreLayer`): the witness must see each call as the
/// wrapper makes it.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Store for Witness {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        self.record("read_owner", self.inner.read_owner(key)).await
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        let call = self.inner.claim_cas(key, owner, claim_id, snap);
        self.record("claim_cas", call).await
    }
    fn vacant_claims(&self) -> VacantClaims {
        let answer = self.inner.vacant_claims();
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(("vacant_claims", Some(format!("{answer:?}"))));
        answer
    }
    async fn claim_vacant(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
    ) -> Result<VacantClaim, Error> {
        let call = self.inner.claim_vacant(key, owner, claim_id);
        self.record("claim_vacant", call).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.record("current", self.inner.current(key)).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.record("release", self.inner.release(key, generation))
            .await
    }
    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        self.record("read_owners", self.inner.read_owners(keys))
            .await
    }
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        self.record("list_sessions", self.inner.list_sessions(user))
            .await
    }
    async fn check_ready(&self) -> Result<(), Error> {
        self.record("check_ready", self.inner.check_ready()).await
    }
    async fn count_online(&self) -> Result<Option<u64>, Error> {
        self.record("count_online", self.inner.count_online()).await
    }
}

/// What a forwarding case receives: the wrapper under test, built around a witness of the
/// backend's store, and the backend's store itself to set a case up without the wrapper.
#[derive(Clone)]
pub struct Wrapped {
    ctx: Ctx,
    witness: Arc<Witness>,
    wrapper: Arc<dyn Store>,
}

impl Wrapped {
    /// Builds the wrapper under test with `wrap` around a witness of `subject`'s store.
    /// `case` names the case (its keys are its own).
    pub fn new(
        subject: Subject,
        wrap: &dyn Fn(Arc<dyn Store>) -> Arc<dyn Store>,
        case: &str,
    ) -> Self {
        let witness = Arc::new(Witness {
            inner: Arc::clone(&subject.store),
            calls: Mutex::default(),
        });
        let wrapper = wrap(Arc::clone(&witness) as Arc<dyn Store>);
        Self {
            ctx: Ctx::new(subject, case),
            witness,
            wrapper,
        }
    }

    /// A key of the case with a session at gen 1, claimed on the store below the wrapper.
    async fn claimed(&self, uid: i64) -> Key {
        let key = self.ctx.key(uid);
        self.ctx.win(&key, "c1", &OwnerState::default(), 1).await;
        key
    }

    /// The check of every case: calling `method` on the wrapper, which answered `answer`,
    /// called `method` of the wrapped store once and nothing else, and answered as it did.
    fn forwarded<T: Debug>(&self, method: &'static str, answer: &T) {
        let calls = self.witness.calls();
        let names: Vec<&str> = calls.iter().map(|(name, _)| *name).collect();
        ensure_eq!(
            names,
            [method],
            "C12",
            "a wrapper answers each method with the same method of the store it wraps, called once",
            "the store below saw these calls of {method} on the wrapper"
        );
        ensure_eq!(
            calls[0].1.as_deref(),
            Some(format!("{answer:?}").as_str()),
            "C12",
            "a wrapper passes the wrapped store's answer through unchanged",
            "{method}"
        );
    }
}

/// C12: `read_owner` reaches the wrapped store's `read_owner`.
pub async fn read_owner(subject: Wrapped) {
    let key = subject.claimed(1).await;
    let answer = subject.wrapper.read_owner(&key).await;
    subject.forwarded("read_owner", &answer);
}

/// C12: `claim_cas` reaches the wrapped store's `claim_cas`.
pub async fn claim_cas(subject: Wrapped) {
    let key = subject.ctx.key(1);
    let answer = subject
        .wrapper
        .claim_cas(&key, &owner_for("c1"), "c1", &OwnerState::default())
        .await;
    subject.forwarded("claim_cas", &answer);
}

/// C12: `vacant_claims` is the wrapped store's answer (the default is `Unsupported`, and a
/// wrapper that falls back to it reads first over a store that writes first).
pub async fn vacant_claims(subject: Wrapped) {
    let answer = subject.wrapper.vacant_claims();
    subject.forwarded("vacant_claims", &answer);
}

/// C12: `claim_vacant` reaches the wrapped store's `claim_vacant` (the default answers
/// `Unread` and sends nothing).
pub async fn claim_vacant(subject: Wrapped) {
    let key = subject.ctx.key(1);
    let answer = subject
        .wrapper
        .claim_vacant(&key, &owner_for("c1"), "c1")
        .await;
    subject.forwarded("claim_vacant", &answer);
}

/// C12: `current` reaches the wrapped store's `current`.
pub async fn current(subject: Wrapped) {
    let key = subject.claimed(1).await;
    let answer = subject.wrapper.current(&key).await;
    subject.forwarded("current", &answer);
}

/// C12: `release` reaches the wrapped store's `release`.
pub async fn release(subject: Wrapped) {
    let key = subject.claimed(1).await;
    let answer = subject.wrapper.release(&key, 1).await;
    subject.forwarded("release", &answer);
}

/// C12: `read_owners` reaches the wrapped store's `read_owners` as one batch (the default
/// calls `read_owner` per key).
pub async fn read_owners(subject: Wrapped) {
    let keys = [subject.claimed(1).await, subject.ctx.key(2)];
    let answer = subject.wrapper.read_owners(&keys).await;
    subject.forwarded("read_owners", &answer);
}

/// C12: `list_sessions` reaches the wrapped store's `list_sessions` (the default answers
/// `Unavailable`).
pub async fn list_sessions(subject: Wrapped) {
    subject.claimed(1).await;
    let answer = subject.wrapper.list_sessions(&subject.ctx.user(1)).await;
    subject.forwarded("list_sessions", &answer);
}

/// C12: `check_ready` reaches the wrapped store's `check_ready` (the default reads the
/// sentinel key with `read_owner`, which passes over a healthy store whatever its own check
/// would say).
pub async fn check_ready(subject: Wrapped) {
    let answer = subject.wrapper.check_ready().await;
    subject.forwarded("check_ready", &answer);
}

/// C12: `count_online` reaches the wrapped store's `count_online` (the default answers
/// `None` without a call).
pub async fn count_online(subject: Wrapped) {
    subject.claimed(1).await;
    let answer = subject.wrapper.count_online().await;
    subject.forwarded("count_online", &answer);
}
