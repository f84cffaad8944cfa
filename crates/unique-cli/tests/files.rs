//! `tokens new` and `keys new`: what they print, and the owner-only files they write, which
//! the server's own loaders accept (`Tokens::from_file`, `SigningKeys::from_file`): a server
//! started with the tokens file written here lets its admin token log a user out and refuses
//! the other token's logout. Files open to others, duplicate names and bad files are refused
//! and left as they were.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{CONFIRMING, Server, unique};
use serde_json::{Value, json};
use unique_arbiter_http::{ServeOptions, Tokens};
use unique_core::Key;
use unique_kick_signature::SigningKeys;

const NOWHERE: &str = "http://127.0.0.1:1";

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn is_token(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[tokio::test]
async fn tokens_new_prints_a_fresh_token_and_its_entry() {
    let run = unique(
        NOWHERE,
        None,
        &[
            "tokens",
            "new",
            "--name",
            "ops",
            "--project",
            "game",
            "--admin",
        ],
        None,
    )
    .await;
    run.status(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{run:#?}");
    let token = lines[0].strip_prefix("token: ").unwrap();
    assert!(is_token(token), "{token}");
    let entry: Value = serde_json::from_str(lines[1].strip_prefix("entry: ").unwrap()).unwrap();
    assert_eq!(
        entry,
        json!({"name": "ops", "token": token, "projects": ["game"], "roles": ["admin"]})
    );

    let again = unique(
        NOWHERE,
        None,
        &[
            "tokens",
            "new",
            "--name",
            "node",
            "--project",
            "game",
            "--env",
            "prod",
            "--env",
            "staging",
            "--json",
        ],
        None,
    )
    .await;
    let answer = again.status(0).json();
    let other = answer["token"].as_str().unwrap();
    assert!(is_token(other) && other != token, "{answer}");
    assert_eq!(
        answer,
        json!({"token": other, "entry": {"name": "node", "token": other,
               "projects": ["game"], "envs": ["prod", "staging"]}})
    );
}

#[tokio::test]
async fn a_tokens_file_written_by_tokens_new_is_owner_only_and_the_server_accepts_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.json");
    let new = |name: &'static str, admin: bool| {
        let mut args = vec!["tokens", "new", "--name", name, "--project", "game"];
        if admin {
            args.push("--admin");
        }
        args.extend(["--file", "tokens.json", "--json"]);
        args
    };
    let ops = unique(NOWHERE, None, &new("ops", true), Some(dir.path())).await;
    let ops = ops.status(0).json();
    assert_eq!(ops["file"], "tokens.json");
    assert_eq!(mode(&file), 0o600);
    let node = unique(NOWHERE, None, &new("node", false), Some(dir.path())).await;
    let node = node.status(0).json();
    assert_eq!(mode(&file), 0o600);

    let text = std::fs::read_to_string(&file).unwrap();
    let written: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(written, json!({"tokens": [ops["entry"], node["entry"]]}));

    // What the server does with --auth-tokens: its loader, then the tokens in force.
    let tokens = Tokens::from_file(&file).unwrap();
    assert_eq!(tokens.len(), 2);
    let server = Server::start_with(Some(tokens), ServeOptions::default()).await;
    server
        .login(&Key::new("game", "prod", 42), CONFIRMING)
        .await;
    let logout = [
        "logout",
        "--project",
        "game",
        "--env",
        "prod",
        "--uid",
        "42",
        "--reason",
        "r",
    ];
    let node_token = node["token"].as_str().unwrap();
    let refused = unique(&server.url, Some(node_token), &logout, None).await;
    refused.status(3);
    assert!(!refused.stderr.contains(node_token), "{refused:#?}");
    let ops_token = ops["token"].as_str().unwrap();
    let done = unique(&server.url, Some(ops_token), &logout, None).await;
    assert_eq!(
        done.status(0).stdout,
        "logged out gen 1; its node confirmed the kick\n"
    );
}

#[tokio::test]
async fn tokens_new_refuses_a_second_name_and_a_file_open_to_others() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.json");
    let path = file.to_str().unwrap();
    let new = [
        "tokens",
        "new",
        "--name",
        "ops",
        "--project",
        "*",
        "--file",
        path,
    ];
    let run = unique(NOWHERE, None, &new, None).await;
    run.status(0);
    assert!(run.stderr.contains("created "), "{run:#?}");
    let before = std::fs::read_to_string(&file).unwrap();

    let run = unique(NOWHERE, None, &new, None).await;
    run.status(2);
    assert!(run.stdout.is_empty(), "{run:#?}");
    assert!(
        run.stderr.contains("second token named \"ops\""),
        "{run:#?}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let other = [
        "tokens",
        "new",
        "--name",
        "other",
        "--project",
        "game",
        "--file",
        path,
    ];
    let run = unique(NOWHERE, None, &other, None).await;
    run.status(2);
    assert!(run.stdout.is_empty(), "{run:#?}");
    assert!(
        run.stderr.contains("mode 0644") && run.stderr.contains("chmod 600"),
        "{run:#?}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    assert_eq!(
        mode(&file),
        0o644,
        "nothing is fixed behind the operator's back"
    );
}

#[tokio::test]
async fn keys_new_prints_a_key_or_appends_one_that_verifies_while_the_first_signs() {
    let run = unique(NOWHERE, None, &["keys", "new"], None).await;
    let key = run.status(0).stdout.trim().to_owned();
    assert!(is_token(&key), "{run:#?}");
    let id = SigningKeys::parse(&key).unwrap().signing_id().to_string();
    assert!(run.stderr.contains(&id), "{run:#?}");
    let run = unique(NOWHERE, None, &["keys", "new", "--json"], None).await;
    let answer = run.status(0).json();
    let key = answer["key"].as_str().unwrap();
    assert_eq!(
        answer["id"],
        SigningKeys::parse(key).unwrap().signing_id().to_string()
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kick.keys");
    let path = file.to_str().unwrap();
    let first = unique(NOWHERE, None, &["keys", "new", "--file", path], None).await;
    first.status(0);
    let first_id = first.stdout.trim().to_owned();
    assert!(first.stderr.contains("it signs and verifies"), "{first:#?}");
    assert_eq!(mode(&file), 0o600);
    let first_key = std::fs::read_to_string(&file).unwrap();
    assert!(
        !first.stdout.contains(first_key.trim()),
        "a written key is not printed"
    );

    let second = unique(
        NOWHERE,
        None,
        &["keys", "new", "--file", path, "--json"],
        None,
    )
    .await;
    let second = second.status(0).json();
    assert_eq!(second["keys"], 2);
    assert_eq!(second["signing_id"], first_id.as_str());
    assert_eq!(mode(&file), 0o600);

    // What the server and the receivers load.
    let loaded = SigningKeys::from_file(&file).unwrap();
    let ids: Vec<String> = loaded.ids().iter().map(ToString::to_string).collect();
    assert_eq!(ids, [first_id.as_str(), second["id"].as_str().unwrap()]);
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .starts_with(&first_key)
    );

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = std::fs::read_to_string(&file).unwrap();
    let refused = unique(NOWHERE, None, &["keys", "new", "--file", path], None).await;
    refused.status(2);
    assert!(refused.stderr.contains("mode 0644"), "{refused:#?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
}
