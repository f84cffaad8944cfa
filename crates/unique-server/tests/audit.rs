//! `--audit-log` on the real binary, on its default store (fjall) with caller tokens: a
//! scripted session is recorded line by line, each line there before its answer arrives, and
//! its refusals tallied, one line each at the stop; SIGHUP after a rename moves later lines
//! to a new file at the path; a symbolic link at the path stops startup; and an audit log
//! that cannot be written answers claims and releases 503 (reads and refusals go on) until it
//! can again, when the retries are recorded. (`audit_flood.rs`: a flood of refusals.)

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Instant, SystemTime};

use serde_json::Value;
use unique_testsupport::ChildGuard;
use unique_testsupport::net::PATIENCE;

use common::{BIN, SmallDisk, announced_addr, request_with, write_secret};

const TOKEN: &str = "audit-test-token-0123456789";
const TOKEN_NAME: &str = "game-backend";
/// The operator's token: `game` too, with the admin role.
const ADMIN_TOKEN: &str = "audit-admin-token-0123456789";
/// Nobody listens on loopback port 1: a kick there is `connect-error`.
const DEAD: &str = "http://127.0.0.1:1/kick";
const LIVE: &str = "http://127.0.0.1:2/kick";

/// A running server with `--audit-log`, and its stderr line by line.
struct Server {
    addr: String,
    guard: ChildGuard,
    logs: mpsc::Receiver<String>,
    _dir: tempfile::TempDir,
}

/// Starts the server on a fresh fjall directory with one token (`game` only), its audit log at
/// `audit` (`None`: `audit.log` in the scratch directory, which is returned too).
fn start(audit: Option<&Path>) -> (Server, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    write_secret(
        &tokens,
        &format!(
            r#"{{"tokens": [{{"name": "{TOKEN_NAME}", "token": "{TOKEN}", "projects": ["game"]}}, {{"name": "operator", "token": "{ADMIN_TOKEN}", "projects": ["game"], "roles": ["admin"]}}]}}"#
        ),
    );
    let audit = audit.map_or_else(|| dir.path().join("audit.log"), Path::to_owned);
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0"])
        .arg("--fjall-dir")
        .arg(dir.path().join("unique.fjall"))
        .arg("--auth-tokens")
        .arg(&tokens)
        .arg("--audit-log")
        .arg(&audit)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    let stderr = child.stderr.take().unwrap();
    let (sender, logs) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            eprintln!("server: {line}");
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    let server = Server {
        addr,
        guard: ChildGuard::new(child, "unique-server"),
        logs,
        _dir: dir,
    };
    (server, audit)
}

impl Server {
    /// POSTs `body` to `path` with `token` (none: no `Authorization`) and `x-request-id`;
    /// returns the status and the JSON body.
    fn call(&self, path: &str, token: Option<&str>, request_id: &str, body: &str) -> (u16, Value) {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("x-request-id", request_id)];
        if let Some(bearer) = &bearer {
            headers.push(("authorization", bearer));
        }
        let answer = request_with(&self.addr, "POST", path, &headers, body);
        let status = answer[9..12].parse().unwrap();
        let (_, json) = answer.split_once("\r\n\r\n").unwrap();
        (status, serde_json::from_str(json).unwrap_or(Value::Null))
    }

    fn get(&self, path: &str) -> String {
        request_with(&self.addr, "GET", path, &[], "")
    }

    fn sighup_and_wait_for(&self, needle: &str) {
        let pid = self.guard.id().to_string();
        let status = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
        assert!(status.success());
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.logs.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(e) => panic!("no log line with {needle:?}: {e}"),
            }
        }
    }
}

fn claim(project: &str, uid: i64, endpoint: &str, claim_id: &str) -> String {
    format!(
        r#"{{"project":"{project}","env":"prod","uid":{uid},"owner":{{"endpoint":"{endpoint}"}},"claim_id":"{claim_id}"}}"#
    )
}

