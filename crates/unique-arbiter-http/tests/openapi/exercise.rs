//! Every route driven through its successes and failures, lease routes and slots
//! included.

use serde_json::{Value, json};
use unique_core::Key;
use unique_wire::LeaseRoute;

use crate::bodies::{batch, claim, key, lease_operations, logout, on_slot, release};
use crate::server::Server;
use crate::{NARROW, TOKEN};

/// Every shape of each lease answer: a grant, a renewal, another node's lease, verify true
/// and false, a lookup with and without a lease, releases that delete and that do not, and a
/// node registered, read, removed and read as absent.
pub(crate) async fn lease_successes(s: &Server) {
    let post = |path: &'static str, body: Value| async move {
        let answer = s.post(path, Some(TOKEN), &body, 200).await;
        serde_json::from_slice::<Value>(&answer.body).unwrap()
    };
    let lookup = json!({"project": "game", "room": "lobby"});
    assert_eq!(
        post(LeaseRoute::Lookup.path(), lookup.clone()).await,
        json!({"lease": null})
    );
    let ensure =
        |node: &str| json!({"project": "game", "room": "lobby", "node": node, "ttl_ms": 15_000});
    let granted = post(LeaseRoute::Ensure.path(), ensure("n1")).await;
    assert_eq!(
        (&granted["room"], &granted["node"], &granted["epoch"]),
        (&json!("lobby"), &json!("n1"), &json!(1)),
        "{granted}"
    );
    let renewed = post(LeaseRoute::Ensure.path(), ensure("n1")).await;
    assert_eq!(renewed["token"], granted["token"], "{renewed}");
    let elsewhere = post(LeaseRoute::Ensure.path(), ensure("n2")).await;
    assert_eq!(elsewhere["node"], "n1", "{elsewhere}");
    let held = post(LeaseRoute::Lookup.path(), lookup).await;
    assert_eq!(held["lease"]["token"], granted["token"], "{held}");
    let token = |node: &str, token: &Value| json!({"project": "game", "room": "lobby", "node": node, "token": token});
    for (node, want) in [("n1", true), ("n2", false)] {
        let verify = post(LeaseRoute::Verify.path(), token(node, &granted["token"])).await;
        assert_eq!(verify, json!({"valid": want}));
    }
    for (node, want) in [("n2", false), ("n1", true), ("n1", false)] {
        let release = post(LeaseRoute::Release.path(), token(node, &granted["token"])).await;
        assert_eq!(release, json!({"released": want}));
    }
    let register =
        json!({"project": "game", "node": "n1", "addr": "10.0.0.7:7000", "ttl_ms": 15_000});
    let registered = post(LeaseRoute::RegisterNode.path(), register).await;
    assert_eq!(
        (&registered["node"], &registered["addr"]),
        (&json!("n1"), &json!("10.0.0.7:7000")),
        "{registered}"
    );
    let node = json!({"project": "game", "node": "n1"});
    let found = post(LeaseRoute::LookupNode.path(), node.clone()).await;
    assert_eq!(found["node"]["addr"], "10.0.0.7:7000", "{found}");
    for _ in 0..2 {
        let removed = post(LeaseRoute::DeregisterNode.path(), node.clone()).await;
        assert_eq!(removed, json!({"removed": true}));
    }
    assert_eq!(
        post(LeaseRoute::LookupNode.path(), node).await,
        json!({"node": null})
    );
}

/// Every error status of every lease route.
pub(crate) async fn lease_failures(s: &Server) {
    for (path, body) in lease_operations("game", "r1") {
        // 400: a bad value (a zero ttl, or a project with '#'), a wrong type, not JSON.
        let mut bad = body.clone();
        if bad.get("ttl_ms").is_some() {
            bad["ttl_ms"] = json!(0);
        } else {
            bad["project"] = json!("a#b");
        }
        s.post(path, Some(TOKEN), &bad, 400).await;
        let mut mistyped = body.clone();
        mistyped["project"] = json!(5);
        s.post(path, Some(TOKEN), &mistyped, 400).await;
        s.post_raw(path, "{not json", 400).await;
        // 401 without a token or with an unknown one; 403 outside the token's projects.
        s.post(path, None, &body, 401).await;
        s.post(path, Some("unknown-token-0123456789"), &body, 401)
            .await;
        s.post(path, Some(NARROW), &body, 403).await;
        s.post_raw(
            path,
            vec![b' '; unique_wire::MAX_REQUEST_BODY_BYTES + 1],
            413,
        )
        .await;
        // 501 on the server without a lease directory.
        let refused = s.post_without_leases(path, &body, 501).await;
        let refused: Value = serde_json::from_slice(&refused.body).unwrap();
        assert_eq!(refused["error"], "not_implemented", "{refused}");
    }
    for (id, status, code) in [
        ("down", 503, "unavailable"),
        ("corrupt", 500, "corrupt"),
        ("broken", 500, "internal"),
    ] {
        for (path, body) in lease_operations("fault", id) {
            let answer = s.post(path, Some(TOKEN), &body, status).await;
            let answer: Value = serde_json::from_slice(&answer.body).unwrap();
            assert_eq!(answer["error"], code, "{path}: {answer}");
        }
    }
    futures::future::join_all(lease_operations("game", "r1").map(|(path, _)| s.post_stalled(path)))
        .await;
}

