//! [`HttpDirectory`]: the lease directory and node registry of one project on a
//! `unique-server`, over the lease routes.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use unique_lease::{LeaseBackend, LeaseError, StoredLease, StoredNode, async_trait};
use unique_wire::{
    LeaseAnswer, LeaseEnsureBody, LeaseLookupAnswer, LeaseRoomBody, LeaseRoute, LeaseTokenBody,
    LeaseVerifyAnswer, NodeAnswer, NodeKeyBody, NodeLookupAnswer, NodeRegisterBody, ReleaseAnswer,
};

use crate::status::classify_lease;
use crate::transport::HttpTransport;

/// A [`LeaseBackend`] on a `unique-server`: the rooms and nodes of one project, through
/// `POST /v1/lease/*` and `/v1/nodes/*`. As every backend, it is a
/// [`Directory`](unique_lease::Directory) and a [`NodeRegistry`](unique_lease::NodeRegistry)
/// (and so works with [`KeepAlive`](unique_lease::KeepAlive)).
///
/// The server's store judges every expiry. It answers the time it said was left, and a
/// lease's [`deadline`](unique_lease::Lease::deadline) counts that from the instant before
/// the request was sent here, so the delays of the network (both ways) and of the server
/// come off the holder's time, never a successor's. A registration's
/// [`expires_at`](unique_lease::NodeRegistration::expires_at) is placed on this machine's
/// wall clock from what the server had left when it answered.
///
/// Built from an [`HttpTransport`] ([`HttpTransport::directory`]), whose base URL, bearer
/// token, TLS, timeout and connection pool it shares. The token must cover the project with
/// every env. Errors: 400 → `InvalidParams` with the server's message; 401, 403, 404, 405,
/// 413 and 501 (a server whose store has no lease directory) → `Backend`; 500 → `Corrupt`
/// or `Backend` as the server says; 429, 503, other 5xx, other statuses, connection
/// failures, timeouts and unreadable answers → `Unavailable` (the call may have taken
/// effect; retrying is safe, see [`Directory`](unique_lease::Directory)). Ttls above one
/// hour ([`MAX_LEASE_TTL_MS`](unique_wire::MAX_LEASE_TTL_MS)) and ids over
/// [`MAX_LEASE_ID_CHARS`](unique_wire::MAX_LEASE_ID_CHARS) characters are refused by the server.
#[derive(Clone)]
pub struct HttpDirectory {
    transport: HttpTransport,
    project: String,
}

impl HttpDirectory {
    /// The directory of `project` on the server `transport` talks to.
    pub fn new(transport: HttpTransport, project: impl Into<String>) -> Self {
        Self {
            transport,
            project: project.into(),
        }
    }

    /// The project whose rooms and nodes this directory holds.
    pub fn project(&self) -> &str {
        &self.project
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        route: LeaseRoute,
        body: &B,
    ) -> Result<T, LeaseError> {
        let op = route.operation();
        let uri = self.transport.lease_uri(route);
        let (status, answer) = self
            .transport
            .send(op, uri, body)
            .await
            .map_err(|e| match e {
                unique_core::Error::Unavailable { reason, source } => {
                    LeaseError::Unavailable { reason, source }
                }
                // `send` fails with `Unavailable` only; anything else still means the call
                // may or may not have happened.
                other => LeaseError::unavailable_with(format!("{op} failed"), other),
            })?;
        let result = classify_lease(op, status, &answer);
        if let Err(error) = &result {
            tracing::debug!(op, status = status.as_u16(), %error, "unique lease call failed");
        }
        result
    }
}

impl HttpTransport {
    /// The lease directory and node registry of `project` on this transport's server,
    /// sharing its connections, token and timeouts.
    pub fn directory(&self, project: impl Into<String>) -> HttpDirectory {
        HttpDirectory::new(self.clone(), project)
    }
}

