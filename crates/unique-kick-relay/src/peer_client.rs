//! The client of the other servers' peer routes: plain HTTP/1.1, pooled, with the secret.

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use unique_arbiter_http::PeerSecret;
use unique_core::{KickDetail, KickOutcome};
use unique_wire::{
    KickAckAnswer, PEER_ACK_PATH, PEER_KICK_PATH, PeerAckBody, PeerKickAnswer, PeerKickBody,
};

/// How long connecting to a peer may take: a peer that does not answer a SYN this fast is
/// as good as gone for a kick.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long an ack may take to forward.
const ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest answer read from a peer.
const MAX_ANSWER_BYTES: usize = 4096;

/// Why a peer request failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerError {
    /// No connection, or it broke before an answer.
    #[error("cannot reach the peer: {0}")]
    Connect(String),
    /// The peer answered with another status (401: the secrets differ).
    #[error("the peer answered {0}")]
    Refused(StatusCode),
    /// The answer was not what the route answers.
    #[error("the peer's answer is unreadable: {0}")]
    Answer(String),
}

#[derive(Clone)]
pub(crate) struct PeerClient {
    client: Client<HttpConnector, Full<Bytes>>,
    authorization: HeaderValue,
}

impl PeerClient {
    pub(crate) fn new(secret: &PeerSecret) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            authorization: secret.header_value(),
        }
    }

    /// Forwards a kick; the outcome the holder reports.
    pub(crate) async fn kick(
        &self,
        url: &str,
        body: &PeerKickBody,
    ) -> Result<KickOutcome, PeerError> {
        let answer: PeerKickAnswer = self.post(url, PEER_KICK_PATH, body).await?;
        match answer.outcome.as_str() {
            "confirmed" => Ok(KickOutcome::Confirmed),
            other => KickDetail::from_wire(other)
                .map(KickOutcome::Failed)
                .ok_or_else(|| PeerError::Answer(format!("unknown outcome {other:?}"))),
        }
    }

    /// Forwards an ack; whether the holder was waiting for it.
    pub(crate) async fn ack(&self, url: &str, body: &PeerAckBody) -> Result<bool, PeerError> {
        let answer = tokio::time::timeout(ACK_TIMEOUT, self.post(url, PEER_ACK_PATH, body))
            .await
            .map_err(|_| PeerError::Connect("timed out".into()))??;
        let KickAckAnswer { accepted } = answer;
        Ok(accepted)
    }

    async fn post<T: serde::Serialize, A: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        path: &str,
        body: &T,
    ) -> Result<A, PeerError> {
        let body = serde_json::to_vec(body).expect("a peer body serialises");
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("{}{path}", url.trim_end_matches('/')))
            .header(AUTHORIZATION, self.authorization.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| PeerError::Connect(e.to_string()))?;
        let answer = self
            .client
            .request(request)
            .await
            .map_err(|e| PeerError::Connect(e.to_string()))?;
        let status = answer.status();
        if status != StatusCode::OK {
            return Err(PeerError::Refused(status));
        }
        let bytes = Limited::new(answer.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| PeerError::Connect(e.to_string()))?
            .to_bytes();
        serde_json::from_slice(&bytes).map_err(|e| PeerError::Answer(e.to_string()))
    }
}
