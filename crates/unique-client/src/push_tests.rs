//! Unit tests of the push stream: its line reader, its backoff, its line types, the status a
//! pushed kick is acknowledged with, and the stream task against a scripted transport.

use std::sync::Mutex;

use tokio::sync::mpsc;
use unique_core::{ClaimInput, ClaimOutcome, CurrentView, Key, KickReason, Owner};

use super::*;
use crate::{Ending, Node, Transport};

#[test]
fn lines_are_cut_across_chunks_and_within_one() {
    let mut reader = LineReader::default();
    assert_eq!(
        reader.push(b"{\"type\":\"he").unwrap(),
        Vec::<Vec<u8>>::new()
    );
    assert_eq!(
        reader
            .push(b"llo\"}\n{\"type\":\"ping\"}\r\n\n{\"ty")
            .unwrap(),
        vec![
            b"{\"type\":\"hello\"}".to_vec(),
            b"{\"type\":\"ping\"}".to_vec()
        ],
        "a line split over two chunks, a CRLF line, an empty line skipped"
    );
    assert_eq!(
        reader.push(b"pe\":\"ping\"}\n").unwrap(),
        vec![b"{\"type\":\"ping\"}".to_vec()]
    );
}

#[test]
fn a_line_over_the_limit_is_refused_whole_or_in_pieces() {
    let mut reader = LineReader::default();
    let mut long = vec![b'x'; MAX_LINE_BYTES];
    assert_eq!(reader.push(&long).unwrap(), Vec::<Vec<u8>>::new());
    assert_eq!(
        reader.push(b"y"),
        Err(LineTooLong),
        "one byte past, unterminated"
    );
    let mut reader = LineReader::default();
    long.push(b'\n');
    assert_eq!(
        reader.push(&long).unwrap(),
        vec![vec![b'x'; MAX_LINE_BYTES]]
    );
    long.insert(0, b'x');
    assert_eq!(
        reader.push(&long),
        Err(LineTooLong),
        "one byte past, terminated"
    );
}

#[test]
fn backoff_doubles_to_its_cap_and_resets() {
    let mut backoff = Backoff::new(
        Duration::from_millis(100),
        Duration::from_secs(5),
        Jitter::none(),
    );
    let waits: Vec<u128> = (0..8).map(|_| backoff.next_wait().as_millis()).collect();
    assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    backoff.reset();
    assert_eq!(backoff.next_wait(), Duration::from_millis(100));
}

#[test]
fn backoff_jitter_stays_below_the_nominal_wait() {
    let mut backoff = Backoff::new(
        Duration::from_millis(100),
        Duration::from_secs(5),
        Jitter::full(),
    );
    let mut nominal = Duration::from_millis(100);
    for _ in 0..20 {
        assert!(backoff.next_wait() <= nominal);
        nominal = (nominal * 2).min(Duration::from_secs(5));
    }
}

const KEY_A: &str = "push-test-key-a-0123456789abcdef0123";
const KEY_B: &str = "push-test-key-b-0123456789abcdef0123";

fn kick_body(generation: i64) -> String {
    format!(
        r#"{{"project":"game","env":"prod","uid":7,"gen":{generation},"reason":"login-elsewhere"}}"#
    )
}

/// The sessions a handler destroyed, by key and gen.
type Destroyed = Arc<Mutex<Vec<(Key, i64)>>>;

/// A handler over one session of game/prod/7 at gen 1, and a log of what it destroyed.
fn one_session() -> (KickHandler, Destroyed) {
    let destroyed = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&destroyed);
    let handler = KickHandler::new(
        {
            let destroyed = Arc::clone(&destroyed);
            move |key: &Key| {
                let gone = destroyed.lock().unwrap().iter().any(|(k, _)| k == key);
                (*key == Key::new("game", "prod", 7) && !gone).then_some(1)
            }
        },
        move |key, generation| {
            log.lock().unwrap().push((key, generation));
            std::future::ready(())
        },
        crate::KickOptions::default(),
    );
    (handler, destroyed)
}

