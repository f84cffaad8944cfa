//! A flood of refused callers cannot take the audit log down (issue 41 item 2). The audit log
//! sits on a 2 MiB tmpfs of its own; 100,000 requests with a wrong token, pipelined on four
//! keep-alive connections, are all refused 401; then valid logins are answered 200 and each
//! one's record is in the log when its answer arrives; the server's own log grew by a handful
//! of lines; and the refusals' tallies, written at shutdown, count the 100,000 exactly.
//!
//! When every refusal cost a line (about 250 bytes), the flood filled the disk and every
//! later login was answered 503.
//!
//! Mounting a tmpfs needs root (as CI runs); without it the test fails and says so.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use serde_json::Value;
use unique_testsupport::net::PATIENCE;

use common::{BIN, SmallDisk, request_with, start_counting_log, write_secret};

const TOKEN: &str = "flood-test-token-0123456789";
const REFUSALS: usize = 100_000;
const CONNECTIONS: usize = 4;

/// Sends `count` pipelined claims with a wrong token on one connection and returns how many
/// answers were 401 and how many answers came at all.
fn flood(addr: &str, count: usize) -> (usize, usize) {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let one = "POST /v1/claim HTTP/1.1\r\nhost: flood\r\n\
                   authorization: Bearer not-a-configured-token-0123\r\n\
                   content-length: 0\r\n\r\n";
        let batch = one.repeat(500);
        for _ in 0..count / 500 {
            writer.write_all(batch.as_bytes()).unwrap();
        }
        writer
            .write_all(one.repeat(count % 500).as_bytes())
            .unwrap();
    });
    let (mut answers, mut refused) = (0, 0);
    let mut reader = stream;
    let mut buf = vec![0u8; 64 * 1024];
    // The last bytes of the previous read: a status line split between two reads is found
    // whole (11 bytes is shorter than either pattern, so nothing is counted twice).
    let mut tail: Vec<u8> = Vec::new();
    while answers < count {
        let n = reader
            .read(&mut buf)
            .expect("the server answers every request");
        assert!(
            n > 0,
            "the server closed the connection after {answers} answers"
        );
        let mut seen = std::mem::take(&mut tail);
        seen.extend_from_slice(&buf[..n]);
        answers += occurrences(&seen, b"HTTP/1.1 ");
        refused += occurrences(&seen, b"HTTP/1.1 401");
        tail = seen[seen.len().saturating_sub(11)..].to_vec();
    }
    sender.join().unwrap();
    (refused, answers)
}

fn occurrences(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

fn claim(addr: &str, uid: usize) -> (u16, Value) {
    let body = format!(
        r#"{{"project":"game","env":"prod","uid":{uid},"owner":{{"endpoint":"http://127.0.0.1:1/kick"}},"claim_id":"login-{uid}"}}"#
    );
    let bearer = format!("Bearer {TOKEN}");
    let request_id = format!("valid-{uid}");
    let headers = [
        ("authorization", bearer.as_str()),
        ("x-request-id", &request_id),
    ];
    let answer = request_with(addr, "POST", "/v1/claim", &headers, &body);
    let status = answer[9..12].parse().unwrap();
    let (_, json) = answer.split_once("\r\n\r\n").unwrap();
    (status, serde_json::from_str(json).unwrap_or(Value::Null))
}

fn records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

#[test]
fn a_flood_of_wrong_tokens_leaves_valid_logins_answered_and_recorded() {
    let disk = SmallDisk::new("2m");
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    write_secret(
        &tokens,
        &format!(r#"{{"tokens": [{{"name": "game", "token": "{TOKEN}", "projects": ["game"]}}]}}"#),
    );
    let audit = disk.mount.join("audit.log");
    let (addr, mut guard, log) = start_counting_log(
        Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--no-leases"])
            .arg("--fjall-dir")
            .arg(dir.path().join("unique.fjall"))
            .arg("--auth-tokens")
            .arg(&tokens)
            .arg("--audit-log")
            .arg(&audit)
            // Three files of 512 KiB at most: the log's bound fits the disk.
            .args(["--audit-log-max-bytes", "524288", "--audit-log-keep", "2"])
            .env("RUST_LOG", "info"),
    );

    let before = log.lines();
    let floods: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || flood(&addr, REFUSALS / CONNECTIONS))
        })
        .collect();
    let (mut refused, mut answers) = (0, 0);
    for flood in floods {
        let (r, a) = flood.join().unwrap();
        refused += r;
        answers += a;
    }
    assert_eq!((refused, answers), (REFUSALS, REFUSALS));

    // Valid logins after the flood: answered, and recorded before their answers.
    for uid in 1..=20 {
        let (status, answer) = claim(&addr, uid);
        assert_eq!(status, 200, "login {uid} after the flood: {answer}");
        let request_id = format!("valid-{uid}");
        let recorded = records(&audit)
            .iter()
            .any(|r| r["event"] == "first-login" && r["request_id"] == request_id.as_str());
        assert!(recorded, "no record of {request_id}");
    }
    let grew = log.lines() - before;
    assert!(
        grew < 20,
        "the server's own log grew by {grew} lines during the flood"
    );

    guard.stop_with("TERM", PATIENCE);
    let kept = log.first_lines();
    let all = records(&audit);
    let tallies: Vec<&Value> = all.iter().filter(|r| r["event"] == "refused").collect();
    let counted: u64 = tallies.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, REFUSALS as u64, "{tallies:#?}");
    for tally in &tallies {
        assert_eq!(
            (&tally["reason"], &tally["path"], &tally["source"]),
            (
                &Value::from("unknown"),
                &Value::from("/v1/claim"),
                &Value::from("127.0.0.1")
            ),
            "{tally}"
        );
    }
    // One line per 10 s interval the flood lasted, not one per refusal.
    assert!(tallies.len() < 100, "{} tally lines", tallies.len());
    let size = std::fs::metadata(&audit).unwrap().len();
    assert!(
        size < 64 * 1024,
        "the audit log holds {size} bytes; logs: {kept:#?}"
    );
}
