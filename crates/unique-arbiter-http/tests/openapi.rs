//! `docs/openapi.yaml` against the real server, so the document cannot drift from the code.
//!
//! A server runs in-process on loopback (with bearer tokens, a store that fails on chosen keys,
//! and a short body timeout); every route is exercised for success and for every error status
//! the server can give, and each real answer is checked against the document: its status is
//! listed for that operation, its content type is one the document names, its body validates
//! against the response schema, and its required headers are there. The request of every 2xx is
//! checked against the request schema. At the end every documented (path, method, status) must
//! have been seen, and the document's paths and methods must be exactly the routes of
//! `unique_wire::Route`.

mod common;

#[path = "openapi/bodies.rs"]
mod bodies;
#[path = "openapi/document.rs"]
mod document;
#[path = "openapi/exercise.rs"]
mod exercise;
#[path = "openapi/server.rs"]
mod server;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::Method;
use serde_json::json;
use unique_wire::Route;

use crate::bodies::{claim, every_operation, key, logout};
use crate::document::Document;
use crate::exercise::{
    lease_failures, lease_successes, logout_successes, slot_successes, successes,
};
use crate::server::Server;

/// The base URI the document is registered under, so `$ref`s resolve inside it.
const BASE: &str = "https://unique.invalid/openapi.json";
/// Every project, and the admin role (so every route answers it).
const TOKEN: &str = "openapi-test-token-all-projects";
/// Project `other` only, no role.
const NARROW: &str = "openapi-test-token-other-only";
/// Short, so the 408 cases take a second; full bodies are sent with their head and never wait.
const BODY_TIMEOUT: Duration = Duration::from_secs(1);
/// The methods checked against `Route::allows` when comparing the document with the routes.
const METHODS: [Method; 7] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::OPTIONS,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_of_the_server_matches_the_document() {
    let server = Server::start().await;
    let s = &server;

    successes(s).await;
    logout_successes(s).await;
    slot_successes(s).await;
    lease_successes(s).await;
    lease_failures(s).await;

    for (path, body) in every_operation("game", "prod") {
        // 400: a bad value, a wrong type, and a body that is not JSON.
        let mut bad = body.clone();
        let uid = match bad.get_mut("keys") {
            Some(keys) => &mut keys[1]["uid"],
            None => &mut bad["uid"],
        };
        *uid = json!(0);
        s.post(path, Some(TOKEN), &bad, 400).await;
        let uid = match bad.get_mut("keys") {
            Some(keys) => &mut keys[1]["uid"],
            None => &mut bad["uid"],
        };
        *uid = json!("1");
        s.post(path, Some(TOKEN), &bad, 400).await;
        s.post_raw(path, "{not json", 400).await;
        // 401 without a token or with an unknown one; 403 outside the token's scope.
        s.post(path, None, &body, 401).await;
        s.post(path, Some("unknown-token-0123456789"), &body, 401)
            .await;
        s.post(path, Some(NARROW), &body, 403).await;
        // 501 on a lease-only server, whose info says so.
        let refused = s.post_at(s.lease_only, path, &body, 501).await;
        let refused: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
        assert_eq!(refused["error"], "not_implemented", "{refused}");
        // 413, and the store's 429 and 503.
        s.post_raw(
            path,
            vec![b' '; unique_wire::MAX_REQUEST_BODY_BYTES + 1],
            413,
        )
        .await;
    }
    for (path, body) in every_operation("fault", "throttled") {
        s.post(path, Some(TOKEN), &body, 429).await;
    }
    for (path, body) in every_operation("fault", "down") {
        s.post(path, Some(TOKEN), &body, 503).await;
    }
    // 408: one body per operation that stalls past the body timeout, all at once.
    futures::future::join_all(
        every_operation("game", "prod").map(|(path, _)| s.post_stalled(path)),
    )
    .await;

    // Probes, ready and not.
    for path in [Route::Health.path(), Route::Ready.path()] {
        assert_eq!(&s.probe(Method::GET, path, 200).await.body[..], b"ok");
        s.probe(Method::HEAD, path, 200).await;
    }
    s.store.not_ready.store(true, Ordering::SeqCst);
    s.probe(Method::GET, Route::Ready.path(), 503).await;
    s.probe(Method::HEAD, Route::Ready.path(), 503).await;
    s.probe(Method::GET, Route::Health.path(), 200).await;

    // The server's info, open without a token.
    let info = s.probe(Method::GET, Route::Info.path(), 200).await;
    let info: serde_json::Value = serde_json::from_slice(&info.body).unwrap();
    assert_eq!(info["auth"]["required"], true, "{info}");
    assert_eq!(info["kicks"]["signed"], false, "{info}");
    s.probe(Method::HEAD, Route::Info.path(), 200).await;

    push_kicks(s).await;

    // Unknown paths and methods.
    s.probe(Method::GET, "/v1/nope", 404).await;
    s.probe(Method::POST, "/", 404).await;
    for route in Route::ALL {
        let wrong = if route.allows(&Method::POST) {
            Method::GET
        } else {
            Method::POST
        };
        s.probe(wrong, route.path(), 405).await;
    }

    let seen: BTreeSet<String> = server
        .doc
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(at, _, _)| at.clone())
        .collect();
    let mut documented = server.doc.documented();
    // A kick stream's 200 has a body that never ends, so no exchange can be checked whole:
    // `push_kicks` holds two streams open, and unique-server's tests/push_kicks.rs reads them.
    documented.remove("/paths/~1v1~1nodes~1{node_id}~1kicks/get 200");
    let never_seen: Vec<_> = documented.difference(&seen).collect();
    assert!(
        never_seen.is_empty(),
        "documented but never answered: {never_seen:?}"
    );
}

