//! The deployment-wide series of the real binary: `unique_sessions_online` is the store's count,
//! so a server that answered none of the logins reports them (two servers on one PostgreSQL
//! table), and `unique_lease_takeovers_total` counts grants over another node's expired
//! holding, not first grants, renewals, refusals or a node taking its own room back.

mod common;

use std::process::Command;
use std::time::Instant;

use common::{BIN, postgres_command, request, start};
use unique_testsupport::net::PATIENCE;
use unique_testsupport::postgres;

/// The value of the unlabelled series `name` on `addr`'s `/metrics`, or `None` while absent.
fn sample(addr: &str, name: &str) -> (Option<f64>, String) {
    let exposition = request(addr, "GET", "/metrics", "");
    let value = exposition
        .lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .find_map(|value| value.trim().parse().ok());
    (value, exposition)
}

/// Reads `name` on `addr` until it is `want` (the server counts on its own interval); fails
/// with the last exposition when it is not within the test tooling's patience.
fn wait_for(addr: &str, name: &str, want: f64) {
    let start = Instant::now();
    loop {
        let (value, exposition) = sample(addr, name);
        if value == Some(want) {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{name} is {value:?}, not {want}, on {addr}:\n{exposition}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The body of a 200 answer to a POST; fails naming the route otherwise.
fn ok(addr: &str, path: &str, body: &str) -> serde_json::Value {
    let answer = request(addr, "POST", path, body);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "POST {path} {body}: {answer}"
    );
    serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap()
}

fn claim(addr: &str, uid: i64) {
    let body = format!(
        r#"{{"project":"game","env":"prod","uid":{uid},"owner":{{"endpoint":"http://127.0.0.1:9/kick"}},"claim_id":"c{uid}"}}"#
    );
    assert_eq!(ok(addr, "/v1/claim", &body)["gen"], 1, "uid {uid}");
}

#[test]
fn sessions_online_is_the_stores_count_whichever_server_answered() {
    let db = postgres::shared();
    let table = "online_counts_test";
    let server = |create: bool| {
        let mut command = postgres_command(db.url(), table);
        command.args(["--insecure-no-auth", "--sessions-count-interval", "1s"]);
        if create {
            command.arg("--create-table");
        }
        command.env("RUST_LOG", "warn");
        start(&mut command)
    };
    let (a, _a) = server(true);
    let (b, _b) = server(false);
    // Rows an earlier run left: the count is of the table.
    let (before, exposition) = {
        let start = Instant::now();
        loop {
            let (value, exposition) = sample(&b, "unique_sessions_online");
            if let Some(value) = value {
                break (value, exposition);
            }
            assert!(start.elapsed() < PATIENCE, "no gauge on {b}:\n{exposition}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .cast_signed()
        * 10;
    for uid in base..base + 3 {
        claim(&a, uid);
    }
    wait_for(&b, "unique_sessions_online", before + 3.0);
    let release = format!(r#"{{"project":"game","env":"prod","uid":{base},"gen":1}}"#);
    assert_eq!(ok(&a, "/v1/release", &release)["released"], true);
    wait_for(&b, "unique_sessions_online", before + 2.0);
    wait_for(&a, "unique_sessions_online", before + 2.0);
    // Timed and counted like every store operation.
    assert!(
        exposition.contains(r#"operation="count_online""#),
        "{exposition}"
    );
}

#[test]
fn lease_takeovers_count_grants_over_another_nodes_expired_holding() {
    let (addr, _server) = start(Command::new(BIN).args([
        "--listen",
        "127.0.0.1:0",
        "--store",
        "memory",
        "--insecure-no-auth",
    ]));
    let takeovers = "unique_lease_takeovers_total";
    assert_eq!(sample(&addr, takeovers).0, Some(0.0), "registered at 0");
    let ensure = |node: &str, ttl_ms: u64| {
        let body = format!(r#"{{"project":"game","room":"r1","node":"{node}","ttl_ms":{ttl_ms}}}"#);
        ok(&addr, "/v1/lease/ensure", &body)
    };
    let expire = || {
        let start = Instant::now();
        while ok(
            &addr,
            "/v1/lease/lookup",
            r#"{"project":"game","room":"r1"}"#,
        )["lease"]["ttl_left_ms"]
            != 0
        {
            assert!(start.elapsed() < PATIENCE, "r1 never expired");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    // A first grant, a renewal, a refusal while n1 holds it: no takeover.
    assert_eq!(ensure("n1", 200)["epoch"], 1);
    assert_eq!(ensure("n1", 300)["epoch"], 1);
    assert_eq!(ensure("n2", 300)["node"], "n1");
    // n1 again after its own holding expired: a new grant, not a takeover.
    expire();
    assert_eq!(ensure("n1", 200)["epoch"], 2);
    assert_eq!(sample(&addr, takeovers).0, Some(0.0));
    // n2 after n1's holding expired: a takeover.
    expire();
    let taken = ensure("n2", 30_000);
    assert_eq!((&taken["node"], &taken["epoch"]), (&"n2".into(), &3.into()));
    assert_eq!(sample(&addr, takeovers).0, Some(1.0));
}
