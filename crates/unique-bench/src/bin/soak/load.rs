//! The load: workers that log users in, take their sessions over, log them out (a release,
//! or an operator's logout), ensure, renew and release room leases, register nodes, and send
//! requests with bad tokens. Each worker owns its users, rooms and nodes, so the operations
//! on one key come one after the other and the history knows exactly what was acknowledged.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use unique_wire::{
    CLAIM_PATH, ClaimAnswer, LEASE_ENSURE_PATH, LEASE_RELEASE_PATH, LOGOUT_PATH, LeaseAnswer,
    LogoutAnswer, NODE_DEREGISTER_PATH, NODE_REGISTER_PATH, NodeAnswer, RELEASE_PATH,
    ReleaseAnswer,
};

use crate::history::{History, Loss, SessionKey};
use crate::http::{Answer, Conn};

/// The project every request names.
pub(crate) const PROJECT: &str = "soak";
/// The token of the load: every env of [`PROJECT`], with the admin role (for logouts).
pub(crate) const TOKEN: &str = "unique-soak-token-0123456789abcdef";
/// A valid token scoped to another project: the noise's 403s.
pub(crate) const OTHER_TOKEN: &str = "unique-soak-other-0123456789abcdef";
/// A token the server does not know: the noise's 401s.
const WRONG_TOKEN: &str = "unique-soak-wrong-0123456789abcdef";
/// Each user's slots: a user has at most two sessions, far below any per-user slot cap.
const SLOTS: [&str; 2] = ["", "mobile"];
/// Ttl of the leases and registrations: long enough to outlive a restart, so the check
/// after it can require them.
const TTL_MS: u64 = 60_000;
/// Pause after a failed connect, so a dead server is not spun on.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);

/// What the workers, the episodes and the reporter share.
pub(crate) struct Shared {
    /// Where the server listens now (a restart picks a new port).
    pub(crate) addr: RwLock<SocketAddr>,
    /// The server's pid now.
    pub(crate) pid: AtomicU32,
    /// How many times the server was started.
    pub(crate) lives: AtomicUsize,
    /// Each operation holds it shared; a check takes it alone, so it sees no request in flight.
    pub(crate) gate: tokio::sync::RwLock<()>,
    pub(crate) stop: AtomicBool,
    pub(crate) history: Mutex<History>,
    pub(crate) minute: Mutex<Minute>,
    /// Claims answered 200, and claims answered 503, since the start.
    pub(crate) claims_ok: AtomicU64,
    pub(crate) claims_refused: AtomicU64,
    /// Acknowledgements the server broke, as the load saw them (lease epochs).
    pub(crate) losses: Mutex<Vec<Loss>>,
    /// `http://127.0.0.1:PORT`: the kick receiver the owners' endpoints point at.
    pub(crate) kick_base: String,
}

impl Shared {
    pub(crate) fn new(addr: SocketAddr, pid: u32, kick_base: String) -> Self {
        Self {
            addr: RwLock::new(addr),
            pid: AtomicU32::new(pid),
            lives: AtomicUsize::new(1),
            gate: tokio::sync::RwLock::new(()),
            stop: AtomicBool::new(false),
            history: Mutex::new(History::default()),
            minute: Mutex::new(Minute::new()),
            claims_ok: AtomicU64::new(0),
            claims_refused: AtomicU64::new(0),
            losses: Mutex::new(Vec::new()),
            kick_base,
        }
    }

    fn error(&self, kind: String) {
        *lock(&self.minute).errors.entry(kind).or_default() += 1;
    }
}

/// A std mutex's guard, poisoned or not (a panicking worker has already failed the run).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One minute's counts.
pub(crate) struct Minute {
    pub(crate) requests: u64,
    pub(crate) claims_ok: u64,
    /// Latency of every answered claim, in microseconds.
    pub(crate) claim_latency: Histogram<u64>,
    /// Noise refused as it should be (401, 403).
    pub(crate) noise_refused: u64,
    pub(crate) errors: BTreeMap<String, u64>,
}

impl Minute {
    pub(crate) fn new() -> Self {
        Self {
            requests: 0,
            claims_ok: 0,
            claim_latency: Histogram::new_with_bounds(1, 600_000_000, 3)
                .expect("valid histogram bounds"),
            noise_refused: 0,
            errors: BTreeMap::new(),
        }
    }
}

