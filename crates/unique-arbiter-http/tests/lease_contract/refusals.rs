//! Bodies the lease routes refuse with 400: bad ttls, fields, ids and projects.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ttls_are_400_with_the_error_body() {
    let server = Server::start().await;
    let addr = server.addr;
    for (route, base) in [
        (LeaseRoute::Ensure, ensure_body("game", "r", "n", 1)),
        (
            LeaseRoute::RegisterNode,
            json!({"project": "game", "node": "n", "addr": "10.0.0.7:7000", "ttl_ms": 1}),
        ),
    ] {
        for (ttl, needle) in [
            (json!(0), "ttl_ms must be at least 1"),
            (json!(-1), "ttl_ms: invalid value"),
            (json!(-0.5), "ttl_ms: invalid type"),
            (json!(1.5), "ttl_ms: invalid type"),
            // An integral float is the integer (as JSON Schema reads `integer`), so it is
            // refused only for its value.
            (json!(-1.0), "ttl_ms: invalid value"),
            (json!(0.0), "ttl_ms must be at least 1"),
            (
                json!(3.6e6 + 1.0),
                "ttl_ms must be at most 3600000 (one hour)",
            ),
            (
                json!(MAX_LEASE_TTL_MS + 1),
                "ttl_ms must be at most 3600000 (one hour)",
            ),
            (json!(u64::MAX), "ttl_ms must be at most 3600000"),
            (json!("1000"), "ttl_ms: invalid type"),
            (json!(null), "ttl_ms: invalid type"),
        ] {
            let mut body = base.clone();
            body["ttl_ms"] = ttl.clone();
            let answer = post(addr, route, Some(GAME), &body).await;
            assert_invalid(&answer, needle, &format!("{route:?} ttl_ms {ttl}"));
        }
        let mut float = base.clone();
        float["ttl_ms"] = json!(1e3);
        if float.get("room").is_some() {
            float["room"] = json!("float");
        }
        let answer = ok(addr, route, &float).await;
        // The whole ttl: a lease's left, a registration's age and left together.
        let span = answer["ttl_left_ms"].as_u64().unwrap() + answer["age_ms"].as_u64().unwrap_or(0);
        assert_eq!(span, 1000, "{answer}");
        let mut longest = base.clone();
        longest["ttl_ms"] = json!(MAX_LEASE_TTL_MS);
        if longest.get("room").is_some() {
            longest["room"] = json!("longest");
        }
        ok(addr, route, &longest).await;
        let mut missing = base.clone();
        missing.as_object_mut().unwrap().remove("ttl_ms");
        let answer = post(addr, route, Some(GAME), &missing).await;
        assert_invalid(
            &answer,
            "missing field `ttl_ms`",
            &format!("{route:?} no ttl_ms"),
        );
    }
    assert_eq!(
        ok(
            addr,
            LeaseRoute::Lookup,
            &json!({"project": "game", "room": "r"})
        )
        .await,
        json!({"lease": null}),
        "a refused ensure wrote nothing"
    );
}

