//! `POST /v1/logout` on the real binary, default store (fjall) and a tokens file holding an
//! admin token and a plain one: only the admin token logs the user out; the record is
//! tombstoned on disk, and the session's node gets one kick, signed as every kick of the
//! server is, naming the reason `admin`, the operator's message and the gen after the
//! session's.

mod common;

use std::process::{Command, Stdio};

use common::{BIN, announced_addr, post_json as post, write_secret};
use serde_json::{Value, json};
use unique_kick_contract::{Behaviour, Peer};
use unique_kick_signature::{DEFAULT_WINDOW, HEADER, SigningKeys};
use unique_testsupport::ChildGuard;

const ADMIN: &str = "logout-test-admin-token-0123";
const PLAIN: &str = "logout-test-plain-token-0123";
const SIGNING_KEY: &str = "logout-test-signing-key-0123456789abcdef";

fn key() -> Value {
    json!({"project": "game", "env": "prod", "uid": 7})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_token_logs_a_user_out_and_the_node_gets_a_signed_admin_kick() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    write_secret(
        &tokens,
        &format!(
            r#"{{"tokens": [
                {{"name": "game-backend", "token": "{PLAIN}", "projects": ["game"]}},
                {{"name": "ops", "token": "{ADMIN}", "projects": ["game"], "roles": ["admin"]}}
            ]}}"#
        ),
    );
    let keys = dir.path().join("kick.keys");
    write_secret(&keys, &format!("{SIGNING_KEY}\n"));
    let fjall = dir.path().join("unique.fjall");
    // No --store: the default, fjall.
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--fjall-dir"])
        .arg(&fjall)
        .arg("--auth-tokens")
        .arg(&tokens)
        .arg("--kick-signing-keys")
        .arg(&keys)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    let _server = ChildGuard::new(child, "unique-server");
    let node = Peer::start(Behaviour::status(200)).await;
    let claim = json!({"project": "game", "env": "prod", "uid": 7,
                       "owner": {"endpoint": node.http_url("/kick")}, "claim_id": "login-1"});
    let (status, claimed) = post(&addr, "/v1/claim", PLAIN, &claim).await;
    assert_eq!((status, &claimed["gen"]), (200, &json!(1)), "{claimed}");
    let mut logout = key();
    logout["reason"] = json!("chargeback under review");

    // The plain token covers the key but holds no role: 403, the session stays online.
    let (status, refused) = post(&addr, "/v1/logout", PLAIN, &logout).await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["error"], "forbidden");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("game-backend"),
        "{refused}"
    );
    let (_, view) = post(&addr, "/v1/current", PLAIN, &key()).await;
    assert_eq!(view["owner"]["endpoint"], json!(node.http_url("/kick")));
    assert!(node.requests().is_empty(), "nobody kicked");

    // The admin token: released, kicked, tombstoned with the gen kept.
    let (status, done) = post(&addr, "/v1/logout", ADMIN, &logout).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        done,
        json!({"released": true, "gen": 1, "kicked": true, "kick_detail": null})
    );
    let (_, view) = post(&addr, "/v1/current", PLAIN, &key()).await;
    assert_eq!(view, json!({"gen": 1, "owner": null, "exists": true}));
    let kicks = node.requests();
    assert_eq!(kicks.len(), 1);
    let kick: Value = serde_json::from_slice(&kicks[0].body).unwrap();
    assert_eq!(
        kick,
        json!({"project": "game", "env": "prod", "uid": 7, "gen": 2,
               "reason": "admin", "message": "chargeback under review"})
    );
    let signed_by = SigningKeys::new([SIGNING_KEY]).unwrap();
    let now = std::time::SystemTime::now();
    assert_eq!(
        signed_by.verify(kicks[0].header(HEADER), &kicks[0].body, now, DEFAULT_WINDOW),
        Ok(()),
        "signed like every kick"
    );

    // Again: nothing online, nothing written or kicked; the next login gets gen 2.
    let (status, again) = post(&addr, "/v1/logout", ADMIN, &key()).await;
    assert_eq!(
        (status, again),
        (
            200,
            json!({"released": false, "gen": 1, "kicked": false, "kick_detail": null})
        )
    );
    assert_eq!(node.requests().len(), 1);
    let relogin = json!({"project": "game", "env": "prod", "uid": 7,
                         "owner": {"endpoint": "http://127.0.0.1:1/other"}, "claim_id": "login-2"});
    let (_, claimed) = post(&addr, "/v1/claim", PLAIN, &relogin).await;
    assert_eq!(claimed["gen"], 2, "{claimed}");
}
