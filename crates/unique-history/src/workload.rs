//! The workload driver: many clients over few keys, over the real HTTP wire.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use unique_client::Transport;
use unique_client_http::HttpTransport;
use unique_core::{ClaimInput, Error, Key, Owner};

use crate::history::{History, Listed, OpKind, Outcome, Recorder};
use crate::report::Counts;

/// After its duration, a run goes on until it has every kind of answered operation a
/// clean report needs ([`Counts::missing`]), for at most this many times the duration: on
/// a loaded machine a short run can end before, say, any release held.
const OVERTIME_FACTOR: u32 = 10;

/// How often the overtime watcher counts the history.
const OVERTIME_POLL: Duration = Duration::from_millis(100);

/// How often each kind of operation is picked, as relative weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    /// A claim with a fresh claim_id.
    pub claim: u32,
    /// The client's latest claim sent again with its claim_id (a claim when it has none
    /// yet).
    pub replay: u32,
    /// A read of the key.
    pub read: u32,
    /// A release of the gen the client's latest claim got (a read when it holds none).
    pub release: u32,
    /// A late retry: an earlier claim of the client on a key, sent again after the client
    /// claimed that key once more (a retry arriving after the login was replaced; the
    /// server must answer it `superseded`, C9). A claim when it has none yet.
    pub stale_retry: u32,
    /// A listing of a user's sessions on every slot (C10).
    pub list: u32,
}

impl Default for Mix {
    /// 30 % claims, 10 % replays, 5 % late retries, 35 % reads, 15 % releases, 5 % listings.
    fn default() -> Self {
        Self {
            claim: 30,
            replay: 10,
            read: 35,
            release: 15,
            stale_retry: 5,
            list: 5,
        }
    }
}

/// A workload: clients spread over servers, racing over a few keys for a while.
///
/// Client `i` talks to `servers[i % servers.len()]` over its own connection pool.
#[derive(Debug, Clone)]
pub struct Workload {
    servers: Vec<String>,
    clients: usize,
    keys: i64,
    slots: Vec<String>,
    duration: Duration,
    project: String,
    mix: Mix,
    request_timeout: Duration,
    seed: u64,
}

/// Where a client's sessions receive kicks: a loopback port nothing listens on, so a kick
/// is refused at once (`connect-error`) and the claim goes on without waiting.
fn refused_kick_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("bind an ephemeral loopback port")
}

impl Workload {
    /// 24 clients over 4 users, each on the default slot and slot `"mobile"` (8 keys), for
    /// 3 s with the default [`Mix`], against these server base URLs (`http://127.0.0.1:PORT`).
    pub fn new<S: Into<String>>(servers: impl IntoIterator<Item = S>) -> Self {
        Self {
            servers: servers.into_iter().map(Into::into).collect(),
            clients: 24,
            keys: 4,
            slots: vec![String::new(), "mobile".to_owned()],
            duration: Duration::from_secs(3),
            project: "history".to_owned(),
            mix: Mix::default(),
            request_timeout: Duration::from_secs(5),
            seed: fastrand::u64(..),
        }
    }

    /// Concurrent clients (at least 1).
    #[must_use]
    pub fn clients(mut self, clients: usize) -> Self {
        self.clients = clients.max(1);
        self
    }

    /// Users they share (at least 1): uids `1..=keys`, each on every slot of
    /// [`slots`](Self::slots).
    #[must_use]
    pub fn keys(mut self, keys: i64) -> Self {
        self.keys = keys.max(1);
        self
    }

    /// The slots of each user the clients log in on (`""` is the default slot); the
    /// default slot alone when empty. Default: `""` and `"mobile"`.
    #[must_use]
    pub fn slots<S: Into<String>>(mut self, slots: impl IntoIterator<Item = S>) -> Self {
        self.slots = slots.into_iter().map(Into::into).collect();
        if self.slots.is_empty() {
            self.slots.push(String::new());
        }
        self
    }