/// Success, with every shape of each answer.
pub(crate) async fn successes(s: &Server) {
    // first login, replay, replacement (an owner
    // and a kick detail in the answer), an owner with only an endpoint, absent, live and
    // tombstoned records, released and not.
    s.post("/v1/current", Some(TOKEN), &key("game", "prod", 1), 200)
        .await;
    let c1 = claim("game", "prod", 1, "http://127.0.0.1:9/a", "c1");
    s.post("/v1/claim", Some(TOKEN), &c1, 200).await;
    s.post("/v1/claim", Some(TOKEN), &c1, 200).await;
    let c2 = claim("game", "prod", 1, "http://127.0.0.1:9/a", "c2");
    let replaced = s.post("/v1/claim", Some(TOKEN), &c2, 200).await;
    assert!(String::from_utf8_lossy(&replaced.body).contains("self-replace-skipped"));
    let bare = json!({"project": "game", "env": "prod", "uid": 2,
                      "owner": {"endpoint": "http://127.0.0.1:9/b"}, "claim_id": "b"});
    s.post("/v1/claim", Some(TOKEN), &bare, 200).await;
    s.post("/v1/current", Some(TOKEN), &key("game", "prod", 2), 200)
        .await;
    // Superseded: cA wins gen 1, cB takes the key (gen 2), and cA retried is 409 with both gens.
    let ca = claim("game", "prod", 7, "http://127.0.0.1:9/a", "cA");
    let cb = claim("game", "prod", 7, "http://127.0.0.1:9/b", "cB");
    s.post("/v1/claim", Some(TOKEN), &ca, 200).await;
    s.post("/v1/claim", Some(TOKEN), &cb, 200).await;
    let superseded = s.post("/v1/claim", Some(TOKEN), &ca, 409).await;
    let body: Value = serde_json::from_slice(&superseded.body).unwrap();
    assert_eq!(
        (&body["error"], &body["gen"], &body["current_gen"]),
        (&json!("superseded"), &json!(1), &json!(2)),
        "{body}"
    );
    s.post(
        "/v1/release",
        Some(TOKEN),
        &release("game", "prod", 1, 2),
        200,
    )
    .await;
    s.post(
        "/v1/release",
        Some(TOKEN),
        &release("game", "prod", 1, 9),
        200,
    )
    .await;
    s.post("/v1/current", Some(TOKEN), &key("game", "prod", 1), 200)
        .await;
    // A batch with every kind of entry: live, tombstone, absent, another tenant, a repeat,
    // and a corrupt owner (an error entry; `/v1/current` answers that key 503).
    s.store
        .inner
        .put_raw(&Key::new("game", "prod", 3), 4, Some("{"), Some("x"), None);
    let mixed = batch(&[
        key("game", "prod", 2),
        key("game", "prod", 1),
        key("game", "prod", 99),
        key("chat", "dev", 1),
        key("game", "prod", 2),
        key("game", "prod", 3),
    ]);
    let answer = s.post("/v1/current/batch", Some(TOKEN), &mixed, 200).await;
    let views: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(views["views"][5]["error"], "unavailable", "{views}");
    assert_eq!(views["views"][0], views["views"][4], "{views}");
    s.post("/v1/current", Some(TOKEN), &key("game", "prod", 3), 503)
        .await;
    s.post("/v1/current/batch", Some(TOKEN), &batch(&[]), 200)
        .await;
    let hundred: Vec<Value> = (1..=100).map(|uid| key("game", "prod", uid)).collect();
    s.post("/v1/current/batch", Some(TOKEN), &batch(&hundred), 200)
        .await;
    let too_many: Vec<Value> = (1..=101).map(|uid| key("game", "prod", uid)).collect();
    s.post("/v1/current/batch", Some(TOKEN), &batch(&too_many), 400)
        .await;
    // One key outside the token's scope refuses the whole batch.
    let partly = batch(&[key("other", "prod", 1), key("game", "prod", 1)]);
    s.post("/v1/current/batch", Some(NARROW), &partly, 403)
        .await;
}

