//! The check in process: against our own receiver (signed, on loopback) every clause
//! passes; against a receiver with one deliberate flaw exactly the clauses that flaw breaks
//! fail, named.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Flaw, SIGNATURE_CLAUSES, assert_failed, flawed, handler, keys, ours, url};
use tokio::net::TcpListener;
use unique_client::{KickHandler, KickOptions};
use unique_core::Key;
use unique_kickrecv::KickService;
use unique_node_check::{Answer, Clause, DEFAULT_PROJECT, NodeCheck};

async fn check(url: &str) -> unique_node_check::Report {
    NodeCheck::new(url, keys()).unwrap().run().await
}

#[tokio::test]
async fn our_signed_receiver_keeps_every_clause() {
    let receiver = ours(KickService::new(handler()).signing_keys(keys())).await;
    let report = check(&url(receiver.local_addr())).await;
    assert!(report.passed(), "{report}");
    assert_eq!(report.results().len(), Clause::ALL.len());
    let text = report.to_string();
    assert_eq!(text.lines().count(), Clause::ALL.len() + 1, "{text}");
    for (line, clause) in text.lines().zip(Clause::ALL) {
        assert!(line.starts_with(&format!("PASS {clause} ")), "{line}");
    }
    assert!(text.ends_with("all 14 clauses passed"), "{text}");
    receiver.close().await;
}

#[tokio::test]
async fn our_receiver_without_keys_fails_every_signature_clause() {
    let receiver = ours(KickService::new(handler())).await;
    let report = check(&url(receiver.local_addr())).await;
    assert_failed(&report, &SIGNATURE_CLAUSES);
    let unsigned = &report.results()[3];
    assert_eq!(unsigned.clause(), Clause::Unsigned);
    assert_eq!(
        unsigned.to_string(),
        r#"FAIL unsigned                a kick without Unique-Signature: expected 401, got 200 {"ack":"no-session"}"#
    );
    receiver.close().await;
}

#[tokio::test]
async fn a_receiver_with_other_keys_fails_every_clause_that_needs_a_valid_signature() {
    let other =
        unique_node_check::SigningKeys::new(["another-key-0123456789abcdef0123456789ab"]).unwrap();
    let receiver = ours(KickService::new(handler()).signing_keys(other)).await;
    let report = check(&url(receiver.local_addr())).await;
    // Everything signed now gets 401; only the clauses that expect 401 still pass, and the
    // method and size clauses, which the receiver decides before the signature.
    assert_failed(
        &report,
        &[
            Clause::SignedKick,
            Clause::UnknownFieldsIgnored,
            Clause::BodyAtLimit,
            Clause::MalformedPayload,
            Clause::IncompletePayload,
        ],
    );
    receiver.close().await;
}

#[tokio::test]
async fn a_receiver_that_keeps_the_contract_its_own_way_passes() {
    let report = check(&url(flawed(Flaw::None).await)).await;
    assert!(report.passed(), "{report}");
}

#[tokio::test]
async fn each_flaw_fails_exactly_its_clauses() {
    let cases = [
        (
            Flaw::NoBodyLimit,
            &[Clause::OversizedBody, Clause::OversizedChunkedBody][..],
        ),
        (Flaw::DeclaredLengthOnly, &[Clause::OversizedChunkedBody]),
        (Flaw::AnyMethod, &[Clause::OtherMethod]),
        (Flaw::RejectsUnknownFields, &[Clause::UnknownFieldsIgnored]),
        (
            Flaw::AcceptsBadPayloads,
            &[Clause::MalformedPayload, Clause::IncompletePayload],
        ),
        (
            Flaw::NoWindow,
            &[Clause::StaleTimestamp, Clause::FutureTimestamp],
        ),
        (
            Flaw::VerifiesReserialised,
            &[
                Clause::UnknownFieldsIgnored,
                Clause::BodyAtLimit,
                Clause::TamperedBody,
            ],
        ),
    ];
    for (flaw, expected) in cases {
        let report = check(&url(flawed(flaw).await)).await;
        assert_eq!(report.failed(), expected, "{flaw:?}:\n{report}");
    }
}

#[tokio::test]
async fn every_kick_names_a_fresh_random_uid_of_the_check_s_own_project() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let asked = Arc::clone(&asked);
        KickHandler::new(
            move |key: &Key| {
                asked.lock().unwrap().push(key.clone());
                None
            },
            |_: Key, _| async {},
            KickOptions::default(),
        )
    };
    let receiver = ours(KickService::new(handler).signing_keys(keys())).await;
    let report = check(&url(receiver.local_addr())).await;
    assert!(report.passed(), "{report}");
    let mut asked = asked.lock().unwrap().clone();
    // signed-kick, unknown-fields-ignored, body-at-limit: the kicks that reach the handler.
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert!(
        asked
            .iter()
            .all(|k| k.project == DEFAULT_PROJECT && k.env == DEFAULT_PROJECT && k.uid >= 1),
        "{asked:?}"
    );
    asked.sort_by_key(|k| k.uid);
    asked.dedup();
    assert_eq!(asked.len(), 3, "one uid per kick");
    receiver.close().await;
}

#[tokio::test]
async fn project_and_env_are_the_given_ones() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let asked = Arc::clone(&asked);
        KickHandler::new(
            move |key: &Key| {
                asked.lock().unwrap().push(key.clone());
                None
            },
            |_: Key, _| async {},
            KickOptions::default(),
        )
    };
    let receiver = ours(KickService::new(handler).signing_keys(keys())).await;
    let check = NodeCheck::new(&url(receiver.local_addr()), keys())
        .unwrap()
        .project("game")
        .env("prod");
    let result = check.check(Clause::SignedKick).await;
    assert!(result.passed(), "{result}");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (asked[0].project.as_str(), asked[0].env.as_str()),
        ("game", "prod")
    );
    receiver.close().await;
}

#[tokio::test]
async fn no_receiver_fails_every_clause_with_no_answer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let report = check(&url(addr)).await;
    assert_eq!(report.failed(), Clause::ALL);
    for result in report.results() {
        assert!(
            result
                .answers()
                .iter()
                .all(|(_, answer)| matches!(answer, Answer::NoAnswer(why) if why.starts_with("connect: "))),
            "{result}"
        );
    }
}

#[tokio::test]
async fn a_receiver_that_never_answers_fails_at_the_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts and holds each connection without a byte back.
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            held.push(listener.accept().await.unwrap());
        }
    });
    let check = NodeCheck::new(&url(addr), keys())
        .unwrap()
        .timeout(Duration::from_millis(200));
    let result = check.check(Clause::SignedKick).await;
    assert!(!result.passed());
    assert_eq!(
        result.to_string(),
        "FAIL signed-kick             a kick signed with the node's key: expected 2xx, got no answer (nothing within 200ms)"
    );
}
