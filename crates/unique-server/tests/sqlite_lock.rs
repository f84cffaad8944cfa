//! One server per SQLite file, whatever its options: a second `unique-server` on
//! the file of a running one exits non-zero at once, naming the file, its lock
//! file and the first server's pid, for every combination of the record cache
//! (`--db-cache-records` 100000 or 0) in the first and the second, while the
//! first keeps serving. Before, only a cache-on server locked the file: a
//! cache-off server next to one started, and the cache-on one then answered the
//! gens it had cached after the other had written newer ones.
//!
//! Each test then kills the first server (SIGKILL) and starts the second on the
//! same file: the lock died with its holder, and every gen is still there.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, http, request, start};

const CACHE_ON: &str = "100000";
const CACHE_OFF: &str = "0";

/// The SQLite server on `db`, any free port, with `--db-cache-records cache`.
fn sqlite_server(db: &Path, cache: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["--listen", "127.0.0.1:0", "--store", "sqlite", "--db"])
        .arg(db)
        .args(["--db-cache-records", cache])
        .env("RUST_LOG", "warn");
    cmd
}

/// Runs `command` until it exits and returns what it printed. A server that
/// started instead would run forever: it is killed after a while, and the test fails.
fn run_to_exit(command: &mut Command, why: &str) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start unique-server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{why}: the second server is still running on the file the first holds \
                 (stdout {:?})",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Claims uid 1 as `claim_id` and returns the gen granted.
fn claim(addr: &str, claim_id: &str) -> i64 {
    let body = format!(
        r#"{{"project":"lock","env":"test","uid":1,"owner":{{"endpoint":"http://127.0.0.1:9/{claim_id}"}},"claim_id":"{claim_id}"}}"#
    );
    let answer = http(addr, "/v1/claim", &body);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let json = answer.split("\r\n\r\n").nth(1).expect("a body");
    let json: serde_json::Value = serde_json::from_str(json).expect("a JSON answer");
    json["gen"]
        .as_i64()
        .unwrap_or_else(|| panic!("no gen: {json}"))
}

/// The lock file the store keeps beside `db`.
fn lock_file(db: &Path) -> String {
    let dir = std::fs::canonicalize(db.parent().unwrap()).unwrap();
    let name = format!("{}-lock", db.file_name().unwrap().to_str().unwrap());
    dir.join(name).display().to_string()
}

/// A first server with `--db-cache-records first`, a second with `second` on
/// the same file: the second is refused and the first serves on; once the first
/// is killed the second starts and goes on from the first's gens.
fn second_server_is_refused(first: &str, second: &str) {
    let why = format!("--db-cache-records {first}, then {second}");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unique.db");
    let (addr, mut holder) = start(&mut sqlite_server(&db, first));
    assert_eq!(claim(&addr, "a"), 1, "{why}");

    let out = run_to_exit(&mut sqlite_server(&db, second), &why);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{why}: the second server must not start"
    );
    assert!(out.stdout.is_empty(), "{why}: never announced an address");
    assert!(
        err.contains(&db.display().to_string()),
        "{why}: names the file: {err}"
    );
    assert!(
        err.contains(&format!("lock file {}", lock_file(&db))),
        "{why}: names the lock file: {err}"
    );
    assert!(
        err.contains(&format!("another process (pid {})", holder.id())),
        "{why}: names the first server's pid: {err}"
    );

    // The first server still serves, from a cache (if on) that nothing made stale.
    holder.assert_running();
    assert_eq!(claim(&addr, "b"), 2, "{why}");
    let ready = request(&addr, "GET", "/readyz", "");
    assert!(ready.starts_with("HTTP/1.1 200"), "{why}: {ready}");

    // SIGKILL releases the lock with the process.
    holder.kill();
    let (addr, _second) = start(&mut sqlite_server(&db, second));
    assert_eq!(claim(&addr, "c"), 3, "{why}: the gens are the file's");
}

#[test]
fn a_cache_on_server_refuses_a_second_cache_on_server() {
    second_server_is_refused(CACHE_ON, CACHE_ON);
}

#[test]
fn a_cache_on_server_refuses_a_second_cache_off_server() {
    second_server_is_refused(CACHE_ON, CACHE_OFF);
}

#[test]
fn a_cache_off_server_refuses_a_second_cache_on_server() {
    second_server_is_refused(CACHE_OFF, CACHE_ON);
}

#[test]
fn a_cache_off_server_refuses_a_second_cache_off_server() {
    second_server_is_refused(CACHE_OFF, CACHE_OFF);
}
