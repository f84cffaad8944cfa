#![doc = include_str!("../README.md")]

mod keys;
mod peer_client;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;
use unique_arbiter_http::{KickDelivery, KickHub, PeerSecret, PushedKick, StreamDirectory};
use unique_core::{KickDetail, KickOutcome, KickPayload, LogBudget, async_trait};
use unique_lease::{LeaseError, NodeRegistry};
use unique_wire::{PeerAckBody, PeerKickBody};

pub use keys::{SERVER_PREFIX, STREAM_PREFIX, server_key, stream_key};
use peer_client::PeerClient;

/// Default [`RelayConfig::server_ttl`].
pub const DEFAULT_SERVER_TTL: Duration = Duration::from_secs(30);
/// Default [`RelayConfig::stream_ttl`].
pub const DEFAULT_STREAM_TTL: Duration = Duration::from_mins(3);
/// The counter of kicks forwarded to the server holding the node's stream, by `outcome`
/// (`confirmed` or a kick detail's wire name).
pub const KICK_FORWARDS_TOTAL: &str = "unique_kick_forwards_total";

/// Failed registrations and forwards logged whole per 10 s (a store or a peer that is down
/// fails every one; the forward counter counts them all).
static FAILURES_LOGGED: LogBudget = LogBudget::new(20, Duration::from_secs(10));

/// How a server joins the others.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// The base URL the other servers reach this one at (`http://10.0.0.5:7070`): its own
    /// address, never a load balancer's.
    pub url: String,
    /// The secret every server of the deployment shares.
    pub secret: PeerSecret,
    /// How long this server's registration lasts unless renewed (every sixth of it, so five
    /// renewals in a row may fail, a store slow under load, before it lapses): a server that
    /// dies is looked up no more within this, and others' kicks for its nodes fail at its
    /// address meanwhile (`connect-error`).
    pub server_ttl: Duration,
    /// How long a stream's registration lasts unless renewed (every third of it, while the
    /// stream is open here).
    pub stream_ttl: Duration,
}

impl RelayConfig {
    /// The defaults for a server reached at `url`.
    pub fn new(url: impl Into<String>, secret: PeerSecret) -> Self {
        Self {
            url: url.into(),
            secret,
            server_ttl: DEFAULT_SERVER_TTL,
            stream_ttl: DEFAULT_STREAM_TTL,
        }
    }
}

/// Delivers push kicks wherever the node's stream is held: on this server through its
/// [`KickHub`], on another through that server's `POST /v1/peer/kick`, found in the node
/// registry of the store every server shares. Clones share it.
#[derive(Clone)]
pub struct KickRelay {
    inner: Arc<Inner>,
}

struct Inner {
    hub: KickHub,
    registry: Arc<dyn NodeRegistry>,
    /// This run's name: a random id, new at every start.
    epoch: String,
    config: RelayConfig,
    peers: PeerClient,
    /// Other servers' URLs by epoch, as last read, with when: an epoch's URL never changes,
    /// so a read is trusted for [`RelayConfig::server_ttl`] (a store slow or down then costs
    /// no forward its lookup).
    servers: Mutex<HashMap<String, (String, Instant)>>,
}

impl KickRelay {
    /// Registers this server (a new epoch, under [`RelayConfig::url`]) in `registry` and
    /// starts renewing the registration and those of the streams `hub` holds. Give the relay
    /// to the service (`ArbiterService::with_peers`, which also attaches it to the hub) and,
    /// as the [`KickDelivery`], to the server's kicker.
    ///
    /// # Errors
    ///
    /// The first registration failed (the store is down, or refuses the URL).
    pub async fn start(
        hub: KickHub,
        registry: Arc<dyn NodeRegistry>,
        config: RelayConfig,
    ) -> Result<Self, LeaseError> {
        let epoch = uuid::Uuid::new_v4().simple().to_string();
        registry
            .register_node(&server_key(&epoch), &config.url, config.server_ttl)
            .await?;
        metrics::describe_counter!(
            KICK_FORWARDS_TOTAL,
            "Push kicks forwarded to the server holding the node's stream, by outcome."
        );
        let relay = Self {
            inner: Arc::new(Inner {
                hub,
                registry,
                epoch,
                peers: PeerClient::new(&config.secret),
                config,
                servers: Mutex::new(HashMap::new()),
            }),
        };
        tokio::spawn(upkeep(Arc::downgrade(&relay.inner)));
        Ok(relay)
    }

    /// This run's epoch, as registered.
    pub fn epoch(&self) -> &str {
        &self.inner.epoch
    }

    /// Removes this server's registration, so the others stop forwarding to it at once
    /// (its streams' registrations then name a server that is gone): call it on shutdown.
    pub async fn leave(&self) {
        let key = server_key(&self.inner.epoch);
        if let Err(e) = self.inner.registry.unregister_node(&key).await {
            tracing::warn!(error = %e, "cannot remove this server's kick-relay registration");
        }
    }
}

/// Renews this server's registration every third of its ttl, and those of the streams held
/// here every third of theirs, until the relay is dropped.
async fn upkeep(relay: Weak<Inner>) {
    let Some(period) = relay.upgrade().map(|r| r.config.server_ttl / 6) else {
        return;
    };
    let mut streams_renewed = Instant::now();
    loop {
        tokio::time::sleep(period).await;
        let Some(relay) = relay.upgrade() else {
            return;
        };
        let key = server_key(&relay.epoch);
        let config = &relay.config;
        // Logged every time (at most once a period): while it fails, this server's streams
        // are about to be unreachable from the others.
        if let Err(e) = relay
            .registry
            .register_node(&key, &config.url, config.server_ttl)
            .await
        {
            tracing::warn!(error = %e, "cannot renew this server's kick-relay registration");
        }
        if streams_renewed.elapsed() >= config.stream_ttl / 3 {
            streams_renewed = Instant::now();
            for node in relay.hub.nodes() {
                // Checked again just before each write: a stream that left meanwhile may be
                // registered on another server by now.
                if relay.hub.holds(&node) {
                    let _ = relay.register_stream(&node).await;
                }
            }
        }
    }
}

