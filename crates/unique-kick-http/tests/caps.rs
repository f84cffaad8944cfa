//! The kicker's own bounds against real loopback receivers: the idle pool's global
//! cap (least recently used out first), its sweep of expired connections, and the cap
//! on kicks in flight. Every receiver binds `127.0.0.1`; nothing leaves the host.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use unique_core::{KickDetail, KickOutcome, Kicker};
use unique_kick_contract::{ANSWER_DEADLINE, payload};
use unique_kick_http::{HttpKicker, KICKS_SHED_TOTAL};

const CONNECT_ERROR: KickOutcome = KickOutcome::Failed(KickDetail::ConnectError);

/// How long a test waits for a receiver to see something happen before failing.
const WAIT: Duration = Duration::from_secs(10);

/// What a receiver does with each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Answers `200` with keep-alive, on every request of the connection.
    Answer,
    /// Reads the request, reports it, and never answers.
    Hold,
}

/// What a receiver reports, in the order it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// A connection was accepted from this address.
    Accepted(SocketAddr),
    /// A whole request was read.
    Request,
    /// A connection ended: the kicker closed it.
    Closed,
}

/// A loopback kick receiver that reports every connection it accepts and sees
/// closed, and every request it reads.
struct Receiver {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    events: mpsc::UnboundedReceiver<Event>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(mode: Mode) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port for a kick receiver");
        let addr = listener.local_addr().expect("bound address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let (tx, events) = mpsc::unbounded_channel();
        let count = Arc::clone(&accepted);
        let accept_loop = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((stream, peer)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(Event::Accepted(peer));
                connections.spawn(serve(stream, mode, tx.clone()));
                while connections.try_join_next().is_some() {}
            }
        });
        Self {
            addr,
            accepted,
            events,
            accept_loop,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/kick", self.addr)
    }

    /// How many connections it has accepted.
    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// The next event that is not an accept, failing after [`WAIT`].
    async fn next(&mut self) -> Event {
        loop {
            let event = tokio::time::timeout(WAIT, self.events.recv())
                .await
                .unwrap_or_else(|_| panic!("{}: nothing happened within {WAIT:?}", self.addr))
                .expect("the receiver is running");
            if !matches!(event, Event::Accepted(_)) {
                return event;
            }
        }
    }

    /// Waits until a connection to it is closed.
    async fn closed(&mut self) {
        while self.next().await != Event::Closed {}
    }

    /// Asserts that no connection reached it so far: a probe connection must be the
    /// first one it accepted, as the accept queue is first in, first out and a
    /// kick's connection would have been established before the kick returned.
    async fn assert_accepted_nothing(&mut self) {
        let probe = TcpStream::connect(self.addr).await.expect("probe connects");
        let first = tokio::time::timeout(WAIT, self.events.recv())
            .await
            .expect("the probe is accepted")
            .expect("the receiver is running");
        assert_eq!(
            first,
            Event::Accepted(probe.local_addr().expect("probe address")),
            "{} accepted a connection before the probe",
            self.addr
        );
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection.
        self.accept_loop.abort();
    }
}

/// Serves one connection: reads requests (head, then a `content-length` body),
/// answers or holds each, and reports the close.
async fn serve(mut stream: TcpStream, mode: Mode, events: mpsc::UnboundedSender<Event>) {
    let _ = stream.set_nodelay(true);
    let mut buffer = Vec::new();
    while read_request(&mut stream, &mut buffer).await.is_some() {
        let _ = events.send(Event::Request);
        if mode == Mode::Hold {
            return std::future::pending().await;
        }
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        if stream.write_all(answer).await.is_err() {
            break;
        }
    }
    let _ = events.send(Event::Closed);
}

/// Reads one request into nothing; `None` at the end of the stream.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<()> {
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        read_more(stream, buffer).await?;
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |value| value.trim().parse().expect("a content length"));
    while buffer.len() < head_end + length {
        read_more(stream, buffer).await?;
    }
    buffer.drain(..head_end + length);
    Some(())
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            Some(())
        }
    }
}

async fn kick(kicker: &HttpKicker, url: &str) -> KickOutcome {
    kicker.kick(url, &payload(), ANSWER_DEADLINE).await
}

/// Kicks each receiver once, in order, and expects each kick confirmed.
async fn kick_each(kicker: &HttpKicker, receivers: &[&Receiver]) {
    for receiver in receivers {
        assert_eq!(
            kick(kicker, &receiver.url()).await,
            KickOutcome::Confirmed,
            "{}",
            receiver.addr
        );
    }
}

