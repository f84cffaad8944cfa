//! Reading every acknowledged key back, with the load paused, and the kick receiver the
//! owners' endpoints point at.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use unique_wire::{
    BatchAnswer, BatchView, CURRENT_BATCH_PATH, LEASE_LOOKUP_PATH, LeaseLookupAnswer,
    MAX_BATCH_KEYS, NODE_LOOKUP_PATH, NodeLookupAnswer,
};

use crate::history::{History, Loss};
use crate::http::Conn;
use crate::load::{PROJECT, Shared, TOKEN, lock};

/// How long a read of the check keeps retrying a server that does not answer it yet.
const READ_LIMIT: Duration = Duration::from_secs(30);

/// What a check read back.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    pub(crate) sessions: usize,
    pub(crate) rooms: usize,
    pub(crate) nodes: usize,
    pub(crate) losses: Vec<Loss>,
}

/// Pauses the load (no request in flight), reads back every session key, room and node
/// the history holds, and compares.
pub(crate) async fn check(shared: &Arc<Shared>) -> Result<Checked, String> {
    let _paused = shared.gate.write().await;
    let history = lock(&shared.history).clone();
    let addr = *shared
        .addr
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut reader = Reader { addr, conn: None };
    let mut checked = Checked::default();
    let keys = history.session_keys();
    for batch in keys.chunks(MAX_BATCH_KEYS) {
        let listed: Vec<String> = batch
            .iter()
            .map(|&(uid, slot)| {
                let slot = if slot == 0 { "" } else { r#","slot":"mobile""# };
                format!(r#"{{"project":"{PROJECT}","env":"prod","uid":{uid}{slot}}}"#)
            })
            .collect();
        let body = format!(r#"{{"keys":[{}]}}"#, listed.join(","));
        let answer: BatchAnswer = reader.read(CURRENT_BATCH_PATH, &body).await?;
        for (&key, view) in batch.iter().zip(answer.views) {
            checked.sessions += 1;
            let verdict = match view {
                BatchView::View(current) => history.check_session(key, &current),
                BatchView::Failed { message, .. } => Err(Loss(format!(
                    "uid {} slot {}: unreadable: {message}",
                    key.0, key.1
                ))),
            };
            checked.losses.extend(verdict.err());
        }
    }
    check_leases(&history, &mut reader, &mut checked).await?;
    Ok(checked)
}

async fn check_leases(
    history: &History,
    reader: &mut Reader,
    checked: &mut Checked,
) -> Result<(), String> {
    for room in history.rooms() {
        let body = format!(r#"{{"project":"{PROJECT}","room":"{room}"}}"#);
        let found: LeaseLookupAnswer = reader.read(LEASE_LOOKUP_PATH, &body).await?;
        checked.rooms += 1;
        let verdict = history.check_room(&room, found.lease.as_ref(), Instant::now());
        checked.losses.extend(verdict.err());
    }
    for node in history.nodes() {
        let body = format!(r#"{{"project":"{PROJECT}","node":"{node}"}}"#);
        let found: NodeLookupAnswer = reader.read(NODE_LOOKUP_PATH, &body).await?;
        checked.nodes += 1;
        let verdict = history.check_node(&node, found.node.is_some(), Instant::now());
        checked.losses.extend(verdict.err());
    }
    Ok(())
}

struct Reader {
    addr: SocketAddr,
    conn: Option<Conn>,
}

impl Reader {
    /// The 200 answer of `path`, retried (a fresh connection each time) while the server
    /// answers otherwise, up to [`READ_LIMIT`].
    async fn read<T: serde::de::DeserializeOwned>(
        &mut self,
        path: &str,
        body: &str,
    ) -> Result<T, String> {
        let deadline = Instant::now() + READ_LIMIT;
        let mut last = String::new();
        while Instant::now() < deadline {
            if self.conn.is_none() {
                self.conn = Conn::connect(self.addr).await.ok();
            }
            if let Some(conn) = &mut self.conn {
                match conn.send(path, Some(TOKEN), Some(body)).await {
                    Ok(answer) if answer.status == 200 => {
                        return serde_json::from_slice(&answer.body)
                            .map_err(|e| format!("{path} answered an unreadable body: {e}"));
                    }
                    Ok(answer) => last = answer.kind(),
                    Err(broken) => {
                        last = broken.0;
                        self.conn = None;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "the check could not read {path} within {READ_LIMIT:?}: {last}"
        ))
    }
}

/// The kick receiver every owner's endpoint points at: it confirms every kick (200), so a
/// takeover's kick and a logout's kick take the confirmed path. Returns its base URL.
pub(crate) async fn kick_receiver() -> Result<String, String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot bind the kick receiver: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("the kick receiver has no address: {e}"))?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(confirm_kicks(stream));
        }
    });
    Ok(format!("http://{addr}"))
}

/// Answers every request on `stream` with an empty 200.
async fn confirm_kicks(mut stream: TcpStream) {
    let mut input = Vec::with_capacity(4096);
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        let whole = match request.parse(&input) {
            Ok(httparse::Status::Complete(head)) => {
                let length = request
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                    .unwrap_or(0_usize);
                (input.len() >= head + length).then_some(head + length)
            }
            Ok(httparse::Status::Partial) => None,
            Err(_) => return,
        };
        if let Some(whole) = whole {
            input.drain(..whole);
            let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
            if stream.write_all(ok).await.is_err() {
                return;
            }
            continue;
        }
        match stream.read_buf(&mut input).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
