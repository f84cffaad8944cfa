//! Request bodies of every operation.

use serde_json::{Value, json};
use unique_wire::{LeaseRoute, Route};

pub(crate) fn key(project: &str, env: &str, uid: i64) -> Value {
    json!({"project": project, "env": env, "uid": uid})
}

pub(crate) fn claim(project: &str, env: &str, uid: i64, endpoint: &str, claim_id: &str) -> Value {
    json!({"project": project, "env": env, "uid": uid,
           "owner": {"region": "eu", "cluster": "c1", "endpoint": endpoint},
           "claim_id": claim_id})
}

pub(crate) fn release(project: &str, env: &str, uid: i64, generation: i64) -> Value {
    json!({"project": project, "env": env, "uid": uid, "gen": generation})
}

pub(crate) fn logout(project: &str, env: &str, uid: i64, reason: Option<&str>) -> Value {
    let mut body = json!({"project": project, "env": env, "uid": uid});
    if let Some(reason) = reason {
        body["reason"] = json!(reason);
    }
    body
}

pub(crate) fn batch(keys: &[Value]) -> Value {
    json!({"keys": keys})
}

/// One valid body per `/v1/*` route, on the key `project/env/1`.
pub(crate) fn every_operation(project: &str, env: &str) -> [(&'static str, Value); 7] {
    [
        (
            Route::CurrentBatch.path(),
            batch(&[key(project, env, 1), key(project, env, 2)]),
        ),
        (
            Route::Claim.path(),
            claim(project, env, 1, "http://127.0.0.1:9/k", "c"),
        ),
        (Route::Current.path(), key(project, env, 1)),
        (Route::Release.path(), release(project, env, 1, 1)),
        (Route::Logout.path(), logout(project, env, 1, Some("r"))),
        (Route::LogoutAll.path(), logout(project, env, 1, Some("r"))),
        (Route::Sessions.path(), key(project, env, 1)),
    ]
}

/// One valid body per lease route, on room or node `id` of `project`.
pub(crate) fn lease_operations(project: &str, id: &str) -> [(&'static str, Value); 7] {
    [
        (
            LeaseRoute::Ensure.path(),
            json!({"project": project, "room": id, "node": "n1", "ttl_ms": 15_000}),
        ),
        (
            LeaseRoute::Verify.path(),
            json!({"project": project, "room": id, "node": "n1", "token": "t"}),
        ),
        (
            LeaseRoute::Release.path(),
            json!({"project": project, "room": id, "node": "n1", "token": "t"}),
        ),
        (
            LeaseRoute::Lookup.path(),
            json!({"project": project, "room": id}),
        ),
        (
            LeaseRoute::RegisterNode.path(),
            json!({"project": project, "node": id, "addr": "10.0.0.7:7000", "ttl_ms": 15_000}),
        ),
        (
            LeaseRoute::LookupNode.path(),
            json!({"project": project, "node": id}),
        ),
        (
            LeaseRoute::DeregisterNode.path(),
            json!({"project": project, "node": id}),
        ),
    ]
}

pub(crate) fn on_slot(mut body: Value, slot: &str) -> Value {
    body["slot"] = json!(slot);
    body
}
