//! The pooled workload's push nodes
//! ([`PoolWorkload::push_nodes`](crate::PoolWorkload::push_nodes)): real `unique-client`
//! nodes with no listener (`NodeBuilder::push` over `unique-client-http`), each holding its
//! kick stream open on a server. A node holds no session (the workload's clients send their
//! claims themselves, to record every answer), so it acknowledges every kick 200
//! (`no-session`), as the kick receiver does. What the history needs from it is the kick's
//! arrival: the node's transport is wrapped in a [`Tap`] that reads the stream's bytes as the
//! node does and records each kick line when it arrives, before the node has applied or
//! acknowledged it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use unique_client::{
    ClaimInput, ClaimOutcome, CurrentView, Error, HeartbeatOptions, Key, KickStream, Node,
    PoolRequest, PooledOutcome, PushOptions, PushStatus, PushTransport, Transport, async_trait,
};
use unique_client_http::HttpTransport;
use unique_core::{Owner, ReleaseReason};
use unique_wire::push::StreamLine;

use crate::PoolWorkload;
use crate::pool::KickSeen;

/// Where every tapped stream records the kicks it carries.
pub(crate) struct KickLog {
    epoch: Instant,
    project: String,
    kicks: Arc<Mutex<Vec<KickSeen>>>,
}

impl KickLog {
    /// Records the kicks of `project`'s keys into `kicks`, timed from `epoch`.
    pub(crate) fn new(epoch: Instant, project: String, kicks: Arc<Mutex<Vec<KickSeen>>>) -> Self {
        Self {
            epoch,
            project,
            kicks,
        }
    }
}

/// A push node's transport: `unique-client-http`'s, with every kick stream it opens read
/// on the way to the node so that each kick's arrival is recorded.
#[derive(Clone)]
struct Tap {
    inner: HttpTransport,
    record: Arc<KickLog>,
}

// The node never logs in (it holds no session), so these only forward.
#[async_trait]
impl Transport for Tap {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        self.inner.claim(request).await
    }
    async fn claim_pooled(
        &self,
        request: &ClaimInput,
        pool: &PoolRequest,
    ) -> Result<PooledOutcome, Error> {
        self.inner.claim_pooled(request, pool).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.inner.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.inner.release(key, generation).await
    }
    async fn release_with_reason(
        &self,
        key: &Key,
        generation: i64,
        reason: ReleaseReason,
    ) -> Result<bool, Error> {
        self.inner
            .release_with_reason(key, generation, reason)
            .await
    }
    async fn current_batch(&self, keys: &[Key]) -> Result<Vec<Result<CurrentView, Error>>, Error> {
        self.inner.current_batch(keys).await
    }
}

#[async_trait]
impl PushTransport for Tap {
    async fn open_kick_stream(&self, node: &str) -> Result<Box<dyn KickStream>, Error> {
        let inner = self.inner.open_kick_stream(node).await?;
        Ok(Box::new(TappedStream {
            inner,
            line: Vec::new(),
            record: Arc::clone(&self.record),
        }))
    }

    async fn ack_kick(&self, node: &str, id: &str, status: u16) -> Result<bool, Error> {
        self.inner.ack_kick(node, id, status).await
    }
}

/// A kick stream's body, its lines read (and its kicks recorded) as they pass to the node.
struct TappedStream {
    inner: Box<dyn KickStream>,
    /// The bytes of the line not yet ended. The node drops a stream whose line passes
    /// `unique_client::MAX_LINE_BYTES` (and this tap with it), so this stays as bounded.
    line: Vec<u8>,
    record: Arc<KickLog>,
}

#[async_trait]
impl KickStream for TappedStream {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, Error> {
        let chunk = self.inner.next_chunk().await?;
        if let Some(bytes) = &chunk {
            let at = self.record.epoch.elapsed();
            for piece in bytes.split_inclusive(|b| *b == b'\n') {
                self.line.extend_from_slice(piece);
                if self.line.last() == Some(&b'\n') {
                    let line = std::mem::take(&mut self.line);
                    self.record.line(&line, at);
                }
            }
        }
        Ok(chunk)
    }
}

