//! Bounded property-based fuzzing of the wire contract: `ArbiterService::handle`, called
//! directly, gets arbitrary bytes, arbitrary JSON and mutated claim/current/release bodies on
//! every route. It never panics, never answers 5xx (the store works, so a 5xx is a bug),
//! never touches the store for a request it answers 400/404/405/413, and answers a claim 200
//! only for a body that is a valid claim (and always for one).
//!
//! 256 cases per property by default; `PROPTEST_CASES` raises it (`cargo xtask fuzz`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use unique_arbiter_http::ArbiterService;
use unique_core::{Arbiter, Key, Owner, ValidationLimits};
mod common;

use common::CountingStore;
use unique_testsupport::fuzz::{Vocabulary, apply, config, mangled, mangling};

const PATHS: &[&str] = &["/v1/claim", "/v1/current", "/v1/release", "/v1/logout"];

/// Mostly `POST` on a real route; sometimes another method or an unknown path.
fn target() -> impl Strategy<Value = (Method, &'static str)> {
    let method = prop_oneof![
        8 => Just(Method::POST),
        1 => Just(Method::GET),
        1 => Just(Method::PUT),
        1 => Just(Method::DELETE),
    ];
    let path = prop_oneof![
        10 => prop::sample::select(PATHS),
        1 => prop::sample::select(&["/v1/claim/", "/v1/nope", "/", "/V1/CLAIM"][..]),
    ];
    (method, path)
}

/// The claim, current, release and logout contract's words.
const WIRE: Vocabulary = Vocabulary {
    fields: &[
        "project", "env", "uid", "owner", "claim_id", "gen", "region", "cluster", "endpoint",
        "reason",
    ],
    strings: &["game", "prod"],
    numbers: &[7],
    longest: 70_000,
};

fn tenant() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-z0-9-]{1,16}",
        1 => Just("t".repeat(64)),
        1 => "\\PC{1,8}".prop_filter("no '#'", |s| !s.contains('#') && s.len() <= 64),
    ]
}

/// A valid body for one of the routes.
fn valid_body() -> impl Strategy<Value = Value> {
    let uid = prop_oneof![1i64..100, Just(i64::MAX)];
    let endpoint = prop_oneof![
        Just("http://127.0.0.1:9/kick".to_owned()),
        "https://[a-z]{1,10}\\.example(:[0-9]{1,5})?/[a-z]{0,8}",
    ];
    let region = prop::option::of("[a-z0-9-]{0,8}");
    let claim = (
        tenant(),
        tenant(),
        uid.clone(),
        region.clone(),
        region,
        endpoint,
        "[!-~]{1,128}",
    )
        .prop_map(|(project, env, uid, region, cluster, endpoint, claim_id)| {
            let mut owner = Map::new();
            owner.insert("endpoint".into(), endpoint.into());
            if let Some(region) = region {
                owner.insert("region".into(), region.into());
            }
            if let Some(cluster) = cluster {
                owner.insert("cluster".into(), cluster.into());
            }
            json!({"project": project, "env": env, "uid": uid, "owner": owner, "claim_id": claim_id})
        });
    let current = (tenant(), tenant(), uid.clone())
        .prop_map(|(project, env, uid)| json!({"project": project, "env": env, "uid": uid}));
    let release = (tenant(), tenant(), uid.clone(), any::<i64>()).prop_map(
        |(project, env, uid, g)| json!({"project": project, "env": env, "uid": uid, "gen": g}),
    );
    let logout = (tenant(), tenant(), uid, prop::option::of("\\PC{1,64}")).prop_map(
        |(project, env, uid, reason)| {
            let mut body = json!({"project": project, "env": env, "uid": uid});
            if let Some(reason) = reason {
                body["reason"] = reason.into();
            }
            body
        },
    );
    prop_oneof![2 => claim, 1 => current, 1 => release, 1 => logout]
}

