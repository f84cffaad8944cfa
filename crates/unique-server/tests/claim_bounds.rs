//! The claim bounds of the real binary: `--claim-timeout` answers a claim stuck
//! behind an old session's silent kick receiver 503 long before the 30 s kick
//! timeout, writing nothing; `--max-queued-claims` answers a claim beyond the
//! line 429 at once; `/metrics` counts both.

mod common;

use std::net::TcpListener;
use std::process::Command;
use std::sync::mpsc;
use std::thread;

use common::{BIN, http, request, start};

fn claim(claim_id: &str, endpoint: &str) -> String {
    format!(
        r#"{{"project":"bounds","env":"test","uid":1,"owner":{{"endpoint":"{endpoint}"}},"claim_id":"{claim_id}"}}"#
    )
}

fn status(answer: &str) -> &str {
    answer.get(9..12).unwrap_or(answer)
}

/// Accepts connections and never answers them: a node that went silent. Each
/// accepted connection is reported on the returned channel.
fn silent_receiver() -> (String, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}/kick", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    (endpoint, rx)
}

#[test]
fn a_claim_past_its_deadline_answers_503_and_a_full_line_429() {
    let (addr, _server) = start(Command::new(BIN).args([
        "--listen",
        "127.0.0.1:0",
        "--store",
        "memory",
        "--kick-timeout",
        "30s",
        "--claim-timeout",
        "1s",
        "--max-queued-claims",
        "1",
    ]));
    let (silent, accepted) = silent_receiver();
    let first = http(&addr, "/v1/claim", &claim("old", &silent));
    assert_eq!(status(&first), "200", "{first}");

    // The replacement's kick goes to the silent node and holds the key's turn.
    let stuck = {
        let addr = addr.clone();
        thread::spawn(move || {
            http(
                &addr,
                "/v1/claim",
                &claim("stuck", "http://127.0.0.1:9/kick"),
            )
        })
    };
    accepted.recv().expect("the kick reached the silent node");
    // One claim may wait behind it; of two more at once, one waits and the
    // other is refused at once.
    let more: Vec<_> = ["second", "third"]
        .map(|claim_id| {
            let addr = addr.clone();
            thread::spawn(move || {
                http(
                    &addr,
                    "/v1/claim",
                    &claim(claim_id, "http://127.0.0.1:9/kick"),
                )
            })
        })
        .into_iter()
        .collect();
    let mut answers: Vec<String> = more.into_iter().map(|t| t.join().unwrap()).collect();
    answers.sort_by_key(|a| status(a).to_owned());
    let [refused, waited] = &answers[..] else {
        unreachable!("two claims")
    };
    assert_eq!(status(refused), "429", "{refused}");
    assert!(refused.contains(r#""error":"throttled""#), "{refused}");

    // The holder and the waiter answer within the claim deadline (the 30 s kick
    // would outlast the test's 20 s read patience), and neither wrote.
    for (name, answer) in [("stuck", &stuck.join().unwrap()), ("waited", waited)] {
        assert_eq!(status(answer), "503", "{name}: {answer}");
        assert!(answer.contains("deadline"), "{name}: {answer}");
    }
    let current = http(
        &addr,
        "/v1/current",
        r#"{"project":"bounds","env":"test","uid":1}"#,
    );
    assert!(
        current.contains(r#""gen":1"#),
        "nothing was written: {current}"
    );

    let metrics = request(&addr, "GET", "/metrics", "");
    let count = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} missing from /metrics:\n{metrics}"))
    };
    assert!(count(r#"unique_claims_shed_total{reason="queue-full"}"#) >= 1.0);
    assert!(count(r#"unique_claims_shed_total{reason="deadline"}"#) >= 2.0);
}
