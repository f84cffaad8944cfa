//! Node: what a superseded login and an owner-changed record do to the runtime, against a
//! scripted transport on tokio's paused clock.

mod common;

use std::time::Duration;

use common::{Scripted, Step, key, outcome, owner};
use tokio::time::{sleep, timeout};
use unique_client::{ClaimerOptions, HeartbeatOptions, Jitter, Node, NodeEvent, NodeLoginError};
use unique_core::{CurrentView, Error, EvictReason, Owner};

const INTERVAL: Duration = Duration::from_secs(5);

fn node(t: &Scripted) -> (Node<Scripted>, unique_client::NodeEvents) {
    Node::builder(t.clone(), owner())
        .claimer_options(ClaimerOptions::default().jitter(Jitter::none()))
        .heartbeat_options(
            HeartbeatOptions::default()
                .interval(INTERVAL)
                .jitter(Jitter::none()),
        )
        .build()
}

/// The first attempt's answer is lost (its claim won gen 1), a newer login takes the key
/// (gen 2), and the retry is answered `Superseded`: the login returns that error, nothing goes
/// online, no heartbeat starts and no event is reported.
#[tokio::test(start_paused = true)]
async fn a_superseded_login_returns_the_error_and_never_goes_online() {
    let t = Scripted::new()
        .claim(Step::Reply(Err(Error::unavailable("connection reset"))))
        .claim(Step::Reply(Err(Error::Superseded {
            generation: 1,
            current: 2,
        })));
    let (a, mut events) = node(&t);

    let err = a.login(key()).await.unwrap_err();

    let NodeLoginError::Claim(failed) = &err else {
        panic!("expected the claim's error, got {err}");
    };
    assert!(
        matches!(
            failed.error,
            Error::Superseded {
                generation: 1,
                current: 2
            }
        ),
        "{err}"
    );
    assert!(failed.is_superseded() && err.was_replaced(), "{err}");
    assert_eq!(failed.attempts, 2);
    assert_eq!(a.generation(&key()), None);
    assert_eq!(a.sessions(), 0);
    assert!(events.try_recv().is_err(), "nothing to report");
    // No heartbeat: the script holds no `current` answer, and none is asked for.
    sleep(INTERVAL * 4).await;
    assert_eq!(t.calls().len(), 2);
    assert!(events.try_recv().is_err());
}

/// The node's heartbeat watches the session for the node's own owner: the session's gen
/// held by another owner (a gen rollback) evicts it with `owner-changed`.
#[tokio::test(start_paused = true)]
async fn another_owner_at_the_sessions_gen_evicts_it() {
    let other = Owner::new("eu", "c2", "http://127.0.0.2:9/kick");
    let t = Scripted::new()
        .claim(Step::Reply(Ok(outcome(5))))
        .current(Step::Reply(Ok(CurrentView {
            generation: 5,
            owner: Some(owner()),
            exists: true,
        })))
        .current(Step::Reply(Ok(CurrentView {
            generation: 5,
            owner: Some(other),
            exists: true,
        })));
    let (a, mut events) = node(&t);
    let login = a.login(key()).await.unwrap();
    assert!(matches!(
        events.recv().await,
        Some(NodeEvent::LoggedIn { .. })
    ));

    // Bounded, so a heartbeat that keeps the session fails here instead of looping on the
    // paused clock once the script runs out.
    let evicted = timeout(INTERVAL * 4, events.recv())
        .await
        .expect("the heartbeat evicts at its second check");
    assert_eq!(
        evicted,
        Some(NodeEvent::Evicted {
            key: key(),
            generation: login.generation(),
            reason: EvictReason::OwnerChanged,
        })
    );
    assert_eq!(a.generation(&key()), None);
    assert_eq!(t.calls().len(), 3, "one claim, two checks");
}
