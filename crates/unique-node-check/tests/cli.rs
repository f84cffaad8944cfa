//! The `unique-node-check` binary against receivers started here: exit 0 and a PASS line per
//! clause for ours, signed; exit 1 naming each failed clause for one that accepts unsigned
//! kicks; exit 2 for a usage or key file error.

mod common;

use std::process::Output;

use common::{KEY, handler, keys, ours, url};
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
    assert_eq!(
        stdout.lines().last(),
        Some(
            "6 of 14 clauses failed: unsigned, forged, tampered-body, stale-timestamp, \
             future-timestamp, malformed-signature"
        ),
        "{stdout}"
    );
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
