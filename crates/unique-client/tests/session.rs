//! The session handle `Node::login` returns: every way a session ends reaches its handle,
//! once, with why; a re-login on the same node ends the old handle before it returns. Two
//! nodes against a real in-process Arbiter (memory store), kicks delivered in process, on a
//! paused clock.

mod common;

use std::time::Duration;

use common::kicks::{arbiter, node};
use unique_client::{Ending, HeartbeatOptions, NodeEvent};
use unique_core::{EvictReason, Key, KickReason, LogoutInput};

fn key() -> Key {
    Key::new("game", "prod", 42)
}

fn every_second() -> HeartbeatOptions {
    HeartbeatOptions::default().interval(Duration::from_secs(1))
}

#[tokio::test(start_paused = true)]
async fn a_login_elsewhere_ends_the_old_handle_with_the_kick_and_leaves_the_new_one() {
    let (arbiter, kicks) = arbiter();
    let (phone, _) = node(&arbiter, "phone").build();
    let (tablet, _) = node(&arbiter, "tablet").build();
    kicks.serve(&phone);
    kicks.serve(&tablet);
    let on_phone = phone.login(key()).await.unwrap();
    assert_eq!((on_phone.key(), on_phone.generation()), (&key(), 1));
    assert_eq!(on_phone.ending(), None);

    let on_tablet = tablet.login(key()).await.unwrap();

    // Ended inside the tablet's claim, before it returned: no waiting.
    let kicked = Ending::Kicked {
        reason: KickReason::LoginElsewhere,
        message: None,
    };
    assert_eq!(on_phone.ending(), Some(kicked.clone()));
    assert_eq!(on_phone.ended().await, kicked);
    assert_eq!(
        on_phone.clone().ended().await,
        kicked,
        "every clone, every call"
    );
    assert_eq!(on_tablet.ending(), None, "the newer session is online");
    assert_eq!(on_tablet.generation(), 2);
    assert!(on_tablet.login().outcome.kicked);

    // An operator logs the user out: the tablet's handle ends with the admin's message.
    let reason = Some("chargeback under review".to_owned());
    arbiter
        .logout(&LogoutInput {
            key: key(),
            reason: reason.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        on_tablet.ended().await,
        Ending::Kicked {
            reason: KickReason::Admin,
            message: reason,
        }
    );
    // The phone's handle keeps its one ending.
    assert_eq!(on_phone.ending(), Some(kicked));
}

#[tokio::test(start_paused = true)]
async fn a_relogin_on_the_same_node_ends_the_old_handle_before_it_returns() {
    let (arbiter, kicks) = arbiter();
    let (a, mut events) = node(&arbiter, "a").build();
    kicks.serve(&a);
    let first = a.login(key()).await.unwrap();

    let second = a.login(key()).await.unwrap();

    // The server skipped the kick (the same endpoint), and the node ended the old session
    // itself before the new login returned.
    assert!(!second.login().outcome.kicked);
    assert_eq!(first.ending(), Some(Ending::Replaced { by: 2 }));
    assert_eq!(second.ending(), None);
    assert_eq!(a.generation(&key()), Some(2));
    let reported: Vec<_> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    assert!(
        matches!(&reported[..], [
        NodeEvent::LoggedIn { login, .. },
        NodeEvent::Replaced { generation: 1, by: 2, .. },
        NodeEvent::LoggedIn { login: newer, .. },
    ] if login.generation() == 1 && newer.generation() == 2),
        "{reported:?}"
    );

    // Both handles live: the old one's logout touches nothing, the new one stays online.
    assert!(!first.logout().await.unwrap());
    assert_eq!(second.ending(), None);
    assert_eq!(arbiter.current(&key()).await.unwrap().generation, 2);
    assert!(second.logout().await.unwrap());
    assert_eq!(second.ended().await, Ending::LoggedOut);
    assert_eq!(first.ended().await, Ending::Replaced { by: 2 });
}

#[tokio::test(start_paused = true)]
async fn an_eviction_a_logout_and_a_shutdown_each_end_their_handle_once() {
    let (arbiter, kicks) = arbiter();
    let (a, _) = node(&arbiter, "a")
        .heartbeat_options(every_second())
        .build();
    kicks.serve(&a);
    let (k1, k2, k3) = (key(), key().with_slot("tablet"), key().with_slot("tv"));
    let evicted = a.login(k1.clone()).await.unwrap();
    let logged_out = a.login(k2).await.unwrap();
    let shut_down = a.login(k3).await.unwrap();

    // Released behind the node's back: its heartbeat evicts the session.
    arbiter.release(&k1, 1).await.unwrap();
    assert_eq!(
        evicted.ended().await,
        Ending::Evicted {
            reason: EvictReason::OwnerEmpty
        }
    );
    assert!(logged_out.logout().await.unwrap());
    assert_eq!(logged_out.ended().await, Ending::LoggedOut);
    assert!(!logged_out.logout().await.unwrap(), "ended already");
    let done = a.shutdown().await;
    assert_eq!((done.released, done.unreleased), (1, 0));
    assert_eq!(shut_down.ended().await, Ending::ShutDown);
    assert!(shut_down.notice(&Ending::ShutDown).reconnect);

    // What ended stays ended as it did.
    assert_eq!(
        evicted.ending(),
        Some(Ending::Evicted {
            reason: EvictReason::OwnerEmpty
        })
    );
    assert_eq!(logged_out.ending(), Some(Ending::LoggedOut));
}

#[tokio::test(start_paused = true)]
async fn a_replayed_login_is_another_handle_of_the_same_session() {
    let (arbiter, kicks) = arbiter();
    let (a, _) = node(&arbiter, "a").build();
    let (b, _) = node(&arbiter, "b").build();
    kicks.serve(&a);
    kicks.serve(&b);
    let first = a.login(key()).await.unwrap();

    let again = a
        .login_with_claim_id(key(), first.login().claim_id.clone())
        .await
        .unwrap();

    assert!(again.login().outcome.replayed);
    assert_eq!(again.generation(), 1);
    assert_eq!(first.ending(), None, "a replay replaces nothing");
    b.login(key()).await.unwrap();
    let kicked = Ending::Kicked {
        reason: KickReason::LoginElsewhere,
        message: None,
    };
    assert_eq!(first.ended().await, kicked);
    assert_eq!(again.ended().await, kicked);
}
