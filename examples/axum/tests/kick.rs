//! A node's kick receiver inside an application's own axum app: a newer login's signed kick
//! arrives through the app's router and ends the node's session; an unsigned one is refused.

mod common;

use tokio::net::TcpListener;
use unique_axum_examples::{APP_GREETING, KICK_PATH, node_router};
use unique_sessions::node::{KickService, Node, NodeEvent};
use unique_sessions::server::{HttpKicker, SigningKeys};
use unique_sessions::store::MemoryStore;
use unique_sessions::{Arbiter, ClaimInput, Key, Owner};

fn keys() -> SigningKeys {
    SigningKeys::new(["axum-example-key-not-a-secret-0123456789"]).unwrap()
}

#[tokio::test]
async fn a_signed_kick_through_the_app_ends_the_session() {
    // The arbitration, in process, signing its kicks (the node's transport too).
    let kicker = HttpKicker::builder().signing_keys(keys()).build().unwrap();
    let arbiter = Arbiter::builder(MemoryStore::new()).kicker(kicker).build();
    // The application: its own route, and the node's kick receiver next to it.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}{KICK_PATH}", listener.local_addr().unwrap());
    let (node, mut events) =
        Node::builder(arbiter.clone(), Owner::new("eu", "c1", endpoint)).build();
    let kicks = KickService::new(node.kick_handler().clone()).signing_keys(keys());
    let addr = common::serve(listener, node_router(kicks));
    let key = Key::new("game", "prod", 42);
    node.login(key.clone()).await.unwrap();
    assert!(matches!(
        events.recv().await,
        Some(NodeEvent::LoggedIn { .. })
    ));

    // Anyone can reach the endpoint, but an unsigned kick ends nothing.
    let forged = r#"{"project":"game","env":"prod","uid":42,"gen":99}"#;
    let (status, _) = common::request(addr, "POST", KICK_PATH, &[], forged).await;
    assert_eq!(status, 401);
    assert_eq!(node.generation(&key), Some(1));

    // A login elsewhere: the arbiter's signed kick goes through the app's router first.
    let outcome = arbiter
        .claim(&ClaimInput {
            key: key.clone(),
            owner: Owner::new("eu", "c2", "http://127.0.0.1:9/kick"),
            claim_id: "tablet-login".into(),
        })
        .await
        .unwrap();

    assert!(outcome.kicked, "the kick was confirmed: {outcome:?}");
    assert_eq!(
        events.try_recv().ok(),
        Some(NodeEvent::Kicked {
            key: key.clone(),
            generation: 1,
            reason: unique_sessions::KickReason::LoginElsewhere,
            message: None,
        })
    );
    assert_eq!(node.generation(&key), None);
    assert_eq!(node.transport().current(&key).await.unwrap().generation, 2);
    // The application's own route is untouched by all this.
    let (status, body) = common::request(addr, "GET", "/", &[], "").await;
    assert_eq!((status, body.as_str()), (200, APP_GREETING));
}