#[tokio::test]
async fn a_pushed_kick_is_answered_as_the_http_receiver_would() {
    let keys = SigningKeys::new([KEY_A]).unwrap();
    let other = SigningKeys::new([KEY_B]).unwrap();
    let signed = PushOptions::new("n1").unwrap().signing_keys(keys.clone());
    let (handler, destroyed) = one_session();
    let body = kick_body(2);
    let now = SystemTime::now();

    // Signed with a key the node does not hold, unsigned, or malformed: 401, nothing ends.
    let forged = other.sign(body.as_bytes(), now);
    assert_eq!(
        apply_kick(&handler, &signed, &body, Some(&forged)).await,
        401
    );
    assert_eq!(apply_kick(&handler, &signed, &body, None).await, 401);
    assert_eq!(apply_kick(&handler, &signed, &body, Some("t=1")).await, 401);
    // Signed over other bytes.
    let changed = keys.sign(kick_body(3).as_bytes(), now);
    assert_eq!(
        apply_kick(&handler, &signed, &body, Some(&changed)).await,
        401
    );
    assert!(destroyed.lock().unwrap().is_empty());

    // Genuine, but not a payload, or a key the limits refuse: 400.
    let bad = r#"{"project":"game"}"#;
    let bad_signature = keys.sign(bad.as_bytes(), now);
    assert_eq!(
        apply_kick(&handler, &signed, bad, Some(&bad_signature)).await,
        400
    );
    let bad_key = r#"{"project":"","env":"prod","uid":7,"gen":2}"#;
    let bad_key_signature = keys.sign(bad_key.as_bytes(), now);
    assert_eq!(
        apply_kick(&handler, &signed, bad_key, Some(&bad_key_signature)).await,
        400
    );
    // Over 4 KiB: 413 before anything else.
    let huge = format!("{}{}", " ".repeat(unique_wire::MAX_KICK_BODY_BYTES), body);
    assert_eq!(apply_kick(&handler, &signed, &huge, None).await, 413);
    assert!(destroyed.lock().unwrap().is_empty());

    // Genuine: the older session ends, 200; again: nothing older remains, 200.
    let genuine = keys.sign(body.as_bytes(), now);
    assert_eq!(
        apply_kick(&handler, &signed, &body, Some(&genuine)).await,
        200
    );
    assert_eq!(
        *destroyed.lock().unwrap(),
        [(Key::new("game", "prod", 7), 1)]
    );
    assert_eq!(
        apply_kick(&handler, &signed, &body, Some(&genuine)).await,
        200
    );

    // A node without keys takes unsigned kicks, as a receiver without keys does.
    let (handler, destroyed) = one_session();
    let unsigned = PushOptions::new("n1").unwrap();
    assert_eq!(apply_kick(&handler, &unsigned, &body, None).await, 200);
    assert_eq!(destroyed.lock().unwrap().len(), 1);
}

#[test]
fn node_ids_follow_the_servers_rule() {
    for good in ["n1", "a.b_c-D", &"x".repeat(64)] {
        PushOptions::new(good).unwrap();
    }
    for bad in ["", "a/b", "a b", "ñ", &"x".repeat(65)] {
        assert!(
            PushOptions::new(bad).unwrap_err().is_invalid_params(),
            "{bad}"
        );
    }
}

/// A transport whose claims win gen 1 for whatever owner asks (the store's side is not
/// what is tested here) and whose kick streams are the receivers a test hands it, one per
/// open; acks are sent to the test.
#[derive(Clone)]
struct Scripted {
    owner: Arc<Mutex<Option<Owner>>>,
    streams: Arc<Mutex<VecDeque<mpsc::UnboundedReceiver<Vec<u8>>>>>,
    opened: mpsc::UnboundedSender<String>,
    acks: mpsc::UnboundedSender<(String, String, u16)>,
}

struct Channel(mpsc::UnboundedReceiver<Vec<u8>>);

#[async_trait]
impl KickStream for Channel {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.0.recv().await)
    }
}