fn stored(lease: LeaseAnswer) -> StoredLease {
    StoredLease {
        node_id: lease.node,
        lease_token: lease.token,
        epoch: lease.epoch,
        ttl_left_ms: lease.ttl_left_ms,
    }
}

fn stored_node(node: NodeAnswer) -> StoredNode {
    StoredNode {
        grpc_addr: node.addr,
        age_ms: node.age_ms,
        ttl_left_ms: node.ttl_left_ms,
    }
}

#[async_trait]
impl LeaseBackend for HttpDirectory {
    /// The routes take ids of at most [`MAX_LEASE_ID_CHARS`](unique_wire::MAX_LEASE_ID_CHARS):
    /// the server stores `<project>#<id>` under the directory's 256 characters.
    fn max_id_len(&self) -> usize {
        unique_wire::MAX_LEASE_ID_CHARS
    }

    async fn read_lease(&self, room_id: &str) -> Result<Option<StoredLease>, LeaseError> {
        let body = LeaseRoomBody {
            project: self.project.as_str().into(),
            room: room_id.into(),
        };
        let answer: LeaseLookupAnswer = self.post(LeaseRoute::Lookup, &body).await?;
        Ok(answer.lease.map(stored))
    }

    async fn ensure_lease(
        &self,
        room_id: &str,
        node_id: &str,
        ttl_ms: u64,
    ) -> Result<StoredLease, LeaseError> {
        let body = LeaseEnsureBody {
            project: self.project.as_str().into(),
            room: room_id.into(),
            node: node_id.into(),
            ttl_ms,
        };
        let answer: LeaseAnswer = self.post(LeaseRoute::Ensure, &body).await?;
        Ok(stored(answer))
    }

    async fn release_lease(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        let body = LeaseTokenBody {
            project: self.project.as_str().into(),
            room: room_id.into(),
            node: node_id.into(),
            token: lease_token.into(),
        };
        let answer: ReleaseAnswer = self.post(LeaseRoute::Release, &body).await?;
        Ok(answer.released)
    }

    async fn write_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl_ms: u64,
    ) -> Result<StoredNode, LeaseError> {
        let body = NodeRegisterBody {
            project: self.project.as_str().into(),
            node: node_id.into(),
            addr: grpc_addr.into(),
            ttl_ms,
        };
        let answer: NodeAnswer = self.post(LeaseRoute::RegisterNode, &body).await?;
        Ok(stored_node(answer))
    }

    async fn read_node(&self, node_id: &str) -> Result<Option<StoredNode>, LeaseError> {
        let body = NodeKeyBody {
            project: self.project.as_str().into(),
            node: node_id.into(),
        };
        let answer: NodeLookupAnswer = self.post(LeaseRoute::LookupNode, &body).await?;
        Ok(answer.node.map(stored_node))
    }

    async fn delete_node(&self, node_id: &str) -> Result<(), LeaseError> {
        let body = NodeKeyBody {
            project: self.project.as_str().into(),
            node: node_id.into(),
        };
        let _: unique_wire::NodeDeregisterAnswer =
            self.post(LeaseRoute::DeregisterNode, &body).await?;
        Ok(())
    }
}

impl HttpDirectory {
    /// Whether `node_id` holds `room_id` under `lease_token`, asked of the server in one
    /// call (`POST /v1/lease/verify`), where [`Directory::verify_owner`] would read the
    /// lease back and compare here. Same answer, judged on the server's store's clock; no
    /// input check beyond the server's.
    ///
    /// [`Directory::verify_owner`]: unique_lease::Directory::verify_owner
    pub async fn verify(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        let body = LeaseTokenBody {
            project: self.project.as_str().into(),
            room: room_id.into(),
            node: node_id.into(),
            token: lease_token.into(),
        };
        let answer: LeaseVerifyAnswer = self.post(LeaseRoute::Verify, &body).await?;
        Ok(answer.valid)
    }
}

impl fmt::Debug for HttpDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpDirectory")
            .field("project", &self.project)
            .field("transport", &self.transport)
            .finish()
    }
}