/// Every shape of a logout's answer, and its 403 for a token without the admin role.
pub(crate) async fn logout_successes(s: &Server) {
    // Admin logouts: an online session (released and kicked: this server has no kicker),
    // a corrupt one (released, `no-endpoint`), none (a tombstone, no record); with and
    // without a reason, and a null one.
    let online = claim("game", "prod", 20, "http://127.0.0.1:9/a", "l1");
    s.post("/v1/claim", Some(TOKEN), &online, 200).await;
    let done = s
        .post(
            "/v1/logout",
            Some(TOKEN),
            &logout("game", "prod", 20, Some("abuse")),
            200,
        )
        .await;
    let body: Value = serde_json::from_slice(&done.body).unwrap();
    assert_eq!(
        body,
        json!({"released": true, "gen": 1, "kicked": true, "kick_detail": null})
    );
    s.post(
        "/v1/logout",
        Some(TOKEN),
        &logout("game", "prod", 20, None),
        200,
    )
    .await;
    s.store
        .inner
        .put_raw(&Key::new("game", "prod", 21), 5, Some("{"), Some("x"), None);
    let corrupt = s
        .post(
            "/v1/logout",
            Some(TOKEN),
            &logout("game", "prod", 21, None),
            200,
        )
        .await;
    let body: Value = serde_json::from_slice(&corrupt.body).unwrap();
    assert_eq!(body["kick_detail"], "no-endpoint", "{body}");
    let null = json!({"project": "game", "env": "prod", "uid": 22, "reason": null});
    s.post("/v1/logout", Some(TOKEN), &null, 200).await;
    // Inside its scope but without the admin role: 403.
    s.post(
        "/v1/logout",
        Some(NARROW),
        &logout("other", "prod", 1, None),
        403,
    )
    .await;

    // All of a user's sessions: the default slot and a named one, then none.
    for (slot, claim_id) in [("", "la1"), ("mobile", "la2")] {
        let login = on_slot(
            claim("game", "prod", 23, "http://127.0.0.1:9/b", claim_id),
            slot,
        );
        s.post("/v1/claim", Some(TOKEN), &login, 200).await;
    }
    let all = logout("game", "prod", 23, Some("closed"));
    let done = s.post("/v1/logout/all", Some(TOKEN), &all, 200).await;
    let body: Value = serde_json::from_slice(&done.body).unwrap();
    let entry = |slot: &str| json!({"slot": slot, "released": true, "gen": 1, "kicked": true, "kick_detail": null});
    assert_eq!(body, json!({"sessions": [entry(""), entry("mobile")]}));
    let none = s.post("/v1/logout/all", Some(TOKEN), &all, 200).await;
    let body: Value = serde_json::from_slice(&none.body).unwrap();
    assert_eq!(body, json!({"sessions": []}));
    s.post(
        "/v1/logout/all",
        Some(NARROW),
        &logout("other", "prod", 1, None),
        403,
    )
    .await;
}

/// Slots on every route that carries a key, and every shape of a listing.
pub(crate) async fn slot_successes(s: &Server) {
    let list = |uid| key("game", "prod", uid);
    let none = s.post("/v1/sessions", Some(TOKEN), &list(30), 200).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&none.body).unwrap(),
        json!({"sessions": []})
    );
    let pc = on_slot(
        claim("game", "prod", 30, "http://127.0.0.1:9/pc", "s1"),
        "pc",
    );
    let mobile = on_slot(
        claim("game", "prod", 30, "http://127.0.0.1:9/m", "s2"),
        "mobile",
    );
    let default = claim("game", "prod", 30, "http://127.0.0.1:9/d", "s3");
    for body in [&pc, &mobile, &default] {
        let answer = s.post("/v1/claim", Some(TOKEN), body, 200).await;
        let answer: Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(answer["gen"], 1, "each slot has its own gen: {answer}");
    }
    let listed = s.post("/v1/sessions", Some(TOKEN), &list(30), 200).await;
    let listed: Value = serde_json::from_slice(&listed.body).unwrap();
    let slots: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["slot"].as_str().unwrap())
        .collect();
    assert_eq!(slots, ["", "mobile", "pc"], "{listed}");
    let pc_key = on_slot(key("game", "prod", 30), "pc");
    s.post("/v1/current", Some(TOKEN), &pc_key, 200).await;
    let both = batch(&[pc_key.clone(), key("game", "prod", 30)]);
    s.post("/v1/current/batch", Some(TOKEN), &both, 200).await;
    let release_pc = on_slot(release("game", "prod", 30, 1), "pc");
    s.post("/v1/release", Some(TOKEN), &release_pc, 200).await;
    let logout_mobile = on_slot(logout("game", "prod", 30, None), "mobile");
    s.post("/v1/logout", Some(TOKEN), &logout_mobile, 200).await;
    let left = s.post("/v1/sessions", Some(TOKEN), &list(30), 200).await;
    let left: Value = serde_json::from_slice(&left.body).unwrap();
    assert_eq!(
        left,
        json!({"sessions": [{"slot": "", "gen": 1,
            "owner": {"region": "eu", "cluster": "c1", "endpoint": "http://127.0.0.1:9/d"}}]})
    );
    // A bad slot is a 400 on every route that takes one; the listing takes none.
    for (path, body) in [
        ("/v1/claim", on_slot(pc.clone(), "a#b")),
        ("/v1/current", on_slot(list(30), &"s".repeat(65))),
        ("/v1/release", on_slot(release_pc.clone(), "tab\t")),
        ("/v1/logout", on_slot(logout_mobile.clone(), "a#b")),
        ("/v1/sessions", on_slot(list(30), "pc")),
    ] {
        s.post(path, Some(TOKEN), &body, 400).await;
    }
    // A corrupt owner on any slot makes the listing 503.
    s.store.inner.put_raw(
        &Key::new("game", "prod", 31).with_slot("tv"),
        2,
        Some("{"),
        Some("x"),
        None,
    );
    s.post("/v1/sessions", Some(TOKEN), &list(31), 503).await;
}
