//! Slow readers of kick streams on the real binary (`docs/design.md#push-kicks`, issue 46): a
//! stream's connection gets a small send buffer (`unique_listener::LONG_LIVED_SEND_BUFFER`),
//! so a node that stops reading fills it, and then the stream's own queue, within a bounded
//! number of kicks; the queue bound (64 lines) or the write stall
//! (`--kick-stream-write-timeout`) then closes the stream and its kicks fail as
//! `connect-error`, while a node that reads is kicked and acks as before.
//!
//! The stalled node opens its stream on a socket with a 4 KiB receive buffer, so what the
//! test bounds is the server's share: without the small send buffer the kernel lets the
//! server's side grow to megabytes (`net.ipv4.tcp_wmem`'s maximum) and [`MAX_KICKS`] kicks
//! do not fill it.

mod common;

use std::process::Command;

use common::{BIN, post_json, start};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use unique_testsupport::ChildGuard;
use unique_testsupport::net::PATIENCE;

/// The most kicks a stalled stream takes before it is closed, in this test: the server's
/// send buffer (32 KiB asked, 64 KiB granted by Linux), hyper's few buffered chunks and the
/// 64 queued lines hold a few hundred kick lines of about 200 bytes; the kernel's megabytes
/// would hold tens of thousands.
const MAX_KICKS: usize = 1024;

/// Takeovers run at once: one wave.
const WAVE: usize = 64;

/// A memory-store server without authentication, with `args` added.
fn server(args: &[&str]) -> (String, ChildGuard) {
    start(
        Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
            .args(args)
            .env("RUST_LOG", "warn"),
    )
}

