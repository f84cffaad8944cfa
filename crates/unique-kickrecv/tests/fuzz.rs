//! Bounded property-based fuzzing of the kick receiver: `KickService`, called directly as a
//! `tower_service::Service`, gets arbitrary bytes, arbitrary JSON and mutated kick payloads.
//! It never panics, never answers 5xx (the destroy here completes at once, so the one
//! legitimate 5xx, a destroy that timed out, cannot happen), and calls destroy exactly when
//! the payload is valid, names the local session's key and carries a gen above the local one.
//!
//! 256 cases per property by default; `PROPTEST_CASES` raises it (`cargo xtask fuzz`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use proptest::prelude::*;
use serde_json::{Value, json};
use tower_service::Service;
use unique_client::{KickHandler, KickOptions};
use unique_core::{Key, ValidationLimits};
use unique_kickrecv::{KickService, MAX_BODY_BYTES};
use unique_testsupport::fuzz::{Vocabulary, apply, config, mangled, mangling};

/// The one session this node holds.
const PROJECT: &str = "game";
const ENV: &str = "prod";
const UID: i64 = 7;

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        8 => Just(Method::POST),
        1 => Just(Method::GET),
        1 => Just(Method::PUT),
        1 => Just(Method::DELETE),
    ]
}

/// The kick payload's words, and this node's session.
const KICK: Vocabulary = Vocabulary {
    fields: &["project", "env", "uid", "gen", "generation"],
    strings: &[PROJECT, ENV],
    numbers: &[UID],
    longest: 6_000,
};

/// A valid kick: mostly for the local session's key, with a gen around the local one.
fn valid_payload() -> impl Strategy<Value = Value> {
    let project = prop_oneof![3 => Just(PROJECT.to_owned()), 1 => "[a-z0-9-]{1,16}"];
    let env = prop_oneof![3 => Just(ENV.to_owned()), 1 => "[a-z0-9-]{1,16}"];
    let uid = prop_oneof![3 => Just(UID), 1 => 1i64..100, 1 => Just(i64::MAX)];
    let generation = prop_oneof![3 => 0i64..20, 1 => any::<i64>()];
    (project, env, uid, generation)
        .prop_map(|(p, e, u, g)| json!({"project": p, "env": e, "uid": u, "gen": g}))
}

/// The kick `bytes` carry when the contract accepts them: all four fields with the right
/// types (others ignored) and a key that passes validation. Written from the contract.
fn valid_kick(bytes: &[u8]) -> Option<(Key, i64)> {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(bytes) else {
        return None;
    };
    let key = Key::new(
        body.get("project")?.as_str()?,
        body.get("env")?.as_str()?,
        body.get("uid")?.as_i64()?,
    );
    let generation = body.get("gen")?.as_i64()?;
    ValidationLimits::default().check_key(&key).ok()?;
    Some((key, generation))
}

/// What one kick did.
struct Outcome {
    status: StatusCode,
    destroyed: usize,
}

/// Sends one request to a fresh node holding `game/prod/7` at `local`; its destroy
/// completes at once.
fn send(method: Method, body: Vec<u8>, local: i64) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let destroyed = Arc::new(AtomicUsize::new(0));
    let handler = {
        let destroyed = Arc::clone(&destroyed);
        KickHandler::new(
            move |k: &Key| (*k == Key::new(PROJECT, ENV, UID)).then_some(local),
            move |_: Key, _| {
                destroyed.fetch_add(1, Ordering::SeqCst);
                async {}
            },
            KickOptions::default(),
        )
    };
    let mut service = KickService::new(handler);
    let request = Request::builder()
        .method(method)
        .uri("/kick")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = runtime.block_on(async move { service.call(request).await });
    let status = match response {
        Ok(response) => response.status(),
        Err(never) => match never {},
    };
    Outcome {
        status,
        destroyed: destroyed.load(Ordering::SeqCst),
    }
}

/// `structured` when the body came from a `Value` (no duplicate keys, so the oracle's
/// reading is the contract's).
fn check(
    method: &Method,
    body: Vec<u8>,
    local: i64,
    structured: bool,
) -> Result<(), TestCaseError> {
    let kick = valid_kick(&body);
    let fits = body.len() <= MAX_BODY_BYTES;
    let outcome = send(method.clone(), body, local);
    let status = outcome.status;
    prop_assert!(status.as_u16() < 500, "{method}: {status}");
    prop_assert!(
        outcome.destroyed <= 1,
        "destroyed {} times",
        outcome.destroyed
    );
    let should_destroy = *method == Method::POST
        && kick.as_ref().is_some_and(|(key, generation)| {
            *key == Key::new(PROJECT, ENV, UID) && *generation > local
        });
    if outcome.destroyed == 1 {
        prop_assert!(
            should_destroy,
            "destroyed for {:?} (local gen {})",
            kick,
            local
        );
        prop_assert_eq!(status, StatusCode::OK);
    }
    if structured && should_destroy && fits {
        prop_assert_eq!(
            outcome.destroyed,
            1,
            "a valid, newer kick destroyed nothing"
        );
    }
    if structured && *method == Method::POST && kick.is_some() && fits {
        prop_assert_eq!(status, StatusCode::OK, "a valid kick was refused");
    }
    Ok(())
}

fn local_gen() -> impl Strategy<Value = i64> {
    prop_oneof![3 => 1i64..20, 1 => any::<i64>()]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes(
        method in method(),
        body in prop::collection::vec(any::<u8>(), 0..512),
        local in local_gen(),
    ) {
        check(&method, body, local, false)?;
    }

    #[test]
    fn arbitrary_json(method in method(), body in KICK.json_value(), local in local_gen()) {
        check(&method, serde_json::to_vec(&body).unwrap(), local, true)?;
    }

    #[test]
    fn mutated_payloads(
        method in method(),
        body in valid_payload(),
        mutations in prop::collection::vec(KICK.mutation(), 0..4),
        local in local_gen(),
    ) {
        let body = apply(body, &mutations);
        check(&method, serde_json::to_vec(&body).unwrap(), local, true)?;
    }

    /// A valid payload's bytes cut short or with one byte changed or added.
    #[test]
    fn mangled_bytes(
        method in method(),
        body in valid_payload(),
        local in local_gen(),
        damage in mangling(),
    ) {
        check(&method, mangled(&body, &damage), local, false)?;
    }
}
