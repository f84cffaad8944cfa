//! Push kicks against HTTP kicks, measured (issue 46): takeovers per second and their
//! latency when every login is a takeover whose kick is delivered to a real receiver and
//! acknowledged, on one unique-server (memory store), or on three sharing one PostgreSQL
//! database (`--servers 3`), where the claims go to the first and the nodes' streams are held
//! by the other two, so every push kick is forwarded between servers.
//!
//! Each of `--connections` keep-alive connections owns one user and logs it in alternately
//! as owner A and owner B, so every claim after its first kicks the other owner:
//!
//! - `http`: A and B are kick receivers in this process (HTTP/1.1 keep-alive, answer 200);
//! - `push`: A and B are nodes holding `GET /v1/nodes/{node}/kicks` open here, acking each
//!   kick on `POST /v1/nodes/{node}/kicks/ack` over a pool of keep-alive connections.
//!
//! A takeover counts as ok when its answer says `kicked: true`. Then `--streams` streams are
//! opened and the server's resident memory per stream is printed (VmRSS growth).
//!
//! `taskset -c 1 cargo run --release -p unique-bench --bin push_kicks -- --server
//! target/release/unique-server --server-cpus 0`

// Counts stay far below 2^52, where u64 → f64 is exact.
#![allow(clippy::cast_precision_loss)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc};

#[derive(Debug, Parser)]
struct Args {
    /// The unique-server binary (build it with `cargo build --release -p unique-server`).
    #[arg(long, default_value = "target/release/unique-server")]
    server: String,
    /// CPUs the server is pinned to (`taskset -c`); empty: not pinned.
    #[arg(long, default_value = "")]
    server_cpus: String,
    /// Keep-alive claim connections, one user each, one claim in flight each.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Measured time per mode, after the warm-up.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Unmeasured load before each measurement.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Streams opened for the memory measure; 0 skips it.
    #[arg(long, default_value_t = 1000)]
    streams: usize,
    /// Servers: 1 (memory store), or 2 or 3 (one PostgreSQL database, joined by --peer-url: claims
    /// on the first, the two nodes' streams on the last two (the second for both with 2), so every push kick is
    /// forwarded; PostgreSQL is started for the run).
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=3))]
    servers: usize,
}

/// The store and peer flags of one server of the run.
struct Placement {
    /// `--store memory`, or PostgreSQL at this URL.
    database: Option<String>,
    /// The port to listen on (0: any) and, with peers, the peer secret file.
    port: u16,
    peer_secret: Option<std::path::PathBuf>,
    create_table: bool,
}

/// A server of `args.server` on loopback: the child and its address.
fn start_server(args: &Args, placement: &Placement) -> (Child, String) {
    let mut command = if args.server_cpus.is_empty() {
        Command::new(&args.server)
    } else {
        let mut taskset = Command::new("taskset");
        taskset.args(["-c", &args.server_cpus, &args.server]);
        taskset
    };
    let listen = format!("127.0.0.1:{}", placement.port);
    command.args([
        "--listen",
        &listen,
        "--max-connections-per-ip",
        "100000",
        "--max-kick-streams-per-token",
        "100000",
        "--max-kick-streams",
        "100000",
    ]);
    match &placement.database {
        None => {
            command.args(["--store", "memory"]);
        }
        Some(url) => {
            command
                .args(["--store", "postgres", "--database-table", "bench_push"])
                .env("UNIQUE_DATABASE_URL", url);
            if placement.create_table {
                command.arg("--create-table");
            }
        }
    }
    if let Some(secret) = &placement.peer_secret {
        command
            .args(["--peer-url", &format!("http://{listen}")])
            .arg("--peer-secret-file")
            .arg(secret);
    }
    let mut child = command
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server binary (--server)");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    let addr = line
        .trim()
        .rsplit("://")
        .next()
        .expect("the announced address")
        .to_owned();
    (child, addr)
}

/// One keep-alive HTTP/1.1 connection: sends a request, reads its answer.
struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    async fn open(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            reader: BufReader::new(stream),
        }
    }

    /// POSTs `body` to `path`: the status and the body.
    async fn post(&mut self, path: &str, body: &str) -> (u16, Vec<u8>) {
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: b\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        self.reader
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .unwrap();
        read_answer(&mut self.reader).await
    }
}

/// Reads one HTTP/1.1 answer with a content length: its status and body.
async fn read_answer(reader: &mut BufReader<TcpStream>) -> (u16, Vec<u8>) {
    let mut status = 0;
    let mut length = 0;
    let mut line = String::new();
    loop {
        line.clear();
        assert!(reader.read_line(&mut line).await.unwrap() > 0, "closed");
        let text = line.trim_end();
        if text.is_empty() {
            break;
        }
        if status == 0 {
            status = text[9..12].parse().unwrap();
        } else if let Some((name, value)) = text.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.unwrap();
    (status, body)
}

/// A kick receiver: answers every request 200 on keep-alive connections. Its port.
async fn receiver() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                loop {
                    let mut length = 0;
                    let mut first = true;
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let text = line.trim_end();
                        if text.is_empty() && !first {
                            break;
                        }
                        first = false;
                        if let Some((name, value)) = text.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                    if reader.get_mut().write_all(ok).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// Opens `node`'s kick stream and acks every kick on it with 200 over `ackers` keep-alive
/// connections; runs until the process ends.
async fn push_node(addr: &str, node: &str, ackers: usize) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let request = format!("GET /v1/nodes/{node}/kicks HTTP/1.1\r\nhost: b\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (ids, receiver) = mpsc::unbounded_channel::<String>();
    let receiver = Arc::new(Mutex::new(receiver));
    for _ in 0..ackers {
        let (addr, node, receiver) = (addr.to_owned(), node.to_owned(), Arc::clone(&receiver));
        tokio::spawn(async move {
            let mut conn = Conn::open(&addr).await;
            let path = format!("/v1/nodes/{node}/kicks/ack");
            loop {
                let Some(id) = receiver.lock().await.recv().await else {
                    return;
                };
                let (status, _) = conn
                    .post(&path, &json!({"id": id, "status": 200}).to_string())
                    .await;
                assert_eq!(status, 200);
            }
        });
    }
    let (hello_sent, hello) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        // Chunked NDJSON, one line a chunk: the pieces between CRLFs are sizes and lines.
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        let mut hello_sent = Some(hello_sent);
        loop {
            line.clear();
            if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            if !line.starts_with('{') {
                continue;
            }
            let Ok(parsed) = serde_json::from_str::<Value>(line.trim_end()) else {
                continue;
            };
            match parsed["type"].as_str() {
                Some("hello") => {
                    if let Some(sent) = hello_sent.take() {
                        let _ = sent.send(());
                    }
                }
                Some("kick") => ids.send(parsed["id"].as_str().unwrap().to_owned()).unwrap(),
                _ => {}
            }
        }
    });
    hello.await.expect("the stream's hello");
}

