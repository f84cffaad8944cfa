//! `HttpKicker` with signing keys: every POST carries a `Unique-Signature` over the exact
//! body it sent; without keys there is no such header.

use std::time::SystemTime;

use unique_core::{KickOutcome, KickPayload, Kicker};
use unique_kick_contract::{ANSWER_DEADLINE, Behaviour, Peer};
use unique_kick_http::HttpKicker;
use unique_kick_signature::{DEFAULT_WINDOW, HEADER, Rejection, SigningKeys};

const KEY: &str = "kick-http-test-key-0123456789abcdef0123";
const OTHER: &str = "kick-http-other-key-0123456789abcdef012";

fn payload(generation: i64) -> KickPayload {
    KickPayload {
        project: "game".into(),
        env: "prod".into(),
        uid: 42,
        slot: String::new(),
        generation,
        reason: unique_core::KickReason::LoginElsewhere,
        message: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kick_is_signed_over_the_bytes_it_sent() {
    let peer = Peer::start(Behaviour::status(200)).await;
    let keys = SigningKeys::new([KEY]).unwrap();
    let kicker = HttpKicker::builder()
        .signing_keys(keys.clone())
        .build()
        .expect("valid options");
    // Two kicks on one pooled connection: each is signed on its own.
    for generation in [2, 3] {
        let outcome = kicker
            .kick(
                &peer.http_url("/kick"),
                &payload(generation),
                ANSWER_DEADLINE,
            )
            .await;
        assert_eq!(outcome, KickOutcome::Confirmed);
    }
    let requests = peer.requests();
    assert_eq!(requests.len(), 2);
    let now = SystemTime::now();
    for (request, generation) in requests.iter().zip([2, 3]) {
        let sent: KickPayload = unique_wire::decode_kick(&request.body).unwrap();
        assert_eq!(sent, payload(generation));
        let header = request.header(HEADER);
        assert!(header.is_some_and(|h| h.starts_with("t=")), "{header:?}");
        assert_eq!(
            keys.verify(header, &request.body, now, DEFAULT_WINDOW),
            Ok(())
        );
        // Made with this key and no other.
        let other = SigningKeys::new([OTHER]).unwrap();
        assert_eq!(
            other.verify(header, &request.body, now, DEFAULT_WINDOW),
            Err(Rejection::BadSignature)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_kicks_are_unsigned() {
    let peer = Peer::start(Behaviour::status(200)).await;
    let outcome = HttpKicker::new()
        .kick(&peer.http_url("/kick"), &payload(2), ANSWER_DEADLINE)
        .await;
    assert_eq!(outcome, KickOutcome::Confirmed);
    assert_eq!(peer.requests()[0].header(HEADER), None);
}

/// Replaced keys sign every later kick, through every clone, on the same pooled connection:
/// a key reload keeps one pool and one count of kicks in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_keys_sign_every_later_kick_on_the_same_connection() {
    let peer = Peer::start(Behaviour::status(200)).await;
    let (first, second) = (
        SigningKeys::new([KEY]).unwrap(),
        SigningKeys::new([OTHER]).unwrap(),
    );
    let kicker = HttpKicker::builder()
        .signing_keys(first.clone())
        .build()
        .expect("valid options");
    let url = peer.http_url("/kick");
    assert_eq!(
        kicker.kick(&url, &payload(2), ANSWER_DEADLINE).await,
        KickOutcome::Confirmed
    );

    let replaced = kicker.clone().replace_signing_keys(second.clone());

    assert_eq!(replaced.map(|keys| keys.ids()), Some(first.ids()));
    assert_eq!(
        kicker.signing_keys().map(|keys| keys.ids()),
        Some(second.ids())
    );
    assert_eq!(
        kicker.kick(&url, &payload(3), ANSWER_DEADLINE).await,
        KickOutcome::Confirmed
    );
    let requests = peer.requests();
    let now = SystemTime::now();
    let verify = |keys: &SigningKeys, i: usize| {
        keys.verify(
            requests[i].header(HEADER),
            &requests[i].body,
            now,
            DEFAULT_WINDOW,
        )
    };
    assert_eq!(verify(&first, 0), Ok(()));
    assert_eq!(verify(&second, 1), Ok(()));
    assert_eq!(verify(&first, 1), Err(Rejection::BadSignature));
    assert_eq!(peer.connections(), 1, "the pooled connection is kept");
}
