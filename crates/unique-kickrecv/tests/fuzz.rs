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
use proptest::sample::Index;
use serde_json::{Map, Value, json};
use tower_service::Service;
use unique_client::{KickHandler, KickOptions};
use unique_core::{Key, ValidationLimits};
use unique_kickrecv::{KickService, MAX_BODY_BYTES};

/// The one session this node holds.
const PROJECT: &str = "game";
const ENV: &str = "prod";
const UID: i64 = 7;

/// 256 cases unless `PROPTEST_CASES` says otherwise. (`ProptestConfig::with_cases` would
/// override the variable, so the default, which reads it, is kept when it is set.)
fn config() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 256;
    }
    config
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        8 => Just(Method::POST),
        1 => Just(Method::GET),
        1 => Just(Method::PUT),
        1 => Just(Method::DELETE),
    ]
}

/// Strings a careless or hostile kicker sends.
fn weird_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9-]{1,12}",
        2 => prop::sample::select(&[PROJECT, ENV][..]).prop_map(str::to_owned),
        1 => "\\PC{0,16}",
        1 => "[a-z]{0,4}[\\x00-\\x1f\\x7f\\x{80}-\\x{9f}][a-z]{0,4}",
        1 => "[a-z]{0,4}#[a-z]{0,4}",
        1 => Just(String::new()),
        1 => (60usize..200).prop_map(|n| "p".repeat(n)),
        1 => (0usize..6_000).prop_map(|n| "x".repeat(n)),
    ]
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(&["project", "env", "uid", "gen", "generation"][..])
            .prop_map(str::to_owned),
        1 => "\\PC{0,8}",
        1 => "[A-Za-z_]{1,10}",
    ]
}

/// Numbers at and past the edges of `i64`, and near the local session's key and gen.
fn edge_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(&[0, -1, 1, UID, i64::MIN, i64::MAX][..]).prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(json!(1e300)),
        Just(json!(7.0)),
        Just(json!(-0.5)),
        any::<i64>().prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        edge_number(),
        any::<f64>().prop_filter_map("finite", |f| {
            serde_json::Number::from_f64(f).map(Value::Number)
        }),
        weird_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(field_name(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A valid kick: mostly for the local session's key, with a gen around the local one.
fn valid_payload() -> impl Strategy<Value = Value> {
    let project = prop_oneof![3 => Just(PROJECT.to_owned()), 1 => "[a-z0-9-]{1,16}"];
    let env = prop_oneof![3 => Just(ENV.to_owned()), 1 => "[a-z0-9-]{1,16}"];
    let uid = prop_oneof![3 => Just(UID), 1 => 1i64..100, 1 => Just(i64::MAX)];
    let generation = prop_oneof![3 => 0i64..20, 1 => any::<i64>()];
    (project, env, uid, generation)
        .prop_map(|(p, e, u, g)| json!({"project": p, "env": e, "uid": u, "gen": g}))
}

#[derive(Debug, Clone)]
enum Mutation {
    Drop(Index),
    Rename(Index, String),
    Replace(Index, Value),
    /// An extra field, which a receiver ignores.
    Insert(String, Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let value = prop_oneof![
        edge_number(),
        weird_string().prop_map(Value::String),
        json_value(),
    ];
    prop_oneof![
        any::<Index>().prop_map(Mutation::Drop),
        (any::<Index>(), field_name()).prop_map(|(i, n)| Mutation::Rename(i, n)),
        (any::<Index>(), value).prop_map(|(i, v)| Mutation::Replace(i, v)),
        (field_name(), json_value()).prop_map(|(n, v)| Mutation::Insert(n, v)),
    ]
}

fn apply(mut body: Value, mutations: &[Mutation]) -> Value {
    let object = body.as_object_mut().expect("a payload is an object");
    for mutation in mutations {
        let keys: Vec<String> = object.keys().cloned().collect();
        match mutation {
            Mutation::Insert(name, v) => {
                object.insert(name.clone(), v.clone());
            }
            _ if keys.is_empty() => {}
            Mutation::Drop(i) => {
                object.remove(i.get(&keys));
            }
            Mutation::Rename(i, name) => {
                if let Some(v) = object.remove(i.get(&keys)) {
                    object.insert(name.clone(), v);
                }
            }
            Mutation::Replace(i, v) => {
                object.insert(i.get(&keys).clone(), v.clone());
            }
        }
    }
    body
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
    fn arbitrary_json(method in method(), body in json_value(), local in local_gen()) {
        check(&method, serde_json::to_vec(&body).unwrap(), local, true)?;
    }

    #[test]
    fn mutated_payloads(
        method in method(),
        body in valid_payload(),
        mutations in prop::collection::vec(mutation(), 0..4),
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
        at in any::<Index>(),
        byte in any::<u8>(),
        how in 0u8..3,
    ) {
        let mut bytes = serde_json::to_vec(&body).unwrap();
        let i = at.index(bytes.len() + 1);
        match how {
            0 => bytes.truncate(i),
            1 => bytes.insert(i, byte),
            _ => {
                if let Some(b) = bytes.get_mut(i) {
                    *b = byte;
                }
            }
        }
        check(&method, bytes, local, false)?;
    }
}
