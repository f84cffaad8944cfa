//! One node as its own process, for the smoke runner: it starts its kick receiver, then
//! takes commands on stdin and prints one event per line on stdout (flushed at once).
//!
//! Commands: `login`, `relogin-same-claim-id` (replays the last login's claim_id),
//! `logout` (ends the session and releases it; its heartbeat stops),
//! `close-receiver` (kicks now fail to connect; the session and heartbeat stay), `ping`
//! (answers `PONG`: a barrier for the runner), `quit` (or end of input).
//!
//! Events: `LISTENING`, `LOGGED_IN`, `LOGIN_FAILED`, `KICK`, `DESTROYED`, `CHECK`,
//! `EVICTED`, `LOGGED_OUT`, `LOGOUT_FAILED`, `RECEIVER_CLOSED`, `PONG`, `ERROR`, `BYE`;
//! see `unique_examples::events` for the format.
//!
//! Run: `cargo run -p unique-examples --bin smoke-client -- --server http://127.0.0.1:7420 --uid 1`

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::io::{AsyncBufReadExt, BufReader};
use unique_examples::events::format_line;
use unique_examples::node::{EventSink, Node, NodeConfig};
use unique_sessions::Key;
use unique_sessions::node::SigningKeys;

/// A scriptable unique client node (commands on stdin, events on stdout).
#[derive(Debug, Parser)]
#[command(name = "smoke-client")]
struct Args {
    /// Base URL of the unique-server.
    #[arg(long)]
    server: String,
    /// Project of the key.
    #[arg(long, default_value = "smoke")]
    project: String,
    /// Env of the key.
    #[arg(long, default_value = "main")]
    env: String,
    /// Uid of the key.
    #[arg(long)]
    uid: i64,
    /// Node name (advertised as the owner's cluster).
    #[arg(long, default_value = "node")]
    node: String,
    /// Address of the kick receiver.
    #[arg(long, default_value = "127.0.0.1:0")]
    kick_listen: SocketAddr,
    /// Heartbeat interval (e.g. 500ms).
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    heartbeat: Duration,
    /// Key file (one key per line) the kick receiver verifies kicks with; without it
    /// unsigned kicks are accepted, on a loopback --kick-listen only.
    #[arg(long, value_name = "PATH")]
    kick_signing_keys: Option<PathBuf>,
}

/// Prints one line and flushes it, so the runner sees it at once.
fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    let sink: EventSink = Arc::new(|event| emit(&event.to_line()));
    let kick_signing_keys = match args
        .kick_signing_keys
        .as_deref()
        .map(SigningKeys::from_file)
    {
        None => None,
        Some(Ok(keys)) => Some(keys),
        Some(Err(e)) => {
            emit(&format_line("ERROR", &[], Some(&e.to_string())));
            return ExitCode::FAILURE;
        }
    };
    let config = NodeConfig {
        server: args.server,
        key: Key::new(args.project, args.env, args.uid),
        region: "local".into(),
        cluster: args.node,
        kick_listen: args.kick_listen,
        heartbeat_interval: args.heartbeat,
        kick_signing_keys,
    };
    let mut node = match Node::start(config, sink).await {
        Ok(node) => node,
        Err(e) => {
            emit(&format_line("ERROR", &[], Some(&e)));
            return ExitCode::FAILURE;
        }
    };

    let mut commands = BufReader::new(tokio::io::stdin()).lines();
    // End of input counts as `quit`, so an orphaned client goes away with its runner.
    while let Ok(Some(command)) = commands.next_line().await {
        match command.trim() {
            "login" => drop(node.login().await),
            "relogin-same-claim-id" => drop(node.relogin_same_claim_id().await),
            "logout" => drop(node.logout().await),
            "close-receiver" => node.close_receiver().await,
            "ping" => emit(&format_line("PONG", &[], None)),
            "quit" => break,
            "" => {}
            other => emit(&format_line(
                "ERROR",
                &[],
                Some(&format!("unknown command {other:?}")),
            )),
        }
    }
    node.shutdown().await;
    emit(&format_line("BYE", &[], None));
    ExitCode::SUCCESS
}