fn release(uid: i64, generation: i64) -> String {
    format!(r#"{{"project":"game","env":"prod","uid":{uid},"gen":{generation}}}"#)
}

fn key(uid: i64) -> String {
    format!(r#"{{"project":"game","env":"prod","uid":{uid}}}"#)
}

/// The audit file's lines (none when it does not exist).
fn lines(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    }
}

/// The line with its `ts` checked (RFC 3339 UTC with milliseconds, between `after` and
/// now) and replaced by `TS`, so the rest compares as text, field order included.
fn without_ts(line: &str, after: SystemTime) -> String {
    let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let ts = value["ts"]
        .as_str()
        .unwrap_or_else(|| panic!("no ts: {line}"));
    // 2026-05-01T12:34:56.789Z
    assert_eq!(ts.len(), 24, "{ts}");
    assert!(ts.ends_with('Z') && ts.as_bytes()[19] == b'.', "{ts}");
    let at = humantime::parse_rfc3339(ts).unwrap();
    // The timestamp keeps milliseconds only: compare at that precision.
    let floor = after - std::time::Duration::from_millis(1);
    assert!(floor <= at && at <= SystemTime::now(), "{ts}");
    line.replacen(ts, "TS", 1)
}

/// One request of the script: what is sent, the status expected, and the line it must have
/// written by the time its answer arrives (`None`: none).
struct Step {
    request_id: &'static str,
    path: &'static str,
    token: Option<&'static str>,
    body: String,
    status: u16,
    line: Option<&'static str>,
}

/// A step as a row: request id, path, token, body, status, line.
type Row = (
    &'static str,
    &'static str,
    Option<&'static str>,
    String,
    u16,
    Option<&'static str>,
);

/// A first login, its replay, a takeover whose kick cannot connect, the first login's
/// superseded retry, a read, a release, a login after the logout, an admin logout refused to
/// the backend's token and done by the operator's, and three refused callers.
fn script() -> Vec<Step> {
    session_rows()
        .into_iter()
        .chain(refused_rows())
        .map(|(request_id, path, token, body, status, line)| Step {
            request_id,
            path,
            token,
            body,
            status,
            line,
        })
        .collect()
}

fn session_rows() -> [Row; 9] {
    let ok = Some(TOKEN);
    [
        (
            "r-first",
            "/v1/claim",
            ok,
            claim("game", 7, DEAD, "login-a"),
            200,
            Some(
                r#"{"ts":"TS","event":"first-login","project":"game","env":"prod","uid":7,"slot":"","gen":1,"prev_gen":null,"token":"game-backend","request_id":"r-first"}"#,
            ),
        ),
        (
            "r-replay",
            "/v1/claim",
            ok,
            claim("game", 7, DEAD, "login-a"),
            200,
            Some(
                r#"{"ts":"TS","event":"replay","project":"game","env":"prod","uid":7,"slot":"","gen":1,"prev_gen":null,"token":"game-backend","request_id":"r-replay"}"#,
            ),
        ),
        (
            "r-takeover",
            "/v1/claim",
            ok,
            claim("game", 7, LIVE, "login-b"),
            200,
            Some(
                r#"{"ts":"TS","event":"takeover","project":"game","env":"prod","uid":7,"slot":"","gen":2,"prev_gen":1,"token":"game-backend","request_id":"r-takeover","kicked":false,"kick_detail":"connect-error"}"#,
            ),
        ),
        (
            "r-superseded",
            "/v1/claim",
            ok,
            claim("game", 7, DEAD, "login-a"),
            409,
            Some(
                r#"{"ts":"TS","event":"superseded","project":"game","env":"prod","uid":7,"slot":"","gen":1,"prev_gen":null,"token":"game-backend","request_id":"r-superseded","current_gen":2}"#,
            ),
        ),
        // A read is not a session event.
        ("r-read", "/v1/current", ok, key(7), 200, None),
        (
            "r-release",
            "/v1/release",
            ok,
            release(7, 2),
            200,
            Some(
                r#"{"ts":"TS","event":"release","project":"game","env":"prod","uid":7,"slot":"","gen":2,"prev_gen":null,"token":"game-backend","request_id":"r-release","released":true,"reason":null}"#,
            ),
        ),
        (
            "r-relogin",
            "/v1/claim",
            ok,
            claim("game", 7, LIVE, "login-c"),
            200,
            Some(
                r#"{"ts":"TS","event":"first-login","project":"game","env":"prod","uid":7,"slot":"","gen":3,"prev_gen":2,"token":"game-backend","request_id":"r-relogin"}"#,
            ),
        ),
        // An admin logout needs the admin role: the backend's own token is refused.
        ("r-logout-refused", "/v1/logout", ok, key(7), 403, None),
        (
            "r-logout",
            "/v1/logout",
            Some(ADMIN_TOKEN),
            r#"{"project":"game","env":"prod","uid":7,"reason":"support ticket 12"}"#.to_owned(),
            200,
            Some(
                r#"{"ts":"TS","event":"admin-logout","project":"game","env":"prod","uid":7,"slot":"","gen":3,"prev_gen":null,"token":"operator","request_id":"r-logout","released":true,"kicked":false,"kick_detail":"connect-error"}"#,
            ),
        ),
    ]
}

fn refused_rows() -> [Row; 3] {
    [
        (
            "r-no-token",
            "/v1/claim",
            None,
            claim("game", 7, DEAD, "login-d"),
            401,
            None,
        ),
        (
            "r-unknown",
            "/v1/release",
            Some("not-a-configured-token-0123"),
            release(7, 3),
            401,
            None,
        ),
        (
            "r-out-of-scope",
            "/v1/claim",
            Some(TOKEN),
            claim("other", 9, DEAD, "login-e"),
            403,
            None,
        ),
    ]
}

/// The tallies of the script's refusals, in the order they began: request id (the first
/// refusal's), token, status, reason, path; one refusal each, from loopback.
const TALLIES: [(&str, Option<&str>, u16, &str, &str); 4] = [
    (
        "r-logout-refused",
        Some(TOKEN_NAME),
        403,
        "missing-role",
        "/v1/logout",
    ),
    ("r-no-token", None, 401, "missing", "/v1/claim"),
    ("r-unknown", None, 401, "unknown", "/v1/release"),
    (
        "r-out-of-scope",
        Some(TOKEN_NAME),
        403,
        "forbidden",
        "/v1/claim",
    ),
];

#[test]
fn a_scripted_session_is_recorded_in_order_each_line_before_its_answer() {
    let (server, audit) = start(None);
    let began = SystemTime::now();
    let mut expected = Vec::new();
    for step in script() {
        let (status, answer) = server.call(step.path, step.token, step.request_id, &step.body);
        assert_eq!(status, step.status, "{}: {answer}", step.request_id);
        expected.extend(step.line);
        // Written before the answer was sent: already in the file, with no wait.
        let written: Vec<String> = lines(&audit).iter().map(|l| without_ts(l, began)).collect();
        assert_eq!(written, expected, "after {}", step.request_id);
    }
    // And in the order of the events: timestamps never go back.
    let stamps: Vec<String> = lines(&audit)
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["ts"].to_string())
        .collect();
    assert!(stamps.is_sorted(), "{stamps:?}");

    // Refusals are tallied, not written one by one: a stop writes the tallies, one each.
    let mut server = server;
    server.guard.stop_with("TERM", PATIENCE);
    let all = lines(&audit);
    assert_eq!(all.len(), expected.len() + TALLIES.len(), "{all:#?}");
    for (line, (request_id, token, status, reason, path)) in
        all[expected.len()..].iter().zip(TALLIES)
    {
        let tally: Value = serde_json::from_str(line).unwrap();
        let text = |field: &str| tally[field].as_str().map(str::to_owned);
        assert_eq!(
            (
                text("event").as_deref(),
                text("request_id").as_deref(),
                text("token").as_deref(),
                tally["status"].as_u64(),
                text("reason").as_deref(),
                text("path").as_deref(),
                text("source").as_deref(),
                tally["count"].as_u64(),
                tally["project"].is_null() && tally["uid"].is_null(),
            ),
            (
                Some("refused"),
                Some(request_id),
                token,
                Some(u64::from(status)),
                Some(reason),
                Some(path),
                Some("127.0.0.1"),
                Some(1),
                true
            ),
            "{line}"
        );
        assert!(
            text("first_ts") <= text("last_ts") && text("last_ts") <= text("ts"),
            "{line}"
        );
    }
}

