//! The `unique-node-check` binary against receivers started here: exit 0 and a PASS line per
//! clause for ours, signed; exit 1 naming each failed clause for one that accepts unsigned
//! kicks; exit 2 for a usage or key file error. The same with `--push` against Rust push
//! nodes.

mod common;

use std::process::{Output, Stdio};

use common::{KEY, PATIENCE, handler, keys, ours, push_node, signature_clauses_failed, url};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use unique_kickrecv::KickService;
use unique_node_check::Clause;

async fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_unique-node-check"))
        .args(args)
        .output()
        .await
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn the_binary_passes_a_signed_receiver_and_names_what_an_unsigned_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("kick.keys");
    std::fs::write(&key_file, format!("# the arbiter's key\n{KEY}\n")).unwrap();
    let key_file = key_file.to_str().unwrap();

    let signed = ours(KickService::new(handler()).signing_keys(keys())).await;
    let output = run(&[
        "--url",
        &url(signed.local_addr()),
        "--signing-keys",
        key_file,
    ])
    .await;
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        text(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), Clause::ALL.len() + 1, "{stdout}");
    for (line, clause) in lines.iter().zip(Clause::ALL) {
        assert!(line.starts_with(&format!("PASS {clause} ")), "{line}");
    }
    assert_eq!(lines[Clause::ALL.len()], "all 14 clauses passed");
    signed.close().await;

    let unsigned = ours(KickService::new(handler())).await;
    let output = run(&[
        "--url",
        &url(unsigned.local_addr()),
        "--signing-keys",
        key_file,
        "--timeout=3",
    ])
    .await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    for failed in [
        "unsigned",
        "forged",
        "tampered-body",
        "stale-timestamp",
        "future-timestamp",
        "malformed-signature",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("FAIL {failed} "))),
            "{failed}: {stdout}"
        );
    }
    let summary = signature_clauses_failed(Clause::ALL.len());
    assert_eq!(stdout.lines().last(), Some(summary.as_str()), "{stdout}");
    unsigned.close().await;
}

#[tokio::test]
async fn usage_and_key_file_errors_exit_2() {
    let output = run(&["--url", "http://127.0.0.1:9/kick"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).starts_with("unique-node-check: --signing-keys is required"),
        "{}",
        text(&output.stderr)
    );

    let output = run(&[
        "--url",
        "http://127.0.0.1:9/kick",
        "--signing-keys",
        "/nonexistent/kick.keys",
    ])
    .await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).starts_with("unique-node-check: --signing-keys: cannot read signing keys from /nonexistent/kick.keys"),
        "{}",
        text(&output.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("kick.keys");
    std::fs::write(&key_file, KEY).unwrap();
    let output = run(&[
        "--url",
        "https://127.0.0.1:9/kick",
        "--signing-keys",
        key_file.to_str().unwrap(),
    ])
    .await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr)
            .starts_with("unique-node-check: --url: only http URLs are checked (got https)"),
        "{}",
        text(&output.stderr)
    );

    let output = run(&["--help"]).await;
    assert_eq!(output.status.code(), Some(0));
    assert!(
        text(&output.stdout).starts_with("usage: unique-node-check --url URL --signing-keys FILE")
    );
}

/// Runs the binary in push mode on a free loopback port, with a Rust push node (verifying
/// with `keys`) pointed at the address it prints: its output.
async fn run_push(key_file: &str, keys: Option<unique_node_check::SigningKeys>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_unique-node-check"))
        .args([
            "--push",
            "--listen",
            "127.0.0.1:0",
            "--signing-keys",
            key_file,
        ])
        .args(["--node", "cli-node", "--wait=30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary runs");
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(PATIENCE, stderr.next_line())
        .await
        .expect("a first line on stderr")
        .unwrap()
        .expect("a first line on stderr");
    let addr = first
        .strip_prefix("unique-node-check: listening on http://")
        .and_then(|rest| rest.split_once(';'))
        .map_or_else(|| panic!("{first}"), |(addr, _)| addr.parse().unwrap());
    let (node, _events) = push_node(addr, "cli-node", keys);
    let output = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("the run ends")
        .unwrap();
    node.shutdown().await;
    output
}

#[tokio::test]
async fn the_binary_in_push_mode_passes_a_node_with_keys_and_names_what_one_without_fails() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("kick.keys");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let key_file = key_file.to_str().unwrap();

    let output = run_push(key_file, Some(keys())).await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), Clause::PUSHED.len() + 1, "{stdout}");
    for (line, clause) in lines.iter().zip(Clause::PUSHED) {
        assert!(line.starts_with(&format!("PASS {clause} ")), "{line}");
    }
    assert_eq!(lines[Clause::PUSHED.len()], "all 10 clauses passed");

    let output = run_push(key_file, None).await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let summary = signature_clauses_failed(Clause::PUSHED.len());
    assert_eq!(stdout.lines().last(), Some(summary.as_str()), "{stdout}");

    // Usage errors of push mode exit 2.
    for (args, error) in [
        (
            &["--push", "--signing-keys", key_file][..],
            "unique-node-check: --push needs --listen ADDR",
        ),
        (
            &[
                "--push",
                "--listen",
                "127.0.0.1:0",
                "--signing-keys",
                key_file,
                "--node",
                "a/b",
            ],
            "unique-node-check: --node: ",
        ),
        (
            &["--push", "--listen", "nowhere", "--signing-keys", key_file],
            "unique-node-check: --listen nowhere: ",
        ),
    ] {
        let output = run(args).await;
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            text(&output.stderr).starts_with(error),
            "{}",
            text(&output.stderr)
        );
    }
}
