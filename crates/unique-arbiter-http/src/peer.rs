//! Push kicks across servers (`docs/design.md#push-kicks-across-servers`): the hooks a
//! [`KickHub`] tells the streams it holds to, and the two internal routes other servers
//! forward kicks and acks through (`POST /v1/peer/kick`, `POST /v1/peer/ack`).
//!
//! The routes are authenticated by one secret every server of the deployment shares
//! ([`PeerSecret`]), never by a caller's token: a caller holding a node token cannot push a
//! kick of its own making to another node.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::header::AUTHORIZATION;
use http::{HeaderMap, Response, StatusCode};
use subtle::ConstantTimeEq;
use unique_core::{KickDetail, KickOutcome, KickPayload, async_trait};
use unique_wire::{
    ErrorBody, ErrorCode, KickAckAnswer, PeerAckBody, PeerKickAnswer, PeerKickBody, PeerRoute,
    decode_kick, parse,
};

use crate::push::{KickDelivery, KickHub, PushedKick};
use crate::service::{ResponseBody, error, error_body, json};

/// The fewest bytes a peer secret may have.
pub const MIN_PEER_SECRET_BYTES: usize = 32;

/// The longest a forwarded kick may wait for its ack on the receiving server, whatever the
/// sender asks: a bound on what one peer request can hold.
pub const MAX_PEER_KICK_WAIT: Duration = Duration::from_mins(1);

/// Where a server registers the kick streams it holds, so that the others can forward kicks
/// to it, and asks which server holds a stream it does not.
///
/// [`KickHub::attach_directory`] calls [`register`](Self::register) before a new stream's
/// `hello` line, again until it succeeds. Nothing is called when a stream ends: a
/// registration left behind names a server that no longer holds the stream, which answers a
/// forwarded kick `connect-error`, as no registration would; removing it could remove the
/// newer registration of a node that has meanwhile reconnected to another server.
#[async_trait]
pub trait StreamDirectory: Send + Sync + 'static {
    /// `node`'s stream is open here: register it. `false` when that failed (the directory
    /// logs why); the hub tries again.
    async fn register(&self, node: &str) -> bool;

    /// An ack for `node` that this server was not waiting for: hands it to the server that
    /// holds the node's stream, and says whether that one was waiting for it.
    async fn forward_ack(&self, node: &str, id: &str, status: u16) -> bool;
}

/// The secret the servers of one deployment authenticate each other's peer requests with:
/// sent as `Authorization: Bearer <secret>`, compared in constant time.
#[derive(Clone)]
pub struct PeerSecret {
    header: http::HeaderValue,
}

impl fmt::Debug for PeerSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PeerSecret(..)")
    }
}

/// Why a text is not a peer secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a peer secret must be at least {MIN_PEER_SECRET_BYTES} bytes of visible ASCII (no spaces), \
     as one line; this one is {0}"
)]
pub struct PeerSecretError(&'static str);

impl PeerSecret {
    /// The secret of a file's text: one line (surrounding whitespace ignored) of at least
    /// [`MIN_PEER_SECRET_BYTES`] visible ASCII characters.
    ///
    /// # Errors
    ///
    /// Shorter, or holding anything but visible ASCII.
    pub fn parse(text: &str) -> Result<Self, PeerSecretError> {
        let secret = text.trim();
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(PeerSecretError("not visible ASCII on one line"));
        }
        if secret.len() < MIN_PEER_SECRET_BYTES {
            return Err(PeerSecretError("too short"));
        }
        let mut header = http::HeaderValue::try_from(format!("Bearer {secret}"))
            .map_err(|_| PeerSecretError("not visible ASCII on one line"))?;
        header.set_sensitive(true);
        Ok(Self { header })
    }

    /// The `Authorization` header value a peer request carries.
    pub fn header_value(&self) -> http::HeaderValue {
        self.header.clone()
    }

    /// Whether `headers` carry this secret.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        headers
            .get(AUTHORIZATION)
            .is_some_and(|value| bool::from(value.as_bytes().ct_eq(self.header.as_bytes())))
    }
}

/// What the peer routes of a service serve: the secret they check, the hub they push
/// through, and this server's epoch.
#[derive(Clone)]
pub(crate) struct Peers {
    pub(crate) secret: PeerSecret,
    pub(crate) epoch: String,
    pub(crate) directory: Arc<dyn StreamDirectory>,
}

impl Peers {
    /// Answers a peer request whose secret was already checked.
    pub(crate) async fn answer(
        &self,
        route: PeerRoute,
        hub: &KickHub,
        body: &[u8],
    ) -> Response<ResponseBody> {
        match route {
            PeerRoute::Kick => {
                let kick: PeerKickBody = match parse(body) {
                    Ok(kick) => kick,
                    Err(e) => return error_body(ErrorBody::from_error(&e)),
                };
                let Ok(payload) = decode_kick(kick.body.as_bytes()) else {
                    let message = "body is not a kick payload";
                    return error(ErrorCode::InvalidParams, message);
                };
                let outcome = self.push(hub, kick, &payload).await;
                let outcome = match outcome {
                    KickOutcome::Confirmed => "confirmed".to_owned(),
                    KickOutcome::Failed(detail) => detail.as_str().to_owned(),
                };
                json(StatusCode::OK, &PeerKickAnswer { outcome })
            }
            PeerRoute::Ack => {
                let ack: PeerAckBody = match parse(body) {
                    Ok(ack) => ack,
                    Err(e) => return error_body(ErrorBody::from_error(&e)),
                };
                // The id is 128 random bits sent only down the node's stream: holding it is
                // the proof the forwarding server could not check against a key.
                let accepted = hub.ack(&ack.node, &ack.id, ack.status, None);
                json(StatusCode::OK, &KickAckAnswer { accepted })
            }
        }
    }

    async fn push(&self, hub: &KickHub, kick: PeerKickBody, payload: &KickPayload) -> KickOutcome {
        // Another epoch: the sender read a registration of an earlier run on this address.
        if kick.server_epoch != self.epoch {
            return KickOutcome::Failed(KickDetail::ConnectError);
        }
        let wait = Duration::from_millis(kick.timeout_ms).min(MAX_PEER_KICK_WAIT);
        let pushed = PushedKick {
            body: kick.body,
            signature: kick.signature,
        };
        hub.deliver(&kick.node, payload, pushed, wait).await
    }
}

/// 401 for a peer request without the secret.
pub(crate) fn refused() -> Response<ResponseBody> {
    error(
        ErrorCode::Unauthenticated,
        "peer routes need the servers' peer secret",
    )
}
