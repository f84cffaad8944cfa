//! Ambiguous writes against the real server (`docs/design.md#dynamodb-backend`): a claim's `UpdateItem`
//! is applied by dynalite but its response never reaches the client. A small
//! HTTP proxy in front of dynalite forwards the request, reads dynalite's
//! answer, and closes the client connection instead of passing it on.
//!
//! The claim must still end with the gen that was written, through the
//! Arbiter's replay short-circuit, and the old session must be kicked once.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use unique_core::{
    Arbiter, ClaimInput, Key, KickOutcome, KickPayload, Kicker, Owner, Store, async_trait,
};
use unique_store_dynamodb::RequestCounts;

/// The store without its write-first claim (C11), so the one `UpdateItem` whose response
/// the proxy loses is the claim's fenced CAS, the write these tests are about.
struct ReadFirst(unique_store_dynamodb::DynamoStore);

#[unique_core::async_trait]
impl unique_core::Store for ReadFirst {
    async fn read_owner(&self, key: &Key) -> Result<unique_core::OwnerState, unique_core::Error> {
        self.0.read_owner(key).await
    }
    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &unique_core::OwnerState,
    ) -> Result<unique_core::CasOutcome, unique_core::Error> {
        self.0.claim_cas(key, owner, claim_id, snap).await
    }
    async fn current(&self, key: &Key) -> Result<unique_core::CurrentView, unique_core::Error> {
        self.0.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, unique_core::Error> {
        self.0.release(key, generation).await
    }
}
use unique_testsupport::dynalite::Dynalite;

/// One HTTP/1.1 message as raw bytes, plus its lower-cased head for matching.
struct Message {
    head: String,
    bytes: Vec<u8>,
}

/// Reads one `Content-Length`-framed message (what the SDK sends and dynalite
/// answers); `None` on a clean end of stream.
async fn read_message(
    reader: &mut (impl AsyncBufRead + Unpin),
) -> std::io::Result<Option<Message>> {
    let mut bytes = Vec::new();
    loop {
        let before = bytes.len();
        if reader.read_until(b'\n', &mut bytes).await? == 0 {
            if bytes.is_empty() {
                return Ok(None);
            }
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if &bytes[before..] == b"\r\n" {
            break;
        }
    }
    let head = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    assert!(
        !head.contains("transfer-encoding: chunked"),
        "the test proxy only frames by content-length"
    );
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse::<usize>().expect("content-length"));
    let start = bytes.len();
    bytes.resize(start + length, 0);
    reader.read_exact(&mut bytes[start..]).await?;
    Ok(Some(Message { head, bytes }))
}

/// Forwards HTTP between the SDK and dynalite, and swallows the response of
/// the next `drops` `UpdateItem` requests: the request is applied upstream,
/// the client sees its connection close without an answer.
struct LossyProxy {
    addr: SocketAddr,
    drops: Arc<AtomicUsize>,
    dropped: mpsc::UnboundedReceiver<String>,
}

impl LossyProxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, dropped) = mpsc::unbounded_channel();
        let shared = Arc::clone(&drops);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (drops, tx) = (Arc::clone(&shared), tx.clone());
                tokio::spawn(async move {
                    let _ = relay(client, upstream, &drops, &tx).await;
                });
            }
        });
        Self {
            addr,
            drops,
            dropped,
        }
    }

    fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Swallows the response of the next `UpdateItem`.
    fn lose_next_update_item_response(&self) {
        self.drops.store(1, Ordering::SeqCst);
    }
}

async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    drops: &AtomicUsize,
    dropped: &mpsc::UnboundedSender<String>,
) -> std::io::Result<()> {
    let mut client = BufReader::new(client);
    let mut server = BufReader::new(TcpStream::connect(upstream).await?);
    while let Some(request) = read_message(&mut client).await? {
        server.get_mut().write_all(&request.bytes).await?;
        let response = read_message(&mut server)
            .await?
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        let is_update = request
            .head
            .contains("x-amz-target: dynamodb_20120810.updateitem");
        let lose = is_update
            && drops
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if lose {
            let status = response.head.lines().next().unwrap_or_default().to_owned();
            let _ = dropped.send(status);
            // Dropping the client stream closes it with no response sent.
            return Ok(());
        }
        client.get_mut().write_all(&response.bytes).await?;
    }
    Ok(())
}