impl KickLog {
    /// Records the kick `line` carries, if it is one of the project's (as the kick
    /// receiver records a POSTed one); other lines and payloads that do not read are the
    /// node's to judge.
    fn line(&self, line: &[u8], at: Duration) {
        let line = line.trim_ascii_end();
        let Ok(StreamLine::Kick(kick)) = StreamLine::from_line(line) else {
            return;
        };
        let Ok(payload) = unique_wire::decode_kick(kick.body.as_bytes()) else {
            return;
        };
        if payload.project != self.project {
            return;
        }
        self.kicks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(KickSeen {
                uid: payload.uid,
                slot: payload.slot,
                generation: payload.generation,
                reason: payload.reason.as_str().to_owned(),
                at,
            });
    }
}

/// The run's push nodes, their streams open.
pub(crate) struct PushNodes {
    nodes: Vec<Node<Tap>>,
    ids: Vec<String>,
    /// Per node, the index of its stream server.
    stream_server: Vec<usize>,
}

impl PushNodes {
    /// Starts `count` nodes, node `n` holding its stream on `stream_servers[n mod len]`
    /// (requests bounded by `timeout`), and waits until every stream said `hello`.
    ///
    /// # Errors
    ///
    /// `InvalidParams` without a stream server or for a base URL that is not one;
    /// `Unavailable` when a stream is not up within [`PoolWorkload::STREAM_PATIENCE`]
    /// (the nodes started are shut down first).
    pub(crate) async fn start(
        stream_servers: &[String],
        count: usize,
        timeout: Duration,
        log: KickLog,
    ) -> Result<Self, Error> {
        if stream_servers.is_empty() {
            return Err(Error::invalid("push nodes need at least one stream server"));
        }
        let transports = stream_servers
            .iter()
            .map(|base| {
                HttpTransport::builder(base.trim_end_matches('/'))
                    .timeout(timeout)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let log = Arc::new(log);
        // Unique per run: runs sharing a server must not replace each other's streams.
        let run = fastrand::u64(..);
        let mut started = Self {
            nodes: Vec::with_capacity(count),
            ids: Vec::with_capacity(count),
            stream_server: Vec::with_capacity(count),
        };
        for n in 0..count {
            let id = format!("pool-{run:016x}-{n}");
            let server = n % transports.len();
            let options = PushOptions::new(id.as_str())?
                .backoff(Duration::from_millis(20), Duration::from_millis(500))
                .hello_timeout(timeout);
            let tap = Tap {
                inner: transports[server].clone(),
                record: Arc::clone(&log),
            };
            let (node, _events) = Node::builder(tap, Owner::default())
                // No session is ever held: nothing to watch.
                .heartbeat_options(HeartbeatOptions::default().interval(Duration::from_hours(1)))
                .push(options)
                .build();
            started.nodes.push(node);
            started.ids.push(id);
            started.stream_server.push(server);
        }
        if let Err(e) = started.connected().await {
            started.shutdown().await;
            return Err(e);
        }
        Ok(started)
    }

    /// Waits until every node's stream is up.
    async fn connected(&self) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + PoolWorkload::STREAM_PATIENCE;
        for (node, id) in self.nodes.iter().zip(&self.ids) {
            let mut status = node
                .push_status()
                .expect("a node built with push has a status");
            let up = tokio::time::timeout_at(deadline, status.wait_for(|s| s.connected))
                .await
                .is_ok_and(|reached| reached.is_ok());
            if !up {
                let last: PushStatus = status.borrow().clone();
                return Err(Error::unavailable(format!(
                    "push node {id}: no stream within {:?} (last error: {})",
                    PoolWorkload::STREAM_PATIENCE,
                    last.last_error.as_deref().unwrap_or("none")
                )));
            }
        }
        Ok(())
    }

    /// The node ids, node `n` at `n`.
    pub(crate) fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Closes every node's stream; returns each node's stream server by id.
    pub(crate) async fn shutdown(self) -> BTreeMap<String, usize> {
        for node in &self.nodes {
            node.shutdown().await;
        }
        self.ids.into_iter().zip(self.stream_server).collect()
    }
}
