//! A node under a flood of genuine signed kicks for keys it never logged in: what a caller
//! with a token gets by claiming many uids that name this node's endpoint, so that the server
//! kicks it on their behalf. The kicks cost the node no memory (an early kick is remembered
//! only for a key with a login pending here), and its own logins and kicks go on meanwhile.
//!
//! Real processes' parts over loopback HTTP: an arbitration server, a `Node` with its signed
//! `KickReceiver`, and a real `HttpKicker` sending the flood. The login latencies are printed,
//! not asserted: speed is measured in benchmarks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use unique_arbiter_http::{ArbiterService, serve};
use unique_client::{Node, NodeEvents};
use unique_client_http::HttpTransport;
use unique_core::{Arbiter, Key, KickOutcome, KickPayload, Kicker, Owner};
use unique_kick_http::HttpKicker;
use unique_kick_signature::SigningKeys;
use unique_kickrecv::KickReceiver;
use unique_store_memory::MemoryStore;

const SIGNING_KEY: &str = "flood-0123456789abcdef0123456789abcdef";
const FLOOD: i64 = 100_000;
/// Kick connections the flood keeps busy at once.
const SENDERS: i64 = 16;

fn keys() -> SigningKeys {
    SigningKeys::new([SIGNING_KEY]).unwrap()
}

/// The arbitration server on a loopback port, kicking with the signing key; its base URL.
async fn server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let arbiter = Arbiter::builder(MemoryStore::new())
        .kicker(HttpKicker::builder().signing_keys(keys()).build().unwrap())
        .build();
    tokio::spawn(serve(
        listener,
        ArbiterService::new(arbiter),
        std::future::pending(),
    ));
    format!("http://{addr}")
}

/// A node whose receiver verifies the signing key; its kick endpoint.
async fn node(server: &str) -> (Node<HttpTransport>, NodeEvents, KickReceiver, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/kick", listener.local_addr().unwrap());
    let (node, events) = Node::builder(
        HttpTransport::new(server).unwrap(),
        Owner::new("eu", "victim", endpoint.clone()),
    )
    .build();
    let receiver = KickReceiver::builder(node.kick_handler().clone())
        .signing_keys(keys())
        .spawn(listener)
        .unwrap();
    (node, events, receiver, endpoint)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_signed_kicks_for_unrelated_keys_costs_no_memory_and_logins_go_on() {
    let url = server().await;
    let (node, _events, receiver, endpoint) = node(&url).await;
    let kicker = Arc::new(HttpKicker::builder().signing_keys(keys()).build().unwrap());
    let flooding = Arc::new(AtomicBool::new(true));

    let senders: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let (kicker, endpoint) = (Arc::clone(&kicker), endpoint.clone());
            tokio::spawn(async move {
                let mut confirmed = 0_i64;
                for uid in (sender..FLOOD).step_by(usize::try_from(SENDERS).unwrap()) {
                    let kick = KickPayload {
                        project: "flood".into(),
                        env: "prod".into(),
                        uid: 1_000_000 + uid,
                        slot: String::new(),
                        generation: i64::MAX,
                        reason: unique_core::KickReason::LoginElsewhere,
                        message: None,
                    };
                    let outcome = kicker.kick(&endpoint, &kick, Duration::from_secs(10)).await;
                    if outcome == KickOutcome::Confirmed {
                        confirmed += 1;
                    }
                }
                confirmed
            })
        })
        .collect();
    let flood = {
        let flooding = Arc::clone(&flooding);
        tokio::spawn(async move {
            let mut confirmed = 0;
            for sender in senders {
                confirmed += sender.await.unwrap();
            }
            flooding.store(false, Ordering::SeqCst);
            confirmed
        })
    };

    // The node's own users log in and out while the flood runs.
    let mut latencies = Vec::new();
    let mut uid = 0;
    while flooding.load(Ordering::SeqCst) {
        uid += 1;
        let key = Key::new("game", "prod", uid);
        let started = Instant::now();
        node.login(key.clone()).await.unwrap();
        latencies.push(started.elapsed());
        assert_eq!(node.kick_handler().remembered_early_kicks(), 0);
        assert!(node.logout(&key).await.unwrap());
    }
    let confirmed = flood.await.unwrap();

    assert_eq!(confirmed, FLOOD, "every signed kick is answered 200");
    assert!(
        latencies.len() > 1,
        "the node's logins went on during the flood ({} completed)",
        latencies.len()
    );
    assert_eq!(node.kick_handler().remembered_early_kicks(), 0);
    assert_eq!(node.kick_handler().dropped_early_kicks(), 0);
    latencies.sort();
    eprintln!(
        "{FLOOD} signed kicks; {} logins during the flood: median {:?}, max {:?}",
        latencies.len(),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    );
    receiver.close().await;
}