/// Confirms every kick and counts them.
#[derive(Default)]
struct CountingKicker {
    kicks: AtomicUsize,
}

#[async_trait]
impl Kicker for CountingKicker {
    async fn kick(&self, _endpoint: &str, _payload: &KickPayload, _t: Duration) -> KickOutcome {
        self.kicks.fetch_add(1, Ordering::SeqCst);
        KickOutcome::Confirmed
    }
}

fn claim(key: &Key, endpoint: &str, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: key.clone(),
        owner: Owner::new("r", "c", endpoint),
        claim_id: claim_id.into(),
    }
}

/// An online session at gen 1 for `key`, written directly on dynalite.
async fn existing_session(key: &Key) {
    let direct = Arbiter::new(common::store().await);
    let first = direct
        .claim(&claim(key, "http://old.invalid/kick", "cid-old"))
        .await
        .unwrap();
    assert_eq!(first.generation, 1);
}

/// The record must hold the new session at gen 2.
async fn assert_new_session_at_gen_2(key: &Key) {
    let state = common::store().await.read_owner(key).await.unwrap();
    assert_eq!(state.generation, 2);
    assert_eq!(state.claim_id.as_deref(), Some("cid-new"));
    assert_eq!(
        state.owner,
        Some(Owner::new("r", "c", "http://new.invalid/kick"))
    );
}

/// The SDK retries the `UpdateItem` whose response was lost; the retry fails
/// its condition (the first attempt already moved gen), the Arbiter re-reads,
/// finds its own claim_id and answers with the written gen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_update_response_retried_by_the_sdk_ends_in_replay() {
    let key = Key::new("ambiguous", "test", 1);
    existing_session(&key).await;
    let mut proxy = LossyProxy::start(Dynalite::shared().addr()).await;
    let store = common::store_at(&proxy.endpoint_url(), 2).await;
    let kicker = Arc::new(CountingKicker::default());
    let arbiter = Arbiter::builder(ReadFirst(store.clone()))
        .kicker(Arc::clone(&kicker))
        .build();

    proxy.lose_next_update_item_response();
    let outcome = arbiter
        .claim(&claim(&key, "http://new.invalid/kick", "cid-new"))
        .await
        .expect("the ambiguous write resolves to success");

    let lost = proxy.dropped.try_recv().expect("the proxy lost a response");
    assert!(
        lost.starts_with("http/1.1 200"),
        "the lost write was applied: {lost}"
    );
    assert_eq!(outcome.generation, 2, "the gen that was written");
    assert!(outcome.replayed, "answered by the replay short-circuit");
    assert_eq!(kicker.kicks.load(Ordering::SeqCst), 1, "no second kick");
    assert_eq!(
        store.request_counts(),
        RequestCounts {
            get_item: 2,
            update_item: 2,
            batch_get_item: 0,
            query: 0,
            other: 0
        },
        "read, applied write (lost), SDK retry (condition failed), re-read"
    );
    assert_new_session_at_gen_2(&key).await;
}

/// Without SDK retries the claim fails closed (`Unavailable`); the client's
/// retry with the same claim_id is answered by the replay short-circuit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_update_response_without_sdk_retry_is_replayed_on_client_retry() {
    let key = Key::new("ambiguous", "test", 2);
    existing_session(&key).await;
    let mut proxy = LossyProxy::start(Dynalite::shared().addr()).await;
    let store = common::store_at(&proxy.endpoint_url(), 1).await;
    let kicker = Arc::new(CountingKicker::default());
    let arbiter = Arbiter::builder(ReadFirst(store.clone()))
        .kicker(Arc::clone(&kicker))
        .build();
    let input = claim(&key, "http://new.invalid/kick", "cid-new");

    proxy.lose_next_update_item_response();
    let err = arbiter.claim(&input).await.unwrap_err();
    assert!(
        err.is_unavailable(),
        "a lost response fails closed: {err:?}"
    );
    let lost = proxy.dropped.try_recv().expect("the proxy lost a response");
    assert!(
        lost.starts_with("http/1.1 200"),
        "the lost write was applied: {lost}"
    );

    let retried = arbiter.claim(&input).await.unwrap();
    assert_eq!(retried.generation, 2, "the gen that was written");
    assert!(retried.replayed);
    assert_eq!(kicker.kicks.load(Ordering::SeqCst), 1, "no second kick");
    assert_new_session_at_gen_2(&key).await;
}