    /// How long clients keep starting operations.
    #[must_use]
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// The keys' project, so runs sharing a store use their own keys. Default `history`;
    /// the env is always `run`.
    #[must_use]
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.project = project.into();
        self
    }

    /// The operation mix.
    #[must_use]
    pub fn mix(mut self, mix: Mix) -> Self {
        self.mix = mix;
        self
    }

    /// Each request's bound; a request without an answer by then is indeterminate.
    /// Default 5 s.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The seed of the clients' choices (random by default).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Runs the clients until the duration is over (and, past it, until every kind of
    /// operation has been answered at least once, within ten times the duration) and
    /// returns every operation recorded.
    ///
    /// # Errors
    ///
    /// `InvalidParams` when there is no server or a base URL is not a valid one.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime, when no loopback port can be bound, or when a
    /// client task panics.
    pub async fn run(&self) -> Result<History, Error> {
        if self.servers.is_empty() {
            return Err(Error::invalid("a workload needs at least one server"));
        }
        let recorder = Recorder::new();
        let stop = Arc::new(AtomicBool::new(false));
        let kick_port = refused_kick_port();
        let keys: Vec<Key> = (1..=self.keys)
            .flat_map(|uid| {
                self.slots
                    .iter()
                    .map(move |slot| Key::new(self.project.as_str(), "run", uid).with_slot(slot))
            })
            .collect();
        let mut tasks = Vec::with_capacity(self.clients);
        for id in 0..self.clients {
            let transport = HttpTransport::builder(self.servers[id % self.servers.len()].as_str())
                .timeout(self.request_timeout)
                .build()?;
            let client = Client {
                id,
                transport,
                recorder: recorder.clone(),
                rng: fastrand::Rng::with_seed(self.seed.wrapping_add(id as u64)),
                endpoint: format!("http://127.0.0.1:{kick_port}/kick/{id}"),
                keys: keys.clone(),
                last: vec![None; keys.len()],
                earlier: vec![None; keys.len()],
                latest: None,
                retry_due: false,
                claims: 0,
                mix: self.mix,
            };
            tasks.push(tokio::spawn(client.run(stop.clone())));
        }
        self.stop_when_done(&recorder, &stop).await;
        for task in tasks {
            if let Err(e) = task.await {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        Ok(recorder.history())
    }
}

impl Workload {
    /// Waits out the duration, then for full coverage or the overtime limit, and tells the
    /// clients to stop.
    async fn stop_when_done(&self, recorder: &Recorder, stop: &AtomicBool) {
        let started = Instant::now();
        tokio::time::sleep(self.duration).await;
        let limit = started + self.duration * OVERTIME_FACTOR;
        while Instant::now() < limit && Counts::of(&recorder.history()).missing().is_some() {
            tokio::time::sleep(OVERTIME_POLL).await;
        }
        stop.store(true, Ordering::Relaxed);
    }
}

/// A client's last claim on one key: its claim_id, and its gen when it was answered.
#[derive(Debug, Clone)]
struct Last {
    claim_id: String,
    generation: Option<i64>,
}

struct Client {
    id: usize,
    transport: HttpTransport,
    recorder: Recorder,
    rng: fastrand::Rng,
    endpoint: String,
    keys: Vec<Key>,
    last: Vec<Option<Last>>,
    /// Per key, the claim_id of the client's claim before `last` (a late retry sends it).
    earlier: Vec<Option<String>>,
    /// The key of the latest claim sent.
    latest: Option<usize>,
    /// The latest claim has no answer: retry it next.
    retry_due: bool,
    claims: u64,
    mix: Mix,
}

impl Client {
    async fn run(mut self, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            let (index, kind) = self.pick();
            let outcome = self.perform(index, kind).await;
            if matches!(outcome, Outcome::Indeterminate(_)) {
                // A server that is down answers at once: back off a little (as a real
                // client would) rather than fill the history with refused connections.
                let pause = Duration::from_millis(self.rng.u64(5..=30));
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// The next operation, drawn from the mix: claims and reads on a random key, listings of
    /// a random key's user; replays and releases on the key of the client's latest claim, as
    /// a retry or a logout follows the login it belongs to.
    fn pick(&mut self) -> (usize, OpKind) {
        let Mix {
            claim,
            replay,
            read,
            release,
            stale_retry,
            list,
        } = self.mix;
        let mut roll = self
            .rng
            .u32(..(claim + replay + read + release + stale_retry + list).max(1));
        let random = self.rng.usize(..self.keys.len());
        let latest = self
            .latest
            .and_then(|index| self.last[index].as_ref().map(|last| (index, last)));
        // A claim without an answer is retried first, with its claim_id, as a claimer does.
        if let Some((index, last)) = latest.filter(|_| self.retry_due) {
            self.retry_due = false;
            let claim_id = last.claim_id.clone();
            return (index, OpKind::Replay { claim_id });
        }
        if roll < claim || (roll < claim + replay && latest.is_none()) {
            self.claims += 1;
            let claim_id = format!("c{}-{}", self.id, self.claims);
            return (random, OpKind::Claim { claim_id });
        }
        roll -= claim;
        if let (true, Some((index, last))) = (roll < replay, latest) {
            let claim_id = last.claim_id.clone();
            return (index, OpKind::Replay { claim_id });
        }
        roll = roll.saturating_sub(replay);
        if roll < stale_retry {
            if let Some(claim_id) = self.earlier[random].clone() {
                return (random, OpKind::Replay { claim_id });
            }
            self.claims += 1;
            let claim_id = format!("c{}-{}", self.id, self.claims);
            return (random, OpKind::Claim { claim_id });
        }
        roll -= stale_retry;
        if roll < list {
            return (random, OpKind::List);
        }
        roll -= list;
        match latest.and_then(|(index, last)| Some((index, last.generation?))) {
            Some((index, generation)) if roll >= read => (index, OpKind::Release { generation }),
            _ => (random, OpKind::Read),
        }
    }

    /// Sends one operation, records it, and remembers what the client now holds.
    async fn perform(&mut self, index: usize, kind: OpKind) -> Outcome {
        let key = &self.keys[index];
        let pending = if kind == OpKind::List {
            // A listing is of the user: recorded on its default-slot key.
            self.recorder
                .begin(self.id, &key.user().key(""), kind.clone())
        } else {
            self.recorder.begin(self.id, key, kind.clone())
        };
        let outcome = match &kind {
            OpKind::Claim { claim_id } | OpKind::Replay { claim_id } => {
                // The claim_id rides in the owner's cluster, so a read names who holds the key.
                let input = ClaimInput {
                    key: key.clone(),
                    owner: Owner::new("history", claim_id.as_str(), self.endpoint.as_str()),
                    claim_id: claim_id.clone(),
                };
                let outcome = match self.transport.claim(&input).await {
                    Ok(answer) => Outcome::Claimed {
                        generation: answer.generation,
                        replayed: answer.replayed,
                    },
                    Err(e) => Outcome::from_error(&e),
                };
                let generation = match &outcome {
                    Outcome::Claimed { generation, .. } => Some(*generation),
                    _ => None,
                };
                self.retry_due = matches!(outcome, Outcome::Indeterminate(_));
                if !matches!(outcome, Outcome::Failed(_) | Outcome::Superseded { .. }) {
                    self.latest = Some(index);
                    let previous = self.last[index].replace(Last {
                        claim_id: claim_id.clone(),
                        generation,
                    });
                    if let Some(previous) = previous.filter(|p| p.claim_id != *claim_id) {
                        self.earlier[index] = Some(previous.claim_id);
                    }
                }
                outcome
            }
            OpKind::Read => match self.transport.current(key).await {
                Ok(view) => Outcome::Read {
                    generation: view.generation,
                    holder: view.owner.map(|owner| owner.cluster),
                },
                Err(e) => Outcome::from_error(&e),
            },
            OpKind::List => match self.transport.sessions(&key.user()).await {
                Ok(sessions) => Outcome::Listed {
                    sessions: sessions
                        .into_iter()
                        .map(|session| Listed {
                            slot: session.slot,
                            generation: session.generation,
                            holder: session.owner.cluster,
                        })
                        .collect(),
                },
                Err(e) => Outcome::from_error(&e),
            },
            OpKind::Release { generation } => {
                match self.transport.release(key, *generation).await {
                    Ok(released) => {
                        if let Some(last) = &mut self.last[index] {
                            // Logged out, or replaced meanwhile: either way no longer held.
                            last.generation = None;
                        }
                        Outcome::Released { released }
                    }
                    Err(e) => Outcome::from_error(&e),
                }
            }
        };
        pending.finish(outcome.clone());
        outcome
    }
}