/// Whether `bytes` is a claim the contract accepts: exactly the claim's fields with the
/// right types, and values that pass the validation rules. Written from the contract, not
/// with the server's parser.
fn is_valid_claim(bytes: &[u8]) -> bool {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(bytes) else {
        return false;
    };
    let only = |map: &Map<String, Value>, allowed: &[&str]| {
        map.keys().all(|k| allowed.contains(&k.as_str()))
    };
    if !only(&body, &["project", "env", "uid", "owner", "claim_id"]) {
        return false;
    }
    let (Some(project), Some(env), Some(uid), Some(owner), Some(claim_id)) = (
        body.get("project").and_then(Value::as_str),
        body.get("env").and_then(Value::as_str),
        body.get("uid").and_then(Value::as_i64),
        body.get("owner").and_then(Value::as_object),
        body.get("claim_id").and_then(Value::as_str),
    ) else {
        return false;
    };
    if !only(owner, &["region", "cluster", "endpoint"]) {
        return false;
    }
    let optional = |name: &str| match owner.get(name) {
        None => Some(""),
        Some(v) => v.as_str(),
    };
    let (Some(region), Some(cluster), Some(endpoint)) = (
        optional("region"),
        optional("cluster"),
        owner.get("endpoint").and_then(Value::as_str),
    ) else {
        return false;
    };
    let limits = ValidationLimits::default();
    limits.check_key(&Key::new(project, env, uid)).is_ok()
        && limits.check_claim_id(claim_id).is_ok()
        && limits
            .check_owner(&Owner::new(region, cluster, endpoint))
            .is_ok()
}

/// What one request did.
struct Outcome {
    status: StatusCode,
    reads: usize,
    writes: usize,
}

fn send(method: Method, path: &str, body: Vec<u8>) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = Arc::new(CountingStore::default());
    let service = ArbiterService::new(Arbiter::new(Arc::clone(&store)));
    let request = Request::builder()
        .method(method)
        .uri(path)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let status = runtime.block_on(service.handle(request)).status();
    Outcome {
        status,
        reads: store.reads.load(Ordering::SeqCst),
        writes: store.writes.load(Ordering::SeqCst),
    }
}

/// The properties every answer has; `structured` when the body came from a `Value` (so it
/// holds no duplicate keys and the oracle's reading is the contract's).
fn check(
    method: &Method,
    path: &str,
    body: Vec<u8>,
    structured: bool,
) -> Result<(), TestCaseError> {
    let valid_claim = is_valid_claim(&body);
    let outcome = send(method.clone(), path, body);
    let status = outcome.status;
    prop_assert!(status.as_u16() < 500, "{method} {path}: {status}");
    if [400, 404, 405, 413].contains(&status.as_u16()) {
        prop_assert_eq!(
            outcome.writes,
            0,
            "{} {}: {} after a store write",
            method,
            path,
            status
        );
        prop_assert_eq!(
            outcome.reads,
            0,
            "{} {}: {} after a store read",
            method,
            path,
            status
        );
    }
    let claim = *method == Method::POST && path == "/v1/claim";
    if claim && status == StatusCode::OK {
        prop_assert!(valid_claim, "claim answered 200 for an invalid claim");
    }
    if claim && structured && valid_claim {
        prop_assert_eq!(status, StatusCode::OK, "a valid claim was refused");
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes((method, path) in target(), body in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&method, path, body, false)?;
    }

    #[test]
    fn arbitrary_json((method, path) in target(), body in WIRE.json_value()) {
        check(&method, path, serde_json::to_vec(&body).unwrap(), true)?;
    }

    #[test]
    fn mutated_bodies(
        (method, path) in target(),
        body in valid_body(),
        mutations in prop::collection::vec(WIRE.mutation(), 0..4),
    ) {
        let body = apply(body, &mutations);
        check(&method, path, serde_json::to_vec(&body).unwrap(), true)?;
    }

    /// A valid body's bytes cut short or with one byte changed or added.
    #[test]
    fn mangled_bytes(
        (method, path) in target(),
        body in valid_body(),
        damage in mangling(),
    ) {
        check(&method, path, mangled(&body, &damage), false)?;
    }
}