/// Runs the alternating takeovers for `warmup + duration`: ok/s, p50, p99, failures.
async fn measure(addr: &str, args: &Args, owners: [Value; 2], base_uid: usize) -> String {
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..args.connections {
        let (addr, owners) = (addr.to_owned(), owners.clone());
        let (measuring, stop, failed) = (
            Arc::clone(&measuring),
            Arc::clone(&stop),
            Arc::clone(&failed),
        );
        tasks.push(tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
            let mut conn = Conn::open(&addr).await;
            let uid = base_uid + c + 1;
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let body = json!({"project": "bench", "env": "prod", "uid": uid,
                    "owner": owners[n % 2], "claim_id": format!("{uid}-{n}")})
                .to_string();
                let started = Instant::now();
                let (status, answer) = conn.post("/v1/claim", &body).await;
                let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
                if n > 0 && measuring.load(Ordering::Relaxed) {
                    if status == 200 && answer["kicked"] == true {
                        histogram.saturating_record(micros);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                n += 1;
            }
            histogram
        }));
    }
    tokio::time::sleep(args.warmup).await;
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(args.duration).await;
    measuring.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    for task in tasks {
        all.add(task.await.unwrap()).unwrap();
    }
    let ok = all.len() as f64 / args.duration.as_secs_f64();
    format!(
        "{ok:.0} ok/s, p50 {:.2} ms, p99 {:.2} ms, {} failed",
        all.value_at_quantile(0.5) as f64 / 1000.0,
        all.value_at_quantile(0.99) as f64 / 1000.0,
        failed.load(Ordering::Relaxed)
    )
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The servers of the run: one on memory, or three on one PostgreSQL database joined as
/// peers. The children, their addresses, and the database while it must live.
fn start_servers(
    args: &Args,
    dir: &std::path::Path,
) -> (
    Vec<Child>,
    Vec<String>,
    Option<Arc<unique_testsupport::postgres::PostgresServer>>,
) {
    if args.servers == 1 {
        let placement = Placement {
            database: None,
            port: 0,
            peer_secret: None,
            create_table: false,
        };
        let (child, addr) = start_server(args, &placement);
        return (vec![child], vec![addr], None);
    }
    let db = unique_testsupport::postgres::shared();
    let secret = dir.join("peer.secret");
    unique_testsupport::write_secret(&secret, "bench-peer-secret-0123456789abcdef0123")
        .expect("the peer secret file");
    let (children, addrs) = (0..args.servers)
        .map(|i| {
            let placement = Placement {
                database: Some(db.url().to_owned()),
                port: unique_testsupport::free_port(),
                peer_secret: Some(secret.clone()),
                create_table: i == 0,
            };
            start_server(args, &placement)
        })
        .unzip();
    (children, addrs, Some(db))
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (children, addrs, _db) = start_servers(&args, dir.path());
    let addr = addrs[0].clone();
    // With three servers the nodes hold their streams on the other two: every push kick is
    // forwarded from the claim's server to the stream's.
    let stream_addrs = [&addrs[addrs.len().min(2) - 1], &addrs[addrs.len() - 1]];
    println!("{} server(s): {}", args.servers, addrs.join(", "));

    let (a, b) = (receiver().await, receiver().await);
    let http = [
        json!({"endpoint": format!("http://127.0.0.1:{a}/kick")}),
        json!({"endpoint": format!("http://127.0.0.1:{b}/kick")}),
    ];
    println!("http kicks: {}", measure(&addr, &args, http, 0).await);

    push_node(stream_addrs[0], "bench-a", args.connections).await;
    push_node(stream_addrs[1], "bench-b", args.connections).await;
    let push = [json!({"node": "bench-a"}), json!({"node": "bench-b"})];
    println!(
        "push kicks: {}",
        measure(&addr, &args, push, 1_000_000).await
    );

    if args.streams > 0 {
        // The server's pid: the child itself, or taskset's (it execs the server).
        let pid = children[0].id();
        let before = rss_kib(pid);
        let mut streams = Vec::new();
        for i in 0..args.streams {
            let mut stream = TcpStream::connect(&addr).await.unwrap();
            let request = format!("GET /v1/nodes/mem-{i}/kicks HTTP/1.1\r\nhost: b\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut head = [0u8; 512];
            let _ = stream.read(&mut head).await.unwrap();
            streams.push(stream);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = rss_kib(pid);
        println!(
            "{} streams: VmRSS {:.1} -> {:.1} MiB, {:.1} KiB per stream",
            args.streams,
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            after.saturating_sub(before) as f64 / args.streams as f64
        );
    }
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}
