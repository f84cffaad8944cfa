//! The binary on `--store postgres` against a real PostgreSQL (started by the test tooling, or
//! `UNIQUE_TEST_DATABASE_URL`): serving claims, its bounded startup errors, and several server
//! processes on one database racing the same keys.

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use unique_testsupport::postgres::{self, PASSWORD, PostgresServer};
use unique_testsupport::{ChildGuard, free_port};

use common::{BIN, announced_addr, http, postgres_command, request, stop_with_sigterm};

/// Starts the server and waits for its address; stderr is piped (the caller reads it).
fn serve(mut command: Command) -> (String, std::process::Child) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    (addr, child)
}

/// The JSON body of an answer.
fn body(answer: &str) -> serde_json::Value {
    let (_, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// A project name no earlier run used, for a database that outlives the test
/// (`UNIQUE_TEST_DATABASE_URL`).
fn fresh_project(what: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}{}x{nanos}", std::process::id())
}

#[test]
fn serves_claims_on_postgres_and_creates_the_table_without_logging_the_password() {
    let db = postgres::shared();
    let mut command = postgres_command(db.url(), "server_binary_test");
    command.arg("--create-table");
    let (addr, child) = serve(command);
    let project = fresh_project("srv");
    let claim = format!(
        r#"{{"project":"{project}","env":"pg","uid":7,"owner":{{"endpoint":"http://127.0.0.1:9/k"}},"claim_id":"c1"}}"#
    );
    let first = http(&addr, "/v1/claim", &claim);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert_eq!(body(&first)["gen"], 1, "{first}");
    let replay = http(&addr, "/v1/claim", &claim);
    assert_eq!(body(&replay)["replayed"], true, "{replay}");
    let release = http(
        &addr,
        "/v1/release",
        &format!(r#"{{"project":"{project}","env":"pg","uid":7,"gen":1}}"#),
    );
    assert_eq!(body(&release)["released"], true, "{release}");
    let ready = request(&addr, "GET", "/readyz", "");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    let logs = stop_with_sigterm(child);
    assert!(logs.contains("postgres store ready"), "{logs}");
    assert!(
        !logs.contains(PASSWORD),
        "the password reached the log: {logs}"
    );
}

/// Runs the server to its exit; returns its stderr.
fn failed_startup(command: &mut Command) -> String {
    let started = Instant::now();
    let out = command.output().unwrap();
    assert!(!out.status.success(), "the server must refuse to start");
    // Bounded: the startup check gives up (10 s) rather than hang.
    assert!(
        started.elapsed() < Duration::from_mins(1),
        "took {:?}",
        started.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !err.contains(PASSWORD),
        "the password reached the log: {err}"
    );
    err
}

#[test]
fn missing_table_without_create_is_a_clear_startup_error() {
    let db = postgres::shared();
    let err = failed_startup(&mut postgres_command(db.url(), "no_such_table"));
    assert!(err.contains("\"no_such_table\" is missing"), "{err}");
    assert!(err.contains("--create-table"), "{err}");
}

#[test]
fn unreachable_database_is_a_clear_startup_error() {
    let url = format!(
        "postgres://unique:{PASSWORD}@127.0.0.1:{}/unique_test",
        free_port()
    );
    let err = failed_startup(&mut postgres_command(&url, "t"));
    assert!(
        err.contains("postgres table \"t\" at unique@127.0.0.1:"),
        "{err}"
    );
    assert!(
        err.contains("not usable") || err.contains("did not answer"),
        "{err}"
    );
}

#[test]
fn postgres_without_a_url_is_refused() {
    let err = failed_startup(
        Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--store", "postgres"])
            .env_remove("UNIQUE_DATABASE_URL"),
    );
    assert!(err.contains("--database-url"), "{err}");
}

/// One claim as a client saw it.
#[derive(Debug, Clone)]
struct Observed {
    uid: i64,
    claim_id: String,
    generation: i64,
    replayed: bool,
    sent: Instant,
    answered: Instant,
}

const CLIENTS: usize = 6;
const CLAIMS_PER_CLIENT: usize = 25;
const KEYS: i64 = 3;

/// `servers` server processes on one table; [`CLIENTS`] threads racing [`KEYS`] shared keys
/// across them ([`claims_of_client`]). Checks, per key: distinct claim_ids never share a gen,
/// a claim that started after another was answered got a larger gen (real-time order), and
/// the stored gen is at least every gen handed out; and that the servers did race.
fn race_across_servers(servers: usize) {
    let db: Arc<PostgresServer> = postgres::shared();
    let mut processes = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..servers {
        let mut command = postgres_command(db.url(), "scale_out");
        command
            .args(["--max-claim-attempts", "10"])
            .env("RUST_LOG", "warn");
        // Only the first creates the table; the others start once it exists.
        if i == 0 {
            command.arg("--create-table");
        }
        let (addr, child) = serve(command);
        addrs.push(addr);
        processes.push(ChildGuard::new(child, "unique-server"));
    }
    let project = fresh_project("scale");
    let threads: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (addrs, project) = (addrs.clone(), project.clone());
            std::thread::spawn(move || claims_of_client(client, &addrs, &project))
        })
        .collect();
    let observed: Vec<Observed> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert!(
        observed.len() >= CLIENTS * CLAIMS_PER_CLIENT * 9 / 10,
        "most claims succeed: {} of {}",
        observed.len(),
        CLIENTS * CLAIMS_PER_CLIENT
    );
    let winners = assert_one_winner_per_gen_in_real_time_order(&observed);
    for uid in 1..=KEYS {
        let current = body(&http(
            &addrs[0],
            "/v1/current",
            &format!(r#"{{"project":"{project}","env":"race","uid":{uid}}}"#),
        ));
        let stored = current["gen"].as_i64().unwrap();
        let highest = observed
            .iter()
            .filter(|o| o.uid == uid)
            .map(|o| o.generation)
            .max()
            .unwrap_or(0);
        assert!(
            stored >= highest,
            "uid {uid}: stored {stored} < handed out {highest}"
        );
    }
    // How often a server's fenced write lost to another's: the races actually happened.
    let lost_races: u64 = addrs
        .iter()
        .map(|addr| {
            let metrics = request(addr, "GET", "/metrics", "");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix("unique_store_lost_races_total "))
                .map_or(0, |v| v.trim().parse().unwrap())
        })
        .sum();
    println!(
        "{servers} servers: {} successful claims, {winners} distinct (key, gen) winners, \
         {lost_races} lost races",
        observed.len(),
    );
    assert!(
        lost_races > 0,
        "the servers never raced each other: nothing was tested"
    );
    drop(processes);
}