impl Inner {
    /// Registers `node`'s stream as held here; `false` (logged) when the write failed.
    async fn register_stream(&self, node: &str) -> bool {
        let key = stream_key(node);
        let ttl = self.config.stream_ttl;
        match self.registry.register_node(&key, &self.epoch, ttl).await {
            Ok(_) => true,
            Err(e) => {
                if FAILURES_LOGGED.admit("kick relay") {
                    tracing::warn!(%node, error = %e, "cannot register a kick stream for the other servers");
                }
                false
            }
        }
    }

    /// The epoch and URL of the server holding `node`'s stream, when one is registered and
    /// alive.
    async fn locate(&self, node: &str) -> Result<Option<(String, String)>, LeaseError> {
        let Some(stream) = self.registry.lookup_node(&stream_key(node)).await? else {
            return Ok(None);
        };
        let epoch = stream.grpc_addr;
        if epoch == self.epoch {
            return Ok(Some((epoch, self.config.url.clone())));
        }
        if let Some(url) = self.known_server(&epoch) {
            return Ok(Some((epoch, url)));
        }
        let Some(server) = self.registry.lookup_node(&server_key(&epoch)).await? else {
            return Ok(None);
        };
        let mut servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        let ttl = self.config.server_ttl;
        servers.retain(|_, (_, read)| read.elapsed() < ttl);
        servers.insert(epoch.clone(), (server.grpc_addr.clone(), Instant::now()));
        Ok(Some((epoch, server.grpc_addr)))
    }

    /// The URL of the server of `epoch`, when read within the server ttl.
    fn known_server(&self, epoch: &str) -> Option<String> {
        let servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        let (url, read) = servers.get(epoch)?;
        (read.elapsed() < self.config.server_ttl).then(|| url.clone())
    }
}

#[async_trait]
impl KickDelivery for KickRelay {
    async fn deliver(
        &self,
        node: &str,
        payload: &KickPayload,
        kick: PushedKick,
        timeout: Duration,
    ) -> KickOutcome {
        let relay = &self.inner;
        if relay.hub.holds(node) {
            return relay.hub.deliver(node, payload, kick, timeout).await;
        }
        let deadline = Instant::now() + timeout;
        let located = match tokio::time::timeout_at(deadline, relay.locate(node)).await {
            Err(_) => return KickOutcome::Failed(KickDetail::Timeout),
            Ok(Err(e)) => {
                if FAILURES_LOGGED.admit("kick relay") {
                    tracing::warn!(%node, error = %e, "cannot look up a node's kick stream");
                }
                return KickOutcome::Failed(KickDetail::ConnectError);
            }
            Ok(Ok(located)) => located,
        };
        let Some((epoch, url)) = located else {
            return KickOutcome::Failed(KickDetail::ConnectError);
        };
        if epoch == relay.epoch {
            // Registered here: the stream left, or is just opening.
            let left = deadline.saturating_duration_since(Instant::now());
            return relay.hub.deliver(node, payload, kick, left).await;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        // The holder stops waiting a little before this server does, so its answer has time
        // to come back and a late ack still counts as the holder saw it.
        let margin = (left / 10).min(Duration::from_millis(100));
        let body = PeerKickBody {
            node: node.to_owned(),
            server_epoch: epoch,
            body: kick.body,
            signature: kick.signature,
            timeout_ms: u64::try_from(left.saturating_sub(margin).as_millis()).unwrap_or(u64::MAX),
        };
        let outcome = match tokio::time::timeout_at(deadline, relay.peers.kick(&url, &body)).await {
            Err(_) => KickOutcome::Failed(KickDetail::Timeout),
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                if FAILURES_LOGGED.admit("kick relay") {
                    tracing::warn!(%node, %url, error = %e, "cannot forward a kick");
                }
                KickOutcome::Failed(KickDetail::ConnectError)
            }
        };
        let name = match outcome {
            KickOutcome::Confirmed => "confirmed",
            KickOutcome::Failed(detail) => detail.as_str(),
        };
        metrics::counter!(KICK_FORWARDS_TOTAL, "outcome" => name).increment(1);
        outcome
    }
}

#[async_trait]
impl StreamDirectory for KickRelay {
    async fn register(&self, node: &str) -> bool {
        self.inner.register_stream(node).await
    }

    async fn forward_ack(&self, node: &str, id: &str, status: u16) -> bool {
        let relay = &self.inner;
        let Ok(Some((epoch, url))) = relay.locate(node).await else {
            return false;
        };
        if epoch == relay.epoch {
            return false;
        }
        let body = PeerAckBody {
            node: node.to_owned(),
            id: id.to_owned(),
            status,
        };
        match relay.peers.ack(&url, &body).await {
            Ok(accepted) => accepted,
            Err(e) => {
                if FAILURES_LOGGED.admit("kick relay") {
                    tracing::warn!(%node, %url, error = %e, "cannot forward an ack");
                }
                false
            }
        }
    }
}