/// A login of `uid` with `owner`: the claim's answer.
async fn claim(addr: &str, uid: i64, owner: Value, id: &str) -> Value {
    let body =
        json!({"project": "game", "env": "prod", "uid": uid, "owner": owner, "claim_id": id});
    let (status, answer) = post_json(addr, "/v1/claim", "t", &body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Logs `uids` in on `node`, then takes each over at once with an endpoint nobody listens
/// on: the takeovers' answers.
async fn wave(addr: &str, node: &str, uids: std::ops::Range<i64>) -> Vec<Value> {
    let logins: Vec<_> = uids
        .clone()
        .map(|uid| {
            let (addr, node) = (addr.to_owned(), node.to_owned());
            tokio::spawn(async move {
                let first = claim(&addr, uid, json!({"node": node}), &format!("in-{uid}")).await;
                assert_eq!(first["gen"], 1, "{first}");
                claim(
                    &addr,
                    uid,
                    json!({"endpoint": "http://127.0.0.1:1/kick"}),
                    &format!("over-{uid}"),
                )
                .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for login in logins {
        answers.push(
            tokio::time::timeout(PATIENCE, login)
                .await
                .expect("a takeover within the test's patience")
                .unwrap(),
        );
    }
    answers
}

/// Opens the stream of `node` on a socket with a small receive buffer and reads its head
/// (and whatever came with it); reads nothing more unless the caller does.
async fn open_stream(addr: &str, node: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr.parse().unwrap()).await.unwrap();
    let request = format!("GET /v1/nodes/{node}/kicks HTTP/1.1\r\nhost: t\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("the stream's head")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&head));
        head.extend_from_slice(&buf[..n]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    stream
}

/// A node that reads its stream and acks every kick with 200, until aborted; sends the
/// count of kicks acked so far on `acked` after each.
fn reading_node(
    addr: &str,
    mut stream: TcpStream,
    node: &str,
    acked: tokio::sync::watch::Sender<usize>,
) -> tokio::task::JoinHandle<()> {
    let (addr, node) = (addr.to_owned(), node.to_owned());
    tokio::spawn(async move {
        // Each line is one chunk: the pieces between CRLFs are chunk sizes and whole lines.
        let mut text = String::new();
        loop {
            let mut buf = [0u8; 8192];
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the reading node's stream ended");
            text.push_str(std::str::from_utf8(&buf[..n]).unwrap());
            while let Some(at) = text.find("\r\n") {
                let piece: String = text.drain(..at + 2).collect();
                let Ok(line) = serde_json::from_str::<Value>(piece.trim_end()) else {
                    continue;
                };
                if line["type"] != "kick" {
                    continue;
                }
                let path = format!("/v1/nodes/{node}/kicks/ack");
                let ack = json!({"id": line["id"], "status": 200});
                let (status, answer) = post_json(&addr, &path, "t", &ack).await;
                assert_eq!(
                    (status, &answer),
                    (200, &json!({"accepted": true})),
                    "{line}"
                );
                acked.send_modify(|n| *n += 1);
            }
        }
    })
}

/// The server's `/metrics` text.
fn metrics(addr: &str) -> String {
    common::request(addr, "GET", "/metrics", "")
}

/// Waves of takeovers of `node`'s sessions until one's kick fails as `connect-error` (the
/// stream was closed), at most [`MAX_KICKS`] kicks: the kicks sent.
async fn kick_until_closed(addr: &str, node: &str, wave_size: usize, first_uid: i64) -> usize {
    let mut sent = 0;
    let mut uid = first_uid;
    loop {
        assert!(
            sent < MAX_KICKS,
            "{sent} kicks to a node that reads none and its stream is still open:\n{}",
            metrics(addr)
        );
        let size = i64::try_from(wave_size).unwrap();
        let answers = wave(addr, node, uid..uid + size).await;
        uid += size;
        sent += wave_size;
        for answer in &answers {
            assert_eq!(
                answer["kicked"], false,
                "a node that reads nothing: {answer}"
            );
        }
        if answers.iter().any(|a| a["kick_detail"] == "connect-error") {
            return sent;
        }
        for answer in &answers {
            assert_eq!(answer["kick_detail"], "timeout", "{answer}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_reads_nothing_is_closed_within_a_bounded_number_of_kicks() {
    let (addr, _server) = server(&["--kick-timeout", "300ms"]);
    let addr = &addr;
    let _stalled = open_stream(addr, "stalled").await;
    let (acked, mut acks) = tokio::sync::watch::channel(0);
    let reader = reading_node(addr, open_stream(addr, "reading").await, "reading", acked);
    assert!(metrics(addr).contains("unique_kick_streams_open 2"));

    let mut reading_uid = 1_000_000;
    let mut kicks = 0;
    loop {
        // The stalled node's wave, and alongside it a takeover from the reading node.
        let stalled = kick_until_one_wave(addr, kicks);
        let reading = async {
            let answers = wave(addr, "reading", reading_uid..reading_uid + 1).await;
            reading_uid += 1;
            answers
        };
        let (closed, reading) = tokio::join!(stalled, reading);
        assert_eq!(
            (&reading[0]["kicked"], &reading[0]["kick_detail"]),
            (&json!(true), &Value::Null),
            "the reading node is kicked and acks: {}",
            reading[0]
        );
        kicks += WAVE;
        if closed {
            break;
        }
        assert!(
            kicks < MAX_KICKS,
            "{kicks} kicks to a node that reads none and its stream is still open:\n{}",
            metrics(addr)
        );
    }
    let text = metrics(addr);
    assert!(text.contains("unique_kick_streams_open 1"), "{text}");
    assert!(
        text.contains(r#"unique_kick_streams_slow_total{bound="queue"} 1"#),
        "{text}"
    );
    // After it, the reading node is still kicked and acks.
    let after = wave(addr, "reading", 2_000_000..2_000_008).await;
    for answer in &after {
        assert_eq!(answer["kicked"], true, "{answer}");
    }
    tokio::time::timeout(PATIENCE, acks.wait_for(|n| *n >= after.len()))
        .await
        .expect("acks")
        .unwrap();
    reader.abort();
    eprintln!("the stalled stream was closed within {kicks} kicks");
}

/// One wave of [`WAVE`] takeovers of the stalled node's sessions (uids after `kicks`): true
/// when the stream was found closed (a kick failed as `connect-error`).
async fn kick_until_one_wave(addr: &str, kicks: usize) -> bool {
    let first = i64::try_from(kicks).unwrap() + 1;
    let answers = wave(addr, "stalled", first..first + i64::try_from(WAVE).unwrap()).await;
    for answer in &answers {
        assert_eq!(
            answer["kicked"], false,
            "a node that reads nothing: {answer}"
        );
    }
    answers.iter().any(|a| a["kick_detail"] == "connect-error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_stall_closes_a_stream_whose_reader_stopped() {
    // Waves of 16 kicks, each wave as long as the kick timeout (600 ms, longer than the 400 ms
    // stall): once the send buffer is full, the next wave finds its oldest queued line stalled
    // with at most 16 lines queued, so the 64-line queue bound cannot be the one that closes.
    let (addr, _server) = server(&[
        "--kick-timeout",
        "600ms",
        "--kick-stream-write-timeout",
        "400ms",
    ]);
    let addr = &addr;
    let _stopped = open_stream(addr, "stopped").await;
    let sent = kick_until_closed(addr, "stopped", 16, 1).await;
    let text = metrics(addr);
    assert!(text.contains("unique_kick_streams_open 0"), "{text}");
    assert!(
        text.contains(r#"unique_kick_streams_slow_total{bound="write-stall"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"unique_kick_streams_slow_total{bound="queue"} 0"#),
        "{text}"
    );
    eprintln!("the stopped stream was closed by the write stall within {sent} kicks");
}