#[async_trait]
impl PushTransport for Scripted {
    async fn open_kick_stream(&self, node: &str) -> Result<Box<dyn KickStream>, Error> {
        let next = self.streams.lock().unwrap().pop_front();
        let _ = self.opened.send(node.to_owned());
        match next {
            Some(stream) => Ok(Box::new(Channel(stream))),
            None => Err(Error::unavailable("connection refused")),
        }
    }
    async fn ack_kick(&self, node: &str, id: &str, status: u16) -> Result<bool, Error> {
        let _ = self.acks.send((node.to_owned(), id.to_owned(), status));
        Ok(true)
    }
}

#[async_trait]
impl Transport for Scripted {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        *self.owner.lock().unwrap() = Some(request.owner.clone());
        Ok(ClaimOutcome {
            generation: 1,
            prev_generation: 0,
            has_prev: false,
            prev_owner: None,
            kicked: true,
            kick_detail: None,
            replayed: false,
        })
    }
    async fn current(&self, _: &Key) -> Result<CurrentView, Error> {
        Ok(CurrentView {
            generation: 1,
            owner: self.owner.lock().unwrap().clone(),
            exists: true,
        })
    }
    async fn release(&self, _: &Key, generation: i64) -> Result<bool, Error> {
        Ok(generation == 1)
    }
}

fn line(text: &str) -> Vec<u8> {
    format!("{text}\n").into_bytes()
}

/// Waits until the node's stream status satisfies `done`.
async fn until(node: &Node<Scripted>, done: impl Fn(&PushStatus) -> bool) -> PushStatus {
    let mut status = node.push_status().expect("a push node");
    // A guard against a hang, not a timing assertion: every wait here is for something the
    // test already caused.
    let last = node.push_status().expect("a push node");
    let waited = tokio::time::timeout(Duration::from_secs(30), status.wait_for(|s| done(s))).await;
    match waited {
        Ok(reached) => reached.unwrap().clone(),
        Err(elapsed) => panic!(
            "the awaited stream status never came ({elapsed}): {:?}",
            *last.borrow()
        ),
    }
}

/// What a test of the stream task holds: the scripted transport, a push node over it, and
/// the opens and acks the transport saw.
struct Rig {
    transport: Scripted,
    node: Node<Scripted>,
    opened: mpsc::UnboundedReceiver<String>,
    acks: mpsc::UnboundedReceiver<(String, String, u16)>,
}

impl Rig {
    fn new() -> Self {
        Self::with(|options| options)
    }

    fn with(tune: impl FnOnce(PushOptions) -> PushOptions) -> Self {
        let (opened_tx, opened) = mpsc::unbounded_channel();
        let (acks_tx, acks) = mpsc::unbounded_channel();
        let transport = Scripted {
            owner: Arc::default(),
            streams: Arc::default(),
            opened: opened_tx,
            acks: acks_tx,
        };
        let options = tune(
            PushOptions::new("n1")
                .unwrap()
                .backoff(Duration::from_millis(1), Duration::from_millis(5)),
        );
        let (node, _events) = Node::builder(transport.clone(), Owner::new("eu", "a", ""))
            .push(options)
            .build();
        Self {
            transport,
            node,
            opened,
            acks,
        }
    }

    /// Queues the stream the next open gets; the test writes to it.
    fn push(&self) -> mpsc::UnboundedSender<Vec<u8>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.transport.streams.lock().unwrap().push_back(rx);
        tx
    }
}