#[test]
fn a_symbolic_link_at_the_audit_path_stops_startup() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere.log");
    std::fs::write(&target, "").unwrap();
    let link = dir.path().join("audit.log");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--no-leases",
        ])
        .arg("--audit-log")
        .arg(&link)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "unique-server: cannot open the audit log {}: it is a symbolic link, which the audit \
         log never follows: name the file itself",
        link.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
    // Keeping no rotated file is refused too, before anything is opened.
    let out = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--store", "memory"])
        .arg("--audit-log")
        .arg(dir.path().join("real.log"))
        .args(["--audit-log-keep", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--audit-log-keep"),
        "{stderr}"
    );
}

#[test]
fn sighup_after_a_rename_moves_later_lines_to_a_new_file() {
    let (server, audit) = start(None);
    let rotated = audit.with_extension("log.1");
    let login = |uid, request_id| {
        let (status, answer) = server.call(
            "/v1/claim",
            Some(TOKEN),
            request_id,
            &claim("game", uid, LIVE, request_id),
        );
        assert_eq!(status, 200, "{answer}");
    };
    let ids = |path: &Path| -> Vec<String> {
        lines(path)
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["request_id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    login(1, "before-rename");
    std::fs::rename(&audit, &rotated).unwrap();
    login(2, "before-sighup"); // still the renamed file: logrotate's window
    assert!(!audit.exists());
    server.sighup_and_wait_for("audit log reopened");
    login(3, "after-sighup");
    assert_eq!(ids(&rotated), ["before-rename", "before-sighup"]);
    assert_eq!(ids(&audit), ["after-sighup"]);
}

/// The audit log sits on a small tmpfs, which a filler file fills: every write fails with
/// ENOSPC; later the filler is removed and SIGHUP reopens the path. Mounting a tmpfs needs
/// root (as CI runs); without it the test fails and says so.
#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_audit_log_fails_session_events_closed_until_it_works_again() {
    let disk = SmallDisk::new("1m");
    let audit = disk.mount.join("audit.log");
    let (mut server, _) = start(Some(&audit));
    let filler = disk.fill(0);
    let ok = Some(TOKEN);

    let (status, answer) = server.call("/v1/claim", ok, "c1", &claim("game", 7, LIVE, "login-a"));
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"], "unavailable", "{answer}");
    assert_eq!(answer["message"], "audit log cannot be written", "{answer}");
    // The claim took effect in the store before its line failed; reads and probes go on.
    let (status, view) = server.call("/v1/current", ok, "r1", &key(7));
    assert_eq!((status, view["gen"].clone()), (200, 1.into()), "{view}");
    assert!(server.get("/readyz").starts_with("HTTP/1.1 200"));
    // A release too (of another key, whose claim took effect the same way).
    let (status, _) = server.call("/v1/claim", ok, "c2", &claim("game", 8, LIVE, "login-b"));
    assert_eq!(status, 503);
    let (status, answer) = server.call("/v1/release", ok, "l1", &release(8, 1));
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["message"], "audit log cannot be written", "{answer}");
    let (status, view) = server.call("/v1/current", ok, "r2", &key(8));
    assert_eq!(
        (status, view["owner"].clone()),
        (200, Value::Null),
        "{view}"
    );
    // Refused callers are refused all the same (and tallied, not written yet).
    let (status, _) = server.call("/v1/claim", None, "n1", &claim("game", 7, LIVE, "login-a"));
    assert_eq!(status, 401);
    let (status, _) = server.call("/v1/claim", ok, "f1", &claim("other", 7, LIVE, "login-a"));
    assert_eq!(status, 403);
    let metrics = server.get("/metrics");
    assert!(
        metrics.contains("\nunique_audit_write_errors_total 3\n"),
        "{metrics}"
    );

    // The log works again: the retries, with the same claim_id and gen, are answered and
    // recorded.
    std::fs::remove_file(filler).unwrap();
    server.sighup_and_wait_for("audit log reopened");
    let (status, answer) = server.call("/v1/claim", ok, "c3", &claim("game", 7, LIVE, "login-a"));
    assert_eq!(
        (status, answer["replayed"].clone()),
        (200, true.into()),
        "{answer}"
    );
    let (status, answer) = server.call("/v1/release", ok, "l2", &release(8, 1));
    assert_eq!(
        (status, answer["released"].clone()),
        (200, true.into()),
        "{answer}"
    );
    let events: Vec<(String, i64, String)> = lines(&audit)[..2]
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let text = |field: &str| v[field].as_str().unwrap().to_owned();
            (
                text("event"),
                v["uid"].as_i64().unwrap(),
                text("request_id"),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("replay".to_owned(), 7, "c3".to_owned()),
            ("release".to_owned(), 8, "l2".to_owned())
        ]
    );
    // The refusals made while the disk was full are written at the stop.
    server.guard.stop_with("TERM", PATIENCE);
    let tallied: Vec<(String, u64)> = lines(&audit)[2..]
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["request_id"].as_str().unwrap().to_owned(),
                v["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(tallied, [("n1".to_owned(), 1), ("f1".to_owned(), 1)]);
}
