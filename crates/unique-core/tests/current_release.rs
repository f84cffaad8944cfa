//! `Arbiter::current` (the self-eviction baseline) and `Arbiter::release` (clean logout).

mod common;

use common::{RecordingObserver, ScriptedStore, StoreCall, key, old_owner};
use unique_core::{Arbiter, CurrentView, Error};

fn arbiter(store: ScriptedStore) -> (Arbiter<ScriptedStore>, RecordingObserver) {
    let observer = RecordingObserver::default();
    let arbiter = Arbiter::builder(store).observer(observer.clone()).build();
    (arbiter, observer)
}

#[tokio::test]
async fn current_returns_the_store_view_unchanged() {
    let views = [
        CurrentView {
            generation: 9,
            owner: Some(old_owner()),
            exists: true,
        },
        CurrentView {
            generation: 4,
            owner: None,
            exists: true,
        },
        CurrentView::default(),
    ];
    for view in views {
        let (arbiter, observer) = arbiter(ScriptedStore::new().current(Ok(view.clone())));

        assert_eq!(arbiter.current(&key()).await.unwrap(), view);
        assert_eq!(arbiter.store().calls(), vec![StoreCall::Current(key())]);
        assert!(observer.claims().is_empty() && observer.releases().is_empty());
    }
}

#[tokio::test]
async fn current_corrupt_owner_reported_as_unavailable_stays_unavailable() {
    // C7: the store reports a corrupt owner on `current` as Unavailable.
    let fault = Error::unavailable("owner attribute is corrupt");
    let (arbiter, _) = arbiter(ScriptedStore::new().current(Err(fault)));

    assert!(arbiter.current(&key()).await.unwrap_err().is_unavailable());
}

#[tokio::test]
async fn current_passes_throttled_through() {
    let (arbiter, _) = arbiter(ScriptedStore::new().current(Err(Error::Throttled)));

    assert!(matches!(
        arbiter.current(&key()).await,
        Err(Error::Throttled)
    ));
}

#[tokio::test]
async fn current_reports_any_other_store_error_as_unavailable() {
    for fault in [Error::invalid("x")] {
        let (arbiter, _) = arbiter(ScriptedStore::new().current(Err(fault)));

        assert!(arbiter.current(&key()).await.unwrap_err().is_unavailable());
    }
}

#[tokio::test]
async fn release_returns_what_the_store_decided() {
    for released in [true, false] {
        let (arbiter, observer) = arbiter(ScriptedStore::new().release(Ok(released)));

        assert_eq!(arbiter.release(&key(), 7).await.unwrap(), released);
        assert_eq!(arbiter.store().calls(), vec![StoreCall::Release(key(), 7)]);
        assert_eq!(observer.releases(), vec![(key(), released)]);
    }
}

#[tokio::test]
async fn release_with_gen_zero_or_negative_is_false_without_a_store_call() {
    for generation in [0, -1, i64::MIN] {
        let (arbiter, observer) = arbiter(ScriptedStore::new());

        assert!(!arbiter.release(&key(), generation).await.unwrap());
        assert!(arbiter.store().calls().is_empty(), "gen {generation}");
        assert_eq!(
            observer.releases(),
            vec![(key(), false)],
            "gen {generation}"
        );
    }
}

#[tokio::test]
async fn release_passes_throttled_through() {
    let (arbiter, _) = arbiter(ScriptedStore::new().release(Err(Error::Throttled)));

    assert!(matches!(
        arbiter.release(&key(), 3).await,
        Err(Error::Throttled)
    ));
}

#[tokio::test]
async fn release_reports_any_other_store_error_as_unavailable() {
    for fault in [Error::unavailable("down"), Error::invalid("x")] {
        let (arbiter, _) = arbiter(ScriptedStore::new().release(Err(fault)));

        assert!(
            arbiter
                .release(&key(), 3)
                .await
                .unwrap_err()
                .is_unavailable()
        );
        assert_eq!(arbiter.store().calls(), vec![StoreCall::Release(key(), 3)]);
    }
}
