//! The WebSocket game server (`unique_axum_examples::game`) against the real `unique-server`
//! binary: real WebSocket clients read the close frame their socket ends with, on a login
//! elsewhere, a newer login on the same node, an admin logout and a drain.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use futures::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};
use unique_axum_examples::KICK_PATH;
use unique_axum_examples::game::{GAME, game_router};
use unique_sessions::node::{EndNotice, HttpTransport, KickService, Node, Transport};
use unique_sessions::{Key, Owner};
use unique_testsupport::ChildGuard;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The bound on anything that must happen.
const WAIT: Duration = Duration::from_secs(10);

/// The `unique-server` binary cargo built beside this test (`cargo test --workspace` and
/// `cargo xtask ci` build it; alone, `cargo build -p unique-server` first).
fn server_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let bin = dir.join(format!("unique-server{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p unique-server`",
        bin.display()
    );
    bin
}

/// The real server on the memory store and a free loopback port; its base URL.
fn unique_server() -> (String, ChildGuard) {
    let mut child = Command::new(server_binary())
        .args(["--listen", "127.0.0.1:0", "--store", "memory"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start unique-server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("unique-server listening on ")
        .unwrap_or_else(|| panic!("unique-server did not start: {line:?}"))
        .to_owned();
    (url, ChildGuard::new(child, "unique-server"))
}

/// One game server: a node over HTTP to `server`, its router on a loopback port.
async fn game_server(server: &str, name: &str) -> (Node<HttpTransport>, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let owner = Owner::new("eu", name, format!("http://{addr}{KICK_PATH}"));
    let (node, _events) = Node::builder(HttpTransport::new(server).unwrap(), owner).build();
    let kicks = KickService::new(node.kick_handler().clone());
    common::serve(listener, game_router(node.clone(), kicks));
    (node, addr.to_string())
}

/// A player connects as `uid` and reads the greeting: the session's gen.
async fn connect(game: &str, uid: i64) -> (Socket, i64) {
    let (mut socket, _) = connect_async(format!("ws://{game}/play/{uid}"))
        .await
        .expect("the upgrade");
    let hello = next(&mut socket).await;
    let Message::Text(hello) = hello else {
        panic!("expected the greeting, got {hello:?}");
    };
    let hello: serde_json::Value = serde_json::from_str(&hello).unwrap();
    (socket, hello["gen"].as_i64().unwrap())
}

async fn next(socket: &mut Socket) -> Message {
    timeout(WAIT, socket.next())
        .await
        .expect("a message within the bound")
        .expect("the socket is open")
        .expect("a well-formed message")
}

/// Reads the close frame: its code and its reason, parsed as the notice.
async fn closed(socket: &mut Socket) -> (u16, EndNotice) {
    let message = next(socket).await;
    let Message::Close(Some(frame)) = message else {
        panic!("expected a close frame, got {message:?}");
    };
    let notice = serde_json::from_str(frame.reason.as_str())
        .unwrap_or_else(|e| panic!("{e}: {:?}", frame.reason.as_str()));
    (u16::from(frame.code), notice)
}

fn notice(reason: &str, message: Option<&str>, generation: i64, reconnect: bool) -> EndNotice {
    serde_json::from_value(serde_json::json!({
        "reason": reason, "message": message, "gen": generation, "reconnect": reconnect,
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_players_socket_closes_with_why_on_takeover_admin_logout_and_drain() {
    let (server, _server) = unique_server();
    let (a, on_a) = game_server(&server, "a").await;
    let (_b, on_b) = game_server(&server, "b").await;

    // A login elsewhere: the phone's socket on A closes 4001, do not reconnect.
    let (mut phone, generation) = connect(&on_a, 1).await;
    let (mut tablet, newer) = connect(&on_b, 1).await;
    assert_eq!((generation, newer), (1, 2));
    assert_eq!(
        closed(&mut phone).await,
        (4001, notice("login-elsewhere", None, 1, false))
    );

    // An operator logs the player out: the tablet's socket closes 4002 with the reason.
    let logout = format!(
        r#"{{"project":"{}","env":"{}","uid":1,"reason":"chargeback under review"}}"#,
        GAME.0, GAME.1
    );
    let (status, body) = common::post(&server, "/v1/logout", &logout).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        closed(&mut tablet).await,
        (
            4002,
            notice("admin", Some("chargeback under review"), 2, false)
        )
    );

    // The same player again on the same node: the older socket closes 4003.
    let (mut first, generation) = connect(&on_a, 2).await;
    let (mut second, newer) = connect(&on_a, 2).await;
    assert_eq!(
        closed(&mut first).await,
        (4003, notice("replaced", None, generation, false))
    );

    // The deploy: A drains. The socket closes 4100, reconnect; the key is released; a new
    // connection to A is refused, and the player lands on B.
    let drained = a.drain(Duration::from_secs(2)).await;
    assert_eq!((drained.released, drained.unreleased), (1, 0));
    assert_eq!(
        closed(&mut second).await,
        (4100, notice("node-draining", None, newer, true))
    );
    let key = Key::new(GAME.0, GAME.1, 2);
    let record = a.transport().current(&key).await.unwrap();
    assert!(record.exists && record.owner.is_none(), "{record:?}");
    let refused = connect_async(format!("ws://{on_a}/play/2")).await;
    let Err(tokio_tungstenite::tungstenite::Error::Http(answer)) = refused else {
        panic!("expected the upgrade refused, got {refused:?}");
    };
    assert_eq!(answer.status(), 503);
    let (_elsewhere, generation) = connect(&on_b, 2).await;
    assert_eq!(generation, newer + 1);
}
