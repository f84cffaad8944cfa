//! `unique node-check` against real kick receivers (`unique-kickrecv` on loopback), with a
//! key file written by `unique keys new`: the output and exit statuses of the
//! `unique-node-check` binary (0 every clause passed, 1 a clause failed, 2 a key file error).

mod common;

use common::unique;
use unique_client::{KickHandler, KickOptions};
use unique_core::Key;
use unique_kick_signature::SigningKeys;
use unique_kickrecv::{KickReceiver, KickService};
use unique_node_check::Clause;

const NOWHERE: &str = "http://127.0.0.1:1";

async fn receiver(keys: Option<SigningKeys>) -> KickReceiver {
    let handler = KickHandler::new(|_: &Key| None, |_: Key, _| async {}, KickOptions::default());
    let mut service = KickService::new(handler);
    if let Some(keys) = keys {
        service = service.signing_keys(keys);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    KickReceiver::builder(service).spawn(listener).unwrap()
}

/// A key file in `dir` written by `unique keys new`, and its keys.
async fn key_file(dir: &std::path::Path) -> (std::path::PathBuf, SigningKeys) {
    let file = dir.join("kick.keys");
    unique(
        NOWHERE,
        None,
        &["keys", "new", "--file", file.to_str().unwrap()],
        None,
    )
    .await
    .status(0);
    let keys = SigningKeys::from_file(&file).unwrap();
    (file, keys)
}

#[tokio::test]
async fn node_check_passes_a_signed_receiver_and_names_what_an_unsigned_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (file, keys) = key_file(dir.path()).await;
    let path = file.to_str().unwrap();

    let signed = receiver(Some(keys)).await;
    let url = format!("http://{}/kick", signed.local_addr());
    let run = unique(
        NOWHERE,
        None,
        &[
            "node-check",
            "--url",
            &url,
            "--signing-keys",
            path,
            "--timeout",
            "5",
        ],
        None,
    )
    .await;
    run.status(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), Clause::ALL.len() + 1, "{run:#?}");
    for (line, clause) in lines.iter().zip(Clause::ALL) {
        assert!(line.starts_with(&format!("PASS {clause} ")), "{line}");
    }
    assert_eq!(lines[Clause::ALL.len()], "all 14 clauses passed");
    let run = unique(
        NOWHERE,
        None,
        &[
            "node-check",
            "--url",
            &url,
            "--signing-keys",
            path,
            "--json",
        ],
        None,
    )
    .await;
    let report = run.status(0).json();
    assert_eq!(report["passed"], true);
    assert_eq!(report["failed"], serde_json::json!([]));
    assert_eq!(
        report["clauses"].as_array().unwrap().len(),
        Clause::ALL.len()
    );
    assert_eq!(report["clauses"][0]["clause"], "signed-kick");
    assert_eq!(report["clauses"][0]["answers"][0]["status"], 200);
    signed.close().await;

    let unsigned = receiver(None).await;
    let url = format!("http://{}/kick", unsigned.local_addr());
    let run = unique(
        NOWHERE,
        None,
        &["node-check", "--url", &url, "--signing-keys", path],
        None,
    )
    .await;
    run.status(1);
    assert!(run.stdout.contains("FAIL unsigned "), "{run:#?}");
    assert!(
        run.stdout.trim_end().ends_with(
            "6 of 14 clauses failed: unsigned, forged, tampered-body, stale-timestamp, \
             future-timestamp, malformed-signature"
        ),
        "{run:#?}"
    );
    let run = unique(
        NOWHERE,
        None,
        &[
            "node-check",
            "--url",
            &url,
            "--signing-keys",
            path,
            "--json",
        ],
        None,
    )
    .await;
    let report = run.status(1).json();
    assert_eq!(report["passed"], false);
    assert_eq!(report["failed"][0], "unsigned");
    unsigned.close().await;
}

#[tokio::test]
async fn node_check_refuses_a_missing_key_file_and_a_https_url_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.keys");
    let run = unique(
        NOWHERE,
        None,
        &[
            "node-check",
            "--url",
            "http://127.0.0.1:9/kick",
            "--signing-keys",
            missing.to_str().unwrap(),
        ],
        None,
    )
    .await;
    run.status(2);
    assert!(
        run.stderr.starts_with("unique: --signing-keys: "),
        "{run:#?}"
    );

    let file = dir.path().join("kick.keys");
    let path = file.to_str().unwrap();
    unique(NOWHERE, None, &["keys", "new", "--file", path], None)
        .await
        .status(0);
    let run = unique(
        NOWHERE,
        None,
        &[
            "node-check",
            "--url",
            "https://127.0.0.1:9/kick",
            "--signing-keys",
            path,
        ],
        None,
    )
    .await;
    run.status(2);
    assert!(run.stderr.starts_with("unique: --url: "), "{run:#?}");
}

/// A Rust push node (no listener; its kicks come over the stream it opens at `http://ADDR`)
/// that verifies kicks with `keys`, or accepts every kick without.
fn push_node(
    addr: &str,
    keys: Option<SigningKeys>,
) -> (
    unique_client::Node<unique_client_http::HttpTransport>,
    unique_client::NodeEvents,
) {
    let options = unique_client::PushOptions::new("cli-push-node").unwrap();
    let options = match keys {
        Some(keys) => options.signing_keys(keys),
        None => options,
    };
    let transport = unique_client_http::HttpTransport::new(&format!("http://{addr}")).unwrap();
    unique_client::Node::builder(transport, unique_core::Owner::new("", "cli-push-node", ""))
        .push(options)
        .build()
}

#[tokio::test]
async fn node_check_push_plays_the_server_of_a_push_node() {
    let dir = tempfile::tempdir().unwrap();
    let (file, keys) = key_file(dir.path()).await;
    let path = file.to_str().unwrap();

    // The node is up first and retries until the check listens.
    let addr = format!("127.0.0.1:{}", unique_testsupport::free_port());
    let (node, _events) = push_node(&addr, Some(keys));
    let args = [
        "node-check",
        "--push",
        "--listen",
        &addr,
        "--node",
        "cli-push-node",
        "--signing-keys",
        path,
    ];
    let run = unique(NOWHERE, None, &[&args[..], &["--json"]].concat(), None).await;
    let report = run.status(0).json();
    assert_eq!(report["passed"], true, "{run:#?}");
    let clauses: Vec<&str> = report["clauses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["clause"].as_str().unwrap())
        .collect();
    let pushed: Vec<&str> = Clause::PUSHED.iter().map(|c| c.name()).collect();
    assert_eq!(clauses, pushed);
    assert!(
        run.stderr
            .starts_with(&format!("unique: listening on http://{addr}; ")),
        "{run:#?}"
    );
    node.shutdown().await;

    let (node, _events) = push_node(&addr, None);
    let run = unique(NOWHERE, None, &args, None).await;
    run.status(1);
    assert!(
        run.stdout.trim_end().ends_with(
            "6 of 10 clauses failed: unsigned, forged, tampered-body, stale-timestamp, \
             future-timestamp, malformed-signature"
        ),
        "{run:#?}"
    );
    node.shutdown().await;
}