/// Which keys a worker owns.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Share {
    pub(crate) index: usize,
    /// How many workers there are: worker `index` owns the uids `index + 1 + k * workers`.
    pub(crate) workers: usize,
    /// How many uids each worker owns.
    pub(crate) users: u64,
    pub(crate) rooms: usize,
}

/// A session the worker holds, as the server last acknowledged it.
struct Held {
    generation: i64,
    owner: usize,
    claim_id: String,
}

struct Worker {
    shared: Arc<Shared>,
    share: Share,
    conn: Option<Conn>,
    rng: fastrand::Rng,
    sessions: HashMap<SessionKey, Held>,
    /// Each room's holder (node, token) as last answered.
    rooms: HashMap<usize, (usize, String)>,
    claims: u64,
}

/// Runs one worker until `stop`.
pub(crate) async fn worker(shared: Arc<Shared>, share: Share) {
    let mut worker = Worker {
        shared,
        share,
        conn: None,
        rng: fastrand::Rng::with_seed(share.index as u64),
        sessions: HashMap::new(),
        rooms: HashMap::new(),
        claims: 0,
    };
    while !worker.shared.stop.load(Ordering::Relaxed) {
        let shared = Arc::clone(&worker.shared);
        let gate = shared.gate.read().await;
        if worker.conn.is_none() {
            let addr = *shared
                .addr
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match Conn::connect(addr).await {
                Ok(conn) => worker.conn = Some(conn),
                Err(broken) => {
                    shared.error(broken.0);
                    drop(gate);
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            }
        }
        match worker.rng.u32(0..100) {
            0..70 => worker.session().await,
            70..88 => worker.lease().await,
            88..92 => worker.node().await,
            _ => worker.noise().await,
        }
    }
}

impl Worker {
    /// Sends one request; `None` (the error counted, the connection dropped) when no
    /// answer came.
    async fn call(
        &mut self,
        family: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> Option<(Answer, Duration)> {
        let conn = self.conn.as_mut()?;
        let started = Instant::now();
        let sent = conn.send(path, token, Some(body)).await;
        let took = started.elapsed();
        lock(&self.shared.minute).requests += 1;
        match sent {
            Ok(answer) => Some((answer, took)),
            Err(broken) => {
                self.conn = None;
                self.shared.error(format!("{family} {}", broken.0));
                None
            }
        }
    }

    fn key_json((uid, slot): SessionKey) -> String {
        let slot = match SLOTS[slot] {
            "" => String::new(),
            name => format!(r#","slot":"{name}""#),
        };
        format!(r#""project":"{PROJECT}","env":"prod","uid":{uid}{slot}"#)
    }

    fn endpoint(&self, owner: usize) -> String {
        format!(
            "{}/kick/{}/{owner}",
            self.shared.kick_base, self.share.index
        )
    }

    async fn session(&mut self) {
        let per = self.share.users;
        let uid = 1 + self.share.index as u64 + self.rng.u64(0..per) * self.share.workers as u64;
        let key = (uid, self.rng.usize(0..SLOTS.len()));
        let Some(held) = self.sessions.get(&key) else {
            let owner = self.rng.usize(0..2);
            self.claim(key, owner, None).await;
            return;
        };
        let (generation, owner, claim_id) = (held.generation, held.owner, held.claim_id.clone());
        match self.rng.u32(0..100) {
            0..45 => self.claim(key, 1 - owner, None).await,
            45..55 => self.claim(key, owner, Some((claim_id, generation))).await,
            55..90 => self.release(key, generation).await,
            _ => self.logout(key).await,
        }
    }

    /// A login of `key` for `owner` (a takeover when another owner holds it), or the
    /// replay of `replay`'s claim_id, which must answer its gen again.
    async fn claim(&mut self, key: SessionKey, owner: usize, replay: Option<(String, i64)>) {
        let claim_id = if let Some((claim_id, _)) = &replay {
            claim_id.clone()
        } else {
            self.claims += 1;
            format!("w{}-{}", self.share.index, self.claims)
        };
        let endpoint = self.endpoint(owner);
        let body = format!(
            r#"{{{},"owner":{{"region":"soak","cluster":"c1","endpoint":"{endpoint}"}},"claim_id":"{claim_id}"}}"#,
            Self::key_json(key)
        );
        self.sessions.remove(&key);
        let Some((answer, took)) = self.call("claim", CLAIM_PATH, Some(TOKEN), &body).await else {
            return;
        };
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let _ = lock(&self.shared.minute)
            .claim_latency
            .record(micros.max(1));
        let parsed = (answer.status == 200)
            .then(|| serde_json::from_slice::<ClaimAnswer>(&answer.body).ok())
            .flatten();
        let Some(claimed) = parsed else {
            if answer.status == 503 {
                self.shared.claims_refused.fetch_add(1, Ordering::Relaxed);
            }
            self.shared.error(format!("claim {}", answer.kind()));
            return;
        };
        if let Some((_, generation)) = replay
            && (!claimed.replayed || claimed.generation != generation)
        {
            self.shared.error(format!(
                "claim replay answered gen {} (replayed {}) for gen {generation}",
                claimed.generation, claimed.replayed
            ));
        }
        self.shared.claims_ok.fetch_add(1, Ordering::Relaxed);
        lock(&self.shared.minute).claims_ok += 1;
        lock(&self.shared.history).claimed(key, claimed.generation, &endpoint);
        self.sessions.insert(
            key,
            Held {
                generation: claimed.generation,
                owner,
                claim_id,
            },
        );
    }

    /// A user's own logout: the fenced release of the gen it holds.
    async fn release(&mut self, key: SessionKey, generation: i64) {
        let body = format!(r#"{{{},"gen":{generation}}}"#, Self::key_json(key));
        self.sessions.remove(&key);
        let answer = self.call("release", RELEASE_PATH, Some(TOKEN), &body).await;
        match answer.map(|(a, _)| a) {
            Some(answer) if answer.status == 200 => {
                match serde_json::from_slice::<ReleaseAnswer>(&answer.body) {
                    Ok(ReleaseAnswer { released: true }) => {
                        lock(&self.shared.history).released(key, generation);
                    }
                    Ok(_) => {}
                    Err(e) => self.shared.error(format!("release unreadable answer: {e}")),
                }
            }
            other => {
                if let Some(answer) = other {
                    self.shared.error(format!("release {}", answer.kind()));
                }
                lock(&self.shared.history).release_unanswered(key);
            }
        }
    }

    /// An operator's logout of the key's current session.
    async fn logout(&mut self, key: SessionKey) {
        let body = format!(r#"{{{},"reason":"soak"}}"#, Self::key_json(key));
        self.sessions.remove(&key);
        let answer = self.call("logout", LOGOUT_PATH, Some(TOKEN), &body).await;
        match answer.map(|(a, _)| a) {
            Some(answer) if answer.status == 200 => {
                match serde_json::from_slice::<LogoutAnswer>(&answer.body) {
                    Ok(LogoutAnswer {
                        released: true,
                        generation,
                        ..
                    }) => lock(&self.shared.history).released(key, generation),
                    Ok(_) => {}
                    Err(e) => self.shared.error(format!("logout unreadable answer: {e}")),
                }
            }
            other => {
                if let Some(answer) = other {
                    self.shared.error(format!("logout {}", answer.kind()));
                }
                lock(&self.shared.history).release_unanswered(key);
            }
        }
    }

    fn room_name(&self, room: usize) -> String {
        format!("w{}-room-{room}", self.share.index)
    }

    fn node_name(&self, node: usize) -> String {
        format!("w{}-node-{node}", self.share.index)
    }

    async fn lease(&mut self) {
        let room = self.rng.usize(0..self.share.rooms.max(1));
        match self.rooms.get(&room).cloned() {
            None => {
                let node = self.rng.usize(0..2);
                self.ensure(room, node).await;
            }
            Some((node, token)) => match self.rng.u32(0..100) {
                // A renewal, the other node asking (held elsewhere), a release.
                0..60 => self.ensure(room, node).await,
                60..75 => self.ensure(room, 1 - node).await,
                _ => self.lease_release(room, node, &token).await,
            },
        }
    }

    async fn ensure(&mut self, room: usize, node: usize) {
        let (name, node_name) = (self.room_name(room), self.node_name(node));
        let body = format!(
            r#"{{"project":"{PROJECT}","room":"{name}","node":"{node_name}","ttl_ms":{TTL_MS}}}"#
        );
        let sent = Instant::now();
        self.rooms.remove(&room);
        let Some((answer, _)) = self
            .call("lease", LEASE_ENSURE_PATH, Some(TOKEN), &body)
            .await
        else {
            return;
        };
        let lease = (answer.status == 200)
            .then(|| serde_json::from_slice::<LeaseAnswer>(&answer.body).ok())
            .flatten();
        let Some(lease) = lease else {
            self.shared.error(format!("lease ensure {}", answer.kind()));
            return;
        };
        let ours = lease.node == node_name;
        let checked = lock(&self.shared.history).lease(&lease, sent, ours);
        if let Err(loss) = checked {
            lock(&self.shared.losses).push(loss);
        }
        let holder = if ours { node } else { 1 - node };
        self.rooms.insert(room, (holder, lease.token));
    }

    async fn lease_release(&mut self, room: usize, node: usize, token: &str) {
        let (name, node_name) = (self.room_name(room), self.node_name(node));
        let body = format!(
            r#"{{"project":"{PROJECT}","room":"{name}","node":"{node_name}","token":"{token}"}}"#
        );
        self.rooms.remove(&room);
        let answer = self
            .call("lease", LEASE_RELEASE_PATH, Some(TOKEN), &body)
            .await;
        match answer.map(|(a, _)| a) {
            Some(answer) if answer.status == 200 => {
                lock(&self.shared.history).lease_released(&name);
            }
            other => {
                if let Some(answer) = other {
                    self.shared
                        .error(format!("lease release {}", answer.kind()));
                }
                lock(&self.shared.history).lease_release_unanswered(&name);
            }
        }
    }

    async fn node(&mut self) {
        let node = self.rng.usize(0..2);
        let name = self.node_name(node);
        if self.rng.u32(0..100) < 85 {
            let body = format!(
                r#"{{"project":"{PROJECT}","node":"{name}","addr":"127.0.0.1:7000","ttl_ms":{TTL_MS}}}"#
            );
            let sent = Instant::now();
            let Some((answer, _)) = self
                .call("node", NODE_REGISTER_PATH, Some(TOKEN), &body)
                .await
            else {
                return;
            };
            match serde_json::from_slice::<NodeAnswer>(&answer.body) {
                Ok(node) if answer.status == 200 => {
                    lock(&self.shared.history).registered(&name, sent, node.ttl_left_ms);
                }
                _ => self
                    .shared
                    .error(format!("node register {}", answer.kind())),
            }
        } else {
            let body = format!(r#"{{"project":"{PROJECT}","node":"{name}"}}"#);
            let answer = self
                .call("node", NODE_DEREGISTER_PATH, Some(TOKEN), &body)
                .await;
            let answered = answer.as_ref().is_some_and(|(a, _)| a.status == 200);
            if let Some((answer, _)) = answer.filter(|(a, _)| a.status != 200) {
                self.shared
                    .error(format!("node deregister {}", answer.kind()));
            }
            lock(&self.shared.history).deregistered(&name, answered);
        }
    }

    /// A request the server must refuse: an unknown token (401), no token (401), or a
    /// token of another project (403). Anything else is an error.
    async fn noise(&mut self) {
        let key = (1 + self.share.index as u64, 0);
        let claim = format!(
            r#"{{{},"owner":{{"endpoint":"{}"}},"claim_id":"noise"}}"#,
            Self::key_json(key),
            self.endpoint(0)
        );
        let ensure =
            format!(r#"{{"project":"{PROJECT}","room":"noise","node":"noise","ttl_ms":{TTL_MS}}}"#);
        let (path, token, body, expected) = match self.rng.u32(0..4) {
            0 => (CLAIM_PATH, Some(WRONG_TOKEN), claim, 401),
            1 => (LEASE_ENSURE_PATH, Some(WRONG_TOKEN), ensure, 401),
            2 => (CLAIM_PATH, None, claim, 401),
            _ => (CLAIM_PATH, Some(OTHER_TOKEN), claim, 403),
        };
        if let Some((answer, _)) = self.call("noise", path, token, &body).await {
            if answer.status == expected {
                lock(&self.shared.minute).noise_refused += 1;
            } else {
                self.shared.error(format!(
                    "noise on {path} answered {} (not {expected})",
                    answer.kind()
                ));
            }
        }
    }
}