/// The push-kick routes: the ack's answers, and the stream's refusals (a bad node id, no
/// token, the caps per token and in total while two streams are held, a lease-only server).
async fn push_kicks(s: &Server) {
    let ack = "/v1/nodes/n1/kicks/ack";
    let unknown = s
        .post(ack, Some(TOKEN), &json!({"id": "00", "status": 200}), 200)
        .await;
    assert_eq!(&unknown.body[..], br#"{"accepted":false}"#);
    s.post(ack, Some(TOKEN), &json!({"id": "00"}), 400).await;
    s.post(ack, None, &json!({"id": "00", "status": 200}), 401)
        .await;
    s.post_raw(
        ack,
        vec![b' '; unique_wire::MAX_REQUEST_BODY_BYTES + 1],
        413,
    )
    .await;
    s.post_stalled(ack).await;
    s.post_at(s.lease_only, ack, &json!({"id": "00", "status": 200}), 501)
        .await;

    s.get_at(s.addr, "/v1/nodes/n%201/kicks", Some(TOKEN), 400)
        .await;
    s.get_at(s.addr, "/v1/nodes/n1/kicks", None, 401).await;
    s.get_at(s.lease_only, "/v1/nodes/n1/kicks", Some(TOKEN), 501)
        .await;
    let _first = s.hold_stream("n1", TOKEN).await;
    s.get_at(s.addr, "/v1/nodes/n2/kicks", Some(TOKEN), 429)
        .await;
    let _second = s.hold_stream("n2", NARROW).await;
    s.get_at(s.addr, "/v1/nodes/n3/kicks", Some(TOKEN), 503)
        .await;
}

#[test]
fn the_document_lists_exactly_the_routes_and_methods() {
    let doc = Document::load();
    let paths: BTreeSet<&str> = doc.root["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let routes: BTreeSet<&str> = Route::ALL.iter().map(|r| r.path()).collect();
    assert_eq!(paths, routes, "document paths against unique_wire::Route");
    for route in Route::ALL {
        for method in &METHODS {
            assert_eq!(
                doc.operation(method, route.path()).is_some(),
                route.allows(method),
                "{method} {}: document and Route::allows disagree",
                route.path()
            );
        }
    }
}

#[test]
fn the_schemas_reject_what_the_server_rejects() {
    // The document is not vacuous: its request and answer schemas refuse shapes the server
    // never sends or accepts.
    let doc = Document::load();
    let claim_request = "/components/schemas/ClaimRequest";
    let valid = claim("p", "e", 1, "http://h/k", "c");
    assert!(doc.validator(claim_request).is_valid(&valid));
    let mut unknown = valid.clone();
    unknown["owner"]["zone"] = json!("z");
    assert!(!doc.validator(claim_request).is_valid(&unknown));
    let view = "/components/schemas/CurrentView";
    assert!(
        doc.validator(view)
            .is_valid(&json!({"gen": 0, "owner": null, "exists": false}))
    );
    assert!(
        !doc.validator(view)
            .is_valid(&json!({"gen": 0, "exists": false}))
    );
    let error = "/components/responses/Forbidden/content/application~1json/schema";
    assert!(
        !doc.validator(error)
            .is_valid(&json!({"error": "not_found", "message": "m"}))
    );
    let superseded = "/components/schemas/SupersededError";
    let answer = json!({"error": "superseded", "message": "m", "gen": 1, "current_gen": 2});
    assert!(doc.validator(superseded).is_valid(&answer));
    for missing in ["gen", "current_gen"] {
        let mut partial = answer.clone();
        partial.as_object_mut().unwrap().remove(missing);
        assert!(!doc.validator(superseded).is_valid(&partial), "{partial}");
    }
    // The plain error shape has no room for the gens.
    let plain = "/components/schemas/Error";
    assert!(!doc.validator(plain).is_valid(&answer));
    // A logout names a key (with or without a slot) and maybe a reason, nothing else; its
    // answer always carries all four fields.
    let logout_request = "/components/schemas/LogoutRequest";
    for valid in [
        logout("p", "e", 1, None),
        logout("p", "e", 1, Some("r")),
        json!({"project": "p", "env": "e", "uid": 1, "reason": null}),
        json!({"project": "p", "env": "e", "uid": 1, "slot": "pc"}),
    ] {
        assert!(doc.validator(logout_request).is_valid(&valid), "{valid}");
    }
    for invalid in [
        json!({"project": "p", "env": "e", "uid": 1, "device": "a"}),
        json!({"project": "p", "env": "e", "uid": 1, "slot": 5}),
        json!({"project": "p", "env": "e", "uid": 1, "reason": ""}),
        json!({"project": "p", "env": "e", "uid": 1, "reason": 5}),
        json!({"project": "p", "env": "e"}),
    ] {
        assert!(
            !doc.validator(logout_request).is_valid(&invalid),
            "{invalid}"
        );
    }
    // A listing takes a user, never a slot, and answers every field of every session.
    let user_request = "/components/schemas/UserRequest";
    assert!(doc.validator(user_request).is_valid(&key("p", "e", 1)));
    let with_slot = json!({"project": "p", "env": "e", "uid": 1, "slot": "pc"});
    assert!(!doc.validator(user_request).is_valid(&with_slot));
    let sessions_answer = "/components/schemas/SessionsAnswer";
    let session = json!({"slot": "", "gen": 1, "owner": {"endpoint": "http://h/k"}});
    assert!(
        doc.validator(sessions_answer)
            .is_valid(&json!({"sessions": [session]}))
    );
    let mut partial = session.clone();
    partial.as_object_mut().unwrap().remove("slot");
    assert!(
        !doc.validator(sessions_answer)
            .is_valid(&json!({"sessions": [partial]}))
    );
    let logout_answer = "/components/schemas/LogoutAnswer";
    let released = json!({"released": true, "gen": 3, "kicked": false, "kick_detail": "timeout"});
    assert!(doc.validator(logout_answer).is_valid(&released));
    let mut self_replace = released.clone();
    self_replace["kick_detail"] = json!("self-replace-skipped");
    assert!(
        !doc.validator(logout_answer).is_valid(&self_replace),
        "a logout replaces no one"
    );
    let mut partial = released.clone();
    partial.as_object_mut().unwrap().remove("kick_detail");
    assert!(!doc.validator(logout_answer).is_valid(&partial));
    // Logging out all of a user's sessions names the user, never a slot; each entry of its
    // answer is a slot and a logout answer.
    let logout_all_request = "/components/schemas/LogoutAllRequest";
    assert!(
        doc.validator(logout_all_request)
            .is_valid(&logout("p", "e", 1, Some("r")))
    );
    assert!(!doc.validator(logout_all_request).is_valid(&with_slot));
    let logout_all_answer = "/components/schemas/LogoutAllAnswer";
    let mut entry = released;
    entry["slot"] = json!("#2");
    assert!(
        doc.validator(logout_all_answer)
            .is_valid(&json!({"sessions": [entry.clone()]}))
    );
    entry.as_object_mut().unwrap().remove("slot");
    assert!(
        !doc.validator(logout_all_answer)
            .is_valid(&json!({"sessions": [entry]}))
    );
}

#[test]
fn the_lease_schemas_reject_what_the_server_rejects() {
    let doc = Document::load();
    // A lease request takes a positive whole ttl of at most an hour, and nothing else.
    let ensure = "/components/schemas/LeaseEnsureRequest";
    let valid = json!({"project": "p", "room": "r", "node": "n", "ttl_ms": 3_600_000});
    assert!(doc.validator(ensure).is_valid(&valid));
    for (field, value) in [
        ("ttl_ms", json!(0)),
        ("ttl_ms", json!(-1)),
        ("ttl_ms", json!(1.5)),
        ("ttl_ms", json!(3_600_001)),
        ("ttl_ms", json!("1")),
        ("room", json!("")),
        ("extra", json!(1)),
    ] {
        let mut invalid = valid.clone();
        invalid[field] = value;
        assert!(!doc.validator(ensure).is_valid(&invalid), "{invalid}");
    }
    let lease = "/components/schemas/Lease";
    let answer = json!({"room": "r", "node": "n", "token": "t", "epoch": 1, "ttl_left_ms": 0});
    assert!(doc.validator(lease).is_valid(&answer));
    let mut partial = answer.clone();
    partial.as_object_mut().unwrap().remove("epoch");
    assert!(!doc.validator(lease).is_valid(&partial));
    let lookup = "/components/schemas/LeaseLookupAnswer";
    assert!(doc.validator(lookup).is_valid(&json!({"lease": null})));
    assert!(!doc.validator(lookup).is_valid(&json!({})));
    let removed = "/components/schemas/NodeDeregisterAnswer";
    assert!(!doc.validator(removed).is_valid(&json!({"removed": false})));
}