/// One client's claims: in round `r` every client claims uid `1 + r % KEYS` (so they race),
/// each claim with a fresh claim_id, each attempt on the next server, a 503 retried with the
/// same claim_id.
fn claims_of_client(client: usize, addrs: &[String], project: &str) -> Vec<Observed> {
    let mut seen = Vec::new();
    for round in 0..CLAIMS_PER_CLIENT {
        let uid = 1 + i64::try_from(round).unwrap() % KEYS;
        let claim_id = format!("c{client}-{round}");
        let request = format!(
            r#"{{"project":"{project}","env":"race","uid":{uid},"owner":{{"endpoint":"http://127.0.0.1:9/c{client}"}},"claim_id":"{claim_id}"}}"#
        );
        for attempt in 0..5 {
            let addr = &addrs[(client + round + attempt) % addrs.len()];
            let sent = Instant::now();
            let answer = http(addr, "/v1/claim", &request);
            let answered = Instant::now();
            if answer.starts_with("HTTP/1.1 200") {
                let b = body(&answer);
                seen.push(Observed {
                    uid,
                    claim_id: claim_id.clone(),
                    generation: b["gen"].as_i64().unwrap(),
                    replayed: b["replayed"].as_bool().unwrap(),
                    sent,
                    answered,
                });
                break;
            }
            assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        }
    }
    seen
}

/// Distinct claim_ids never share a (key, gen), and a claim sent after another was answered
/// got a larger gen (a replay reports its earlier write, so it is only ever the earlier one).
/// Returns the number of distinct (key, gen) winners.
fn assert_one_winner_per_gen_in_real_time_order(observed: &[Observed]) -> usize {
    let mut winners: HashMap<(i64, i64), &str> = HashMap::new();
    for o in observed {
        if let Some(other) = winners.insert((o.uid, o.generation), &o.claim_id) {
            assert_eq!(
                other, o.claim_id,
                "two claims won gen {} of uid {}",
                o.generation, o.uid
            );
        }
    }
    for a in observed {
        for b in observed {
            if a.uid == b.uid && a.answered < b.sent && !b.replayed {
                assert!(
                    b.generation > a.generation,
                    "real-time order: {b:?} started after {a:?} was answered"
                );
            }
        }
    }
    winners.len()
}

#[test]
fn two_servers_on_one_database_hand_out_each_gen_once() {
    race_across_servers(2);
}

#[test]
fn three_servers_on_one_database_hand_out_each_gen_once() {
    race_across_servers(3);
}
