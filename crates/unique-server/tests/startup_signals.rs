//! A SIGTERM while the store is still opening (here a "PostgreSQL" that accepts the
//! connection and never answers) ends the real binary at once, cleanly: exit status 0 and a
//! log line saying it stopped before serving, instead of SIGTERM's default death
//! (`docs/design.md#caller-authentication`, startup and signals).

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::postgres_command;

/// Accepts connections and never answers them: a database that went silent. Each accepted
/// connection is reported on the returned channel.
fn silent_database() -> (String, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "postgres://unique@{}/unique?sslmode=disable",
        listener.local_addr().unwrap()
    );
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    (url, rx)
}

#[test]
fn a_sigterm_while_the_store_opens_ends_startup_cleanly() {
    let (url, accepted) = silent_database();
    let mut child = postgres_command(&url, "sessions")
        .args(["--store-connect-timeout", "10m"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The store is opening: the server's connection reached the silent database.
    accepted
        .recv_timeout(Duration::from_mins(1))
        .expect("the server never connected to the database");
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // A hang guard, not a timing assertion: the 10 min connect timeout is far away.
    let give_up = Instant::now() + Duration::from_mins(2);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > give_up {
            child.kill().unwrap();
            panic!("the server did not stop after SIGTERM while opening the store");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    assert!(
        status.success(),
        "exit after SIGTERM while opening: {status}\n{logs}"
    );
    assert!(
        logs.contains("shutdown requested while the store was opening: stopping before serving"),
        "{logs}"
    );
}