#[tokio::test]
async fn the_stream_applies_kicks_and_acks_them() {
    let mut rig = Rig::new();
    let node = &rig.node;
    assert_eq!(node.owner().node, "n1");
    assert!(node.owner().endpoint.is_empty());
    // No stream to be had: the node tries again, with backoff.
    assert_eq!(rig.opened.recv().await.as_deref(), Some("n1"));
    assert_eq!(rig.opened.recv().await.as_deref(), Some("n1"));
    let refused = until(node, |s| s.last_error.is_some()).await;
    assert!(!refused.connected);
    assert_eq!(
        refused.last_error.as_deref(),
        Some("open: unavailable: connection refused")
    );

    let first = rig.push();
    first
        .send(line(r#"{"type":"hello","node":"n1","ping_ms":60000}"#))
        .unwrap();
    until(node, |s| s.connected && s.connections == 1).await;

    // A session here at gen 1; a kick for gen 2 ends it Kicked and is acknowledged 200.
    let key = Key::new("game", "prod", 7);
    let session = node.login(key.clone()).await.unwrap();
    assert_eq!(session.generation(), 1);
    let claimed = rig.transport.owner.lock().unwrap().clone().unwrap();
    assert_eq!(
        (claimed.node.as_str(), claimed.endpoint.as_str()),
        ("n1", ""),
        "the login's owner names the node and no endpoint"
    );
    let kick =
        serde_json::json!({"type": "kick", "id": "k1", "body": kick_body(2), "signature": null});
    first.send(line(&kick.to_string())).unwrap();
    assert_eq!(
        rig.acks.recv().await,
        Some(("n1".to_owned(), "k1".to_owned(), 200))
    );
    assert_eq!(
        session.ended().await,
        Ending::Kicked {
            reason: KickReason::LoginElsewhere,
            message: None
        }
    );
    assert_eq!(node.generation(&key), None);
    assert_eq!(until(node, |s| s.acked == 1).await.connections, 1);
}

#[tokio::test]
async fn the_stream_reconnects_and_stops_with_the_node() {
    let rig = Rig::new();
    let node = &rig.node;
    let first = rig.push();
    first
        .send(line(r#"{"type":"hello","node":"n1","ping_ms":60000}"#))
        .unwrap();
    until(node, |s| s.connected && s.connections == 1).await;

    // The server closes the stream: the node reconnects and is connected again. (Each
    // next stream is queued before the last one ends, so that no refused open hides why
    // the last one ended.)
    let second = rig.push();
    first
        .send(line(r#"{"type":"closed","reason":"replaced"}"#))
        .unwrap();
    let ended = until(node, |s| !s.connected).await;
    assert_eq!(
        ended.last_error.as_deref(),
        Some("closed by the server: replaced")
    );
    let third = rig.push();
    second
        .send(line(r#"{"type":"hello","node":"n1","ping_ms":1}"#))
        .unwrap();
    until(node, |s| s.connected && s.connections == 2).await;

    // Silence for three ping intervals (3 ms here) is a dead stream: the next one opens.
    let silent = until(node, |s| !s.connected).await;
    assert_eq!(
        silent.last_error.as_deref(),
        Some("nothing received for 3ms")
    );
    third
        .send(line(r#"{"type":"hello","node":"n1","ping_ms":60000}"#))
        .unwrap();
    until(node, |s| s.connected && s.connections == 3).await;
    drop(second);

    // A line that does not read, or a hello naming another node, drops the stream too.
    let fourth = rig.push();
    third.send(line(r#"{"type":"bogus"#)).unwrap();
    let garbled = until(node, |s| !s.connected).await;
    assert!(
        garbled
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("a line that does not read")),
        "{garbled:?}"
    );
    let fifth = rig.push();
    fourth
        .send(line(r#"{"type":"hello","node":"n2","ping_ms":60000}"#))
        .unwrap();
    let wrong = until(node, |s| {
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("serves node"))
    })
    .await;
    assert_eq!(wrong.connections, 3);

    // Shutdown stops the stream for good, and drops it.
    fifth
        .send(line(r#"{"type":"hello","node":"n1","ping_ms":60000}"#))
        .unwrap();
    until(node, |s| s.connected && s.connections == 4).await;
    node.shutdown().await;
    let stopped = until(node, |s| s.stopped).await;
    assert!(!stopped.connected);
    fifth.closed().await;
}

#[tokio::test]
async fn a_stream_without_hello_is_dropped_after_the_hello_timeout() {
    let rig = Rig::with(|options| options.hello_timeout(Duration::from_millis(5)));
    let mute = rig.push();
    let next = rig.push();
    let dropped = until(&rig.node, |s| s.last_error.is_some()).await;
    assert_eq!(dropped.last_error.as_deref(), Some("no hello within 5ms"));
    mute.closed().await;
    next.send(line(r#"{"type":"hello","node":"n1","ping_ms":60000}"#))
        .unwrap();
    until(&rig.node, |s| s.connected).await;
}
