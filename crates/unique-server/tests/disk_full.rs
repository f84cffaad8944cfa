//! A full disk stops no store for good. The server's store directory sits on a small tmpfs
//! of its own; a filler file takes the rest of its space, claims fill what is left and are
//! answered 503 (fail closed) while `/readyz` says 503 too; once the filler is removed,
//! claims and readiness recover in the same process, with no restart; a SIGKILL and a
//! restart after that lose nothing that was acknowledged. On fjall (the default store) and
//! on SQLite. Meanwhile the server's own log (at `warn`) holds a bounded number of lines,
//! not one per failed claim.
//!
//! Mounting a tmpfs needs root (as CI runs); without it the test fails and says so.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{BIN, SmallDisk, request, start, start_counting_log};

/// Claims answered 503 on the full disk: enough that one log line each would show.
const FAILED_CLAIMS: usize = 500;

fn status(answer: &str) -> u16 {
    answer
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {answer:?}"))
}

fn claim(addr: &str, uid: u64, claim_id: &str) -> String {
    request(
        addr,
        "POST",
        "/v1/claim",
        &format!(
            r#"{{"project":"disk","env":"prod","uid":{uid},"owner":{{"region":"eu","cluster":"c1","endpoint":"http://127.0.0.1:9/kick"}},"claim_id":"{claim_id}"}}"#
        ),
    )
}

/// The gen the answer acknowledged.
fn acknowledged_gen(answer: &str) -> u64 {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json: serde_json::Value = serde_json::from_str(body).unwrap();
    json["gen"].as_u64().unwrap()
}

fn current_gen(addr: &str, uid: u64) -> u64 {
    let answer = request(
        addr,
        "POST",
        "/v1/current",
        &format!(r#"{{"project":"disk","env":"prod","uid":{uid}}}"#),
    );
    assert_eq!(status(&answer), 200, "{answer}");
    acknowledged_gen(&answer)
}

fn ready(addr: &str) -> u16 {
    status(&request(addr, "GET", "/readyz", ""))
}

fn fills_then_recovers(store_args: &[&str], store_path: &str) {
    let disk = SmallDisk::new("8m");
    let server = |disk: &SmallDisk| {
        let mut command = Command::new(BIN);
        command
            .args(["--listen", "127.0.0.1:0", "--no-leases"])
            .args(store_args)
            .arg(disk.mount.join(store_path))
            .env("RUST_LOG", "warn");
        command
    };
    let (addr, guard, log) = start_counting_log(&mut server(&disk));
    let mut acknowledged: Vec<(u64, u64)> = Vec::new();
    for uid in 1..=20 {
        let answer = claim(&addr, uid, &format!("before-{uid}"));
        assert_eq!(status(&answer), 200, "{answer}");
        acknowledged.push((uid, acknowledged_gen(&answer)));
    }
    assert_eq!(ready(&addr), 200);

    let filler = disk.fill(16 * 1024);
    let logged_before = log.lines();
    let mut refused = 0;
    let mut uid = 1_000;
    let deadline = Instant::now() + Duration::from_mins(1);
    while refused < FAILED_CLAIMS {
        assert!(Instant::now() < deadline, "the disk never filled up");
        uid += 1;
        let answer = claim(&addr, uid, &format!("full-{uid}"));
        match status(&answer) {
            200 => acknowledged.push((uid, acknowledged_gen(&answer))),
            503 => refused += 1,
            other => panic!("claim on a full disk answered {other}: {answer}"),
        }
    }
    assert_eq!(
        ready(&addr),
        503,
        "readiness tells the truth while writes fail"
    );
    let logged = log.lines() - logged_before;
    assert!(
        logged < FAILED_CLAIMS / 5,
        "{FAILED_CLAIMS} failed claims wrote {logged} lines to the server's log"
    );

    // Readiness comes back with no claim sent (a load balancer sends none to an unready
    // server), then the claims.
    std::fs::remove_file(filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while ready(&addr) != 200 {
        assert!(
            Instant::now() < deadline,
            "readiness did not recover after space returned"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut recovered = 0;
    while recovered < 50 {
        assert!(
            Instant::now() < deadline,
            "claims did not recover after space returned ({recovered} of 50)"
        );
        uid += 1;
        let answer = claim(&addr, uid, &format!("after-{uid}"));
        if status(&answer) == 200 {
            recovered += 1;
            acknowledged.push((uid, acknowledged_gen(&answer)));
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(ready(&addr), 200);

    // SIGKILL, restart: every acknowledged claim is there.
    drop(guard);
    let (addr, _guard) = start(&mut server(&disk));
    for (uid, generation) in acknowledged {
        assert!(
            current_gen(&addr, uid) >= generation,
            "uid {uid}: acknowledged gen {generation} lost"
        );
    }
}

#[test]
fn fjall_recovers_from_a_full_disk_without_a_restart() {
    fills_then_recovers(&["--fjall-dir"], "unique.fjall");
}

#[test]
fn sqlite_recovers_from_a_full_disk_without_a_restart() {
    fills_then_recovers(&["--store", "sqlite", "--db"], "unique.db");
}