/// Bodies every lease route refuses with 400, and what each message says.
fn bad_bodies() -> Vec<(LeaseRoute, Value, &'static str)> {
    let long = "r".repeat(MAX_LEASE_ID_CHARS + 1);
    vec![
        (
            LeaseRoute::Ensure,
            json!({"project": "game", "room": "r", "node": "n", "ttl_ms": 1, "extra": 1}),
            "unknown field `extra`",
        ),
        (
            LeaseRoute::Ensure,
            json!({"project": "game", "room": 7, "node": "n", "ttl_ms": 1}),
            "room: invalid type",
        ),
        (
            LeaseRoute::Ensure,
            json!({"project": "game", "room": "r", "node": ["n"], "ttl_ms": 1}),
            "node: invalid type",
        ),
        (
            LeaseRoute::Ensure,
            ensure_body("game", "", "n", 1),
            "room must not be empty",
        ),
        (
            LeaseRoute::Ensure,
            ensure_body("game", "r", "", 1),
            "node must not be empty",
        ),
        (
            LeaseRoute::Ensure,
            ensure_body("game", &long, "n", 1),
            "room must be at most 191 characters",
        ),
        (
            LeaseRoute::Ensure,
            ensure_body("game", "r\n", "n", 1),
            "room must not contain control characters",
        ),
        (
            LeaseRoute::Verify,
            json!({"project": "game", "room": "r", "node": "n", "token": ""}),
            "token must not be empty",
        ),
        (
            LeaseRoute::Verify,
            json!({"project": "game", "room": "r", "node": "n"}),
            "missing field `token`",
        ),
        (
            LeaseRoute::Release,
            json!({"project": "game", "room": "r", "node": "n", "token": 1}),
            "token: invalid type",
        ),
        (
            LeaseRoute::Release,
            json!({"project": "game", "room": "r", "node": "n", "token": "t", "epoch": 1}),
            "unknown field `epoch`",
        ),
        (
            LeaseRoute::Lookup,
            json!({"project": "game"}),
            "missing field `room`",
        ),
        (
            LeaseRoute::Lookup,
            json!({"project": "game", "room": "r", "node": "n"}),
            "unknown field `node`",
        ),
        (
            LeaseRoute::RegisterNode,
            json!({"project": "game", "node": "n", "addr": "10.0.0.7 :7000", "ttl_ms": 1}),
            "addr must not contain whitespace",
        ),
        (
            LeaseRoute::RegisterNode,
            json!({"project": "game", "node": "n", "addr": "", "ttl_ms": 1}),
            "addr must not be empty",
        ),
        (
            LeaseRoute::RegisterNode,
            json!({"project": "game", "node": &long, "addr": "a:1", "ttl_ms": 1}),
            "node must be at most 191 characters",
        ),
        (
            LeaseRoute::LookupNode,
            json!({"project": "game", "node": "n", "env": "prod"}),
            "unknown field `env`",
        ),
        (
            LeaseRoute::DeregisterNode,
            json!({"project": "game", "node": ""}),
            "node must not be empty",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_fields_and_ids_are_400_with_the_error_body() {
    let server = Server::start().await;
    let addr = server.addr;
    for (route, body, needle) in bad_bodies() {
        let answer = post(addr, route, Some(GAME), &body).await;
        assert_invalid(&answer, needle, &format!("{route:?} {body}"));
    }
    // Not JSON.
    let answer = call(
        addr,
        Method::POST,
        LeaseRoute::Ensure.path(),
        Some(GAME),
        b"{",
    )
    .await;
    assert_invalid(&answer, "malformed json", "not json");
    // Nothing was written by any of it.
    assert_eq!(
        ok(
            addr,
            LeaseRoute::Lookup,
            &json!({"project": "game", "room": "r"})
        )
        .await,
        json!({"lease": null})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_projects_are_400_with_the_error_body() {
    // A project the session routes refuse is refused here too (with a token covering every
    // project, so the scope does not answer first).
    let ops = {
        let mut tokens = Tokens::new();
        tokens
            .add(
                "lease-test-token-every-project",
                Grant::new("ops", vec!["*".into()], None),
            )
            .unwrap();
        tokens
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = listener.local_addr().unwrap();
    let service = ArbiterService::new(Arbiter::new(MemoryStore::new()))
        .with_tokens(ops)
        .with_leases(Arc::new(MemoryDirectory::new()));
    tokio::spawn(serve(listener, service, std::future::pending()));
    for (project, needle) in [
        ("a#b", "project must not contain '#'"),
        ("", "project must not be empty"),
        (&*"p".repeat(65), "project must be at most 64 characters"),
    ] {
        let body = json!({"project": project, "room": "r"});
        let answer = post(
            open,
            LeaseRoute::Lookup,
            Some("lease-test-token-every-project"),
            &body,
        )
        .await;
        assert_invalid(&answer, needle, &format!("project {project:?}"));
    }
}
