//! The arbitration service under `/unique` in an axum app, with tower-http layers and bearer
//! tokens, answering real requests over loopback.

mod common;

use std::time::Duration;

use tokio::net::TcpListener;
use unique_axum_examples::{APP_GREETING, arbiter_router};
use unique_sessions::node::{HttpTransport, Transport};
use unique_sessions::server::{ArbiterService, Grant, Tokens};
use unique_sessions::store::MemoryStore;
use unique_sessions::{Arbiter, ClaimInput, Key, Owner};

const TOKEN: &str = "game-backend-token-0123456789abcdef";
const CURRENT: &str = r#"{"project":"game","env":"prod","uid":42}"#;

async fn app() -> std::net::SocketAddr {
    let mut tokens = Tokens::new();
    tokens
        .add(TOKEN, Grant::new("game-backend", vec!["game".into()], None))
        .unwrap();
    let service = ArbiterService::new(Arbiter::new(MemoryStore::new())).with_tokens(tokens);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    common::serve(listener, arbiter_router(service, Duration::from_secs(10)))
}

#[tokio::test]
async fn an_authorised_client_claims_through_the_prefix() {
    let addr = app().await;
    let transport = HttpTransport::builder(format!("http://{addr}/unique"))
        .bearer_token(TOKEN)
        .build()
        .unwrap();
    let key = Key::new("game", "prod", 42);

    let outcome = transport
        .claim(&ClaimInput {
            key: key.clone(),
            owner: Owner::new("eu", "c1", "http://127.0.0.1:9/kick"),
            claim_id: "login-1".into(),
        })
        .await
        .unwrap();

    assert_eq!(outcome.generation, 1);
    assert_eq!(transport.current(&key).await.unwrap().generation, 1);
}

#[tokio::test]
async fn a_call_without_a_token_gets_401() {
    let addr = app().await;

    let (status, body) = common::request(addr, "POST", "/unique/v1/current", &[], CURRENT).await;

    assert_eq!(status, 401, "{body}");
    assert!(body.contains("unauthenticated"), "{body}");
    // The same call with the token goes through, so the 401 was the token's doing.
    let bearer = format!("Bearer {TOKEN}");
    let headers = [("authorization", bearer.as_str())];
    let (status, _) = common::request(addr, "POST", "/unique/v1/current", &headers, CURRENT).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn paths_outside_the_prefix_belong_to_the_application() {
    let addr = app().await;

    let (status, body) = common::request(addr, "GET", "/", &[], "").await;
    assert_eq!((status, body.as_str()), (200, APP_GREETING));

    // The arbiter's own path without the prefix is not the arbiter: axum's empty 404.
    let (status, body) = common::request(addr, "POST", "/v1/current", &[], CURRENT).await;
    assert_eq!((status, body.as_str()), (404, ""));
}
