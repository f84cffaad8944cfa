//! `--kick-signing-keys`: the binary signs the kicks it sends with the first key of the
//! file, and refuses a bad key file at startup without echoing a key.

mod common;

use std::process::{Command, Stdio};

use common::{BIN, announced_addr, write_secret};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use unique_kick_contract::{Behaviour, Peer};
use unique_kick_signature::{DEFAULT_WINDOW, HEADER, Rejection, SigningKeys};
use unique_testsupport::ChildGuard;

const NEW: &str = "server-new-key-0123456789abcdef01234567";
const OLD: &str = "server-old-key-0123456789abcdef01234567";

/// One claim of uid 7 by `endpoint`; returns the raw answer.
async fn claim(addr: &str, endpoint: &str, claim_id: &str) -> String {
    let body = format!(
        r#"{{"project":"p","env":"e","uid":7,"owner":{{"endpoint":"{endpoint}"}},"claim_id":"{claim_id}"}}"#
    );
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let raw = format!(
        "POST /v1/claim HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kicks_are_signed_with_the_first_key_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kick.keys");
    write_secret(
        &file,
        &format!("# signs\n{NEW}\n\n# still accepted\n{OLD}\n"),
    );
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--store", "memory"])
        .arg("--kick-signing-keys")
        .arg(&file)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    let _server = ChildGuard::new(child, "unique-server");

    let old_node = Peer::start(Behaviour::status(200)).await;
    let first = claim(&addr, &old_node.http_url("/kick"), "login-1").await;
    assert!(first.contains(r#""gen":1"#), "{first}");
    let second = claim(&addr, "http://127.0.0.1:1/new-node", "login-2").await;
    assert!(second.contains(r#""kicked":true"#), "{second}");

    let kicks = old_node.requests();
    assert_eq!(kicks.len(), 1);
    let (header, body) = (kicks[0].header(HEADER), &kicks[0].body);
    let now = std::time::SystemTime::now();
    let by_new = SigningKeys::new([NEW]).unwrap();
    assert_eq!(by_new.verify(header, body, now, DEFAULT_WINDOW), Ok(()));
    let by_old = SigningKeys::new([OLD]).unwrap();
    assert_eq!(
        by_old.verify(header, body, now, DEFAULT_WINDOW),
        Err(Rejection::BadSignature),
        "signed with the first key only"
    );
}

#[test]
fn a_bad_key_file_stops_the_server_with_a_message_and_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.keys");
    write_secret(&short, &format!("{NEW}\ntoo-short-secret\n"));
    let empty = dir.path().join("empty.keys");
    write_secret(&empty, "# nothing yet\n");
    let missing = dir.path().join("missing.keys");
    for (file, needle) in [
        (&short, "signing key on line 2 is shorter than 32 bytes"),
        (&empty, "no signing key given"),
        (&missing, "cannot read signing keys from"),
    ] {
        let out = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
            .env("UNIQUE_KICK_SIGNING_KEYS", file)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{needle}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--kick-signing-keys"), "{err}");
        assert!(err.contains(needle), "{err}");
        assert!(
            !err.contains("too-short-secret") && !err.contains(NEW),
            "{err}"
        );
    }
}