/// Eight receivers on eight loopback ports (eight authorities), a global cap of
/// four: the four least recently used connections are closed, the four others stay
/// open and are reused; and it is the least recently *used* that goes, not the
/// first opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_pool_keeps_at_most_max_idle_across_hosts_evicting_the_least_recently_used() {
    let kicker = HttpKicker::builder()
        .pool_max_idle(4)
        .build()
        .expect("valid options");
    let mut receivers = Vec::new();
    for _ in 0..8 {
        receivers.push(Receiver::start(Mode::Answer).await);
    }

    kick_each(&kicker, &receivers.iter().collect::<Vec<_>>()).await;
    // Receivers 0..4 were the least recently used when 4..8 came in.
    for receiver in &mut receivers[..4] {
        receiver.closed().await;
    }
    // 4..8 are still idle: kicked again, most recent first, over the same connections.
    let newest_first: Vec<&Receiver> = receivers[4..].iter().rev().collect();
    kick_each(&kicker, &newest_first).await;
    for receiver in &receivers[4..] {
        assert_eq!(receiver.accepted(), 1, "{} was not reused", receiver.addr);
    }

    // Receiver 7 was used before 6, 5 and 4 just now: a fifth host evicts it.
    kick_each(&kicker, &[&receivers[0]]).await;
    assert_eq!(
        receivers[0].accepted(),
        2,
        "its first connection was closed"
    );
    receivers[7].closed().await;
    kick_each(&kicker, &[&receivers[4], &receivers[5], &receivers[6]]).await;
    for receiver in &receivers[4..7] {
        assert_eq!(receiver.accepted(), 1, "{} was not reused", receiver.addr);
    }
}

/// An idle connection past the idle timeout is closed by the next kick through the
/// kicker, to whatever host it goes: a host nobody kicks again does not keep its
/// socket. The clock is paused only between kicks, so no kick's deadline is advanced.
#[tokio::test(flavor = "current_thread")]
async fn an_expired_idle_connection_is_closed_by_the_next_kick_to_any_host() {
    let kicker = HttpKicker::builder()
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .expect("valid options");
    let mut stale = Receiver::start(Mode::Answer).await;
    let fresh = Receiver::start(Mode::Answer).await;
    kick_each(&kicker, &[&stale]).await;

    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(31)).await;
    tokio::time::resume();

    kick_each(&kicker, &[&fresh]).await;
    stale.closed().await;
    // The fresh connection was kept.
    kick_each(&kicker, &[&fresh]).await;
    assert_eq!(fresh.accepted(), 1);
}

/// Two kicks held open by their receiver fill a cap of two: further kicks are
/// connect errors at once, with no connection made, each counted in
/// `unique_kicks_shed_total`; once the held kicks end, kicks go out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kicks_past_the_in_flight_cap_are_connect_errors_without_a_connection_and_counted() {
    let recorder = DebuggingRecorder::new();
    let kicker = metrics::with_local_recorder(&recorder, || {
        HttpKicker::builder()
            .max_kicks_in_flight(2)
            .build()
            .expect("valid options")
    });
    let mut holder = Receiver::start(Mode::Hold).await;
    let mut other = Receiver::start(Mode::Answer).await;

    let mut held = JoinSet::new();
    for _ in 0..2 {
        let (kicker, url) = (kicker.clone(), holder.url());
        // A deadline far beyond the test: only the abort below ends these kicks.
        held.spawn(async move { kicker.kick(&url, &payload(), Duration::from_hours(1)).await });
    }
    for _ in 0..2 {
        assert_eq!(holder.next().await, Event::Request);
    }

    for _ in 0..2 {
        assert_eq!(kick(&kicker, &other.url()).await, CONNECT_ERROR);
    }
    other.assert_accepted_nothing().await;
    assert_eq!(shed_count(&recorder), 2);

    // The held kicks' callers give up: their slots are free again.
    held.abort_all();
    while let Some(ended) = held.join_next().await {
        assert!(ended.expect_err("aborted").is_cancelled());
    }
    assert_eq!(kick(&kicker, &other.url()).await, KickOutcome::Confirmed);
    // (A debugging snapshot reads each counter's change since the previous one.)
    assert_eq!(
        shed_count(&recorder),
        0,
        "a kick inside the cap was counted"
    );
}

/// The change of `unique_kicks_shed_total{reason="max-kicks-in-flight"}` since the
/// previous call.
fn shed_count(recorder: &DebuggingRecorder) -> u64 {
    let found = recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(key, _, _, value)| {
            let key = key.key();
            let shed = key.name() == KICKS_SHED_TOTAL
                && key
                    .labels()
                    .any(|l| l.key() == "reason" && l.value() == "max-kicks-in-flight");
            shed.then_some(value)
        });
    match found {
        Some(DebugValue::Counter(count)) => count,
        other => panic!("{KICKS_SHED_TOTAL}: {other:?}"),
    }
}

#[test]
fn the_builder_refuses_a_cap_of_zero_kicks_in_flight() {
    let zero = HttpKicker::builder().max_kicks_in_flight(0).build();
    assert!(
        matches!(zero, Err(unique_kick_http::BuildError::ZeroKicksInFlight)),
        "{zero:?}"
    );
}
