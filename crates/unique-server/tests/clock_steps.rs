//! Leases across steps of the server's wall clock (D11), with the real binary under
//! libfaketime: the test steps the server's `CLOCK_REALTIME` while its monotonic clock runs
//! on, on the default store (fjall) and on `--store memory`.
//!
//! - Forward: a room whose 10 s lease has about 10 s left is not handed to a second node
//!   after a 120 s step (before D11 it was).
//! - Backward: after a 120 s step back, a 1.5 s lease never reports more than 1.5 s left,
//!   and the second node gets the room once 1.5 s have passed since its first attempt
//!   (before D11 it reported about 119 s and blocked the room for two minutes).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{BIN, post_json, start};
use serde_json::{Value, json};
use unique_testsupport::faketime::FakeClock;

const STEP_SECS: i64 = 120;

async fn ok(addr: &str, path: &str, body: &Value) -> Value {
    let (status, answer) = post_json(addr, path, "unused", body).await;
    assert_eq!(status, 200, "POST {path} {body}: {answer}");
    answer
}

async fn ensure(addr: &str, room: &str, node: &str, ttl_ms: u64) -> Value {
    let body = json!({"project": "game", "room": room, "node": node, "ttl_ms": ttl_ms});
    ok(addr, "/v1/lease/ensure", &body).await
}

/// Both properties on the server `command` starts (already on `clock`).
async fn steps_keep_leases(clock: &FakeClock, command: &mut Command) {
    let (addr, _guard) = start(clock.apply(command));

    // Forward: n1 holds "fwd" for 10 s; the clock jumps 120 s ahead at once.
    let held = ensure(&addr, "fwd", "n1", 10_000).await;
    clock.set_offset(STEP_SECS);
    let other = ensure(&addr, "fwd", "n2", 10_000).await;
    assert_eq!(
        (&other["node"], &other["token"], &other["epoch"]),
        (&held["node"], &held["token"], &held["epoch"]),
        "a forward step handed n1's room to n2: {other}"
    );
    let left = other["ttl_left_ms"].as_u64().expect("ttl_left_ms");
    assert!(left <= 10_000, "{other}");
    let renewed = ensure(&addr, "fwd", "n1", 10_000).await;
    assert_eq!(renewed["token"], held["token"], "{renewed}");

    // Backward: n1 holds "back" for 1.5 s; the clock goes back 120 s.
    let held = ensure(&addr, "back", "n1", 1_500).await;
    clock.set_offset(0);
    let looked = ok(
        &addr,
        "/v1/lease/lookup",
        &json!({"project": "game", "room": "back"}),
    )
    .await;
    let left = looked["lease"]["ttl_left_ms"].as_u64().expect("a lease");
    assert!(
        left <= 1_500,
        "a 1.5 s lease reports {left} ms left: {looked}"
    );
    let first = ensure(&addr, "back", "n2", 1_500).await;
    assert_eq!(first["token"], held["token"], "{first}");
    assert!(first["ttl_left_ms"].as_u64() <= Some(1_500), "{first}");
    // One ttl after n2's first attempt the room is n2's (the lease's time passing is what
    // is tested, not how long the call took).
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let taken = ensure(&addr, "back", "n2", 1_500).await;
    assert_eq!(
        taken["node"], "n2",
        "the room stayed blocked after a backward step: {taken}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_steps_on_the_default_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = FakeClock::new(dir.path());
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--fjall-dir"])
        .arg(Path::new(dir.path()).join("unique.fjall"))
        .env("RUST_LOG", "warn");
    steps_keep_leases(&clock, &mut command).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_steps_on_the_memory_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = FakeClock::new(dir.path());
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0", "--store", "memory"])
        .env("RUST_LOG", "warn");
    steps_keep_leases(&clock, &mut command).await;
}
