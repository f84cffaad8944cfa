//! The lease directory and node registry calls: `lease ensure|verify|release|lookup` and
//! `nodes lookup`, over `unique-client-http`'s [`HttpDirectory`], and how their answers show.

use unique_client_http::HttpDirectory;
use unique_lease::{LeaseBackend, LeaseError, StoredLease, StoredNode};
use unique_wire::{
    LeaseAnswer, LeaseLookupAnswer, LeaseVerifyAnswer, NodeAnswer, NodeLookupAnswer, ReleaseAnswer,
};

use crate::cli::{Cli, LeaseCommand, NodesCommand};
use crate::exit::{Failure, INVALID, REFUSED, THROTTLED, UNAVAILABLE};
use crate::server::{to_json, transport};

/// Runs a `lease` command; the text to print.
pub(crate) async fn lease(cli: &Cli, command: &LeaseCommand) -> Result<String, Failure> {
    let transport = transport(cli)?;
    match command {
        LeaseCommand::Ensure { room, node, ttl } => {
            let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
            let directory = transport.directory(&room.project);
            let lease = directory
                .ensure_lease(&room.room, node, ttl_ms)
                .await
                .map_err(|e| failed(&e))?;
            let answer = lease_answer(&room.room, lease);
            Ok(if cli.json {
                to_json(&answer)
            } else if answer.node == *node {
                format!("{}\n{}", held(&answer), token_line(&answer))
            } else {
                format!("not granted: {}", held(&answer))
            })
        }
        LeaseCommand::Verify {
            room,
            node,
            lease_token: token,
        } => {
            let directory: HttpDirectory = transport.directory(&room.project);
            let valid = directory
                .verify(&room.room, node, token)
                .await
                .map_err(|e| failed(&e))?;
            Ok(if cli.json {
                to_json(&LeaseVerifyAnswer { valid })
            } else if valid {
                format!("valid: {node} holds room {} under this token", room.room)
            } else {
                format!(
                    "not valid: {node} does not hold room {} under this token (expired, released \
                     or taken over)",
                    room.room
                )
            })
        }
        LeaseCommand::Release {
            room,
            node,
            lease_token: token,
        } => {
            let released = transport
                .directory(&room.project)
                .release_lease(&room.room, node, token)
                .await
                .map_err(|e| failed(&e))?;
            Ok(if cli.json {
                to_json(&ReleaseAnswer { released })
            } else if released {
                format!("released room {} held by {node}", room.room)
            } else {
                format!(
                    "not released: {node} does not hold room {} under this token",
                    room.room
                )
            })
        }
        LeaseCommand::Lookup { room } => {
            let lease = transport
                .directory(&room.project)
                .read_lease(&room.room)
                .await
                .map_err(|e| failed(&e))?
                .map(|lease| lease_answer(&room.room, lease));
            Ok(match (cli.json, lease) {
                (true, lease) => to_json(&LeaseLookupAnswer { lease }),
                (false, Some(lease)) if lease.ttl_left_ms == 0 => {
                    format!("expired: last {}", held(&lease))
                }
                (false, Some(lease)) => held(&lease),
                (false, None) => format!("no lease: room {} has never been held", room.room),
            })
        }
    }
}

/// Runs a `nodes` command; the text to print.
pub(crate) async fn nodes(cli: &Cli, command: &NodesCommand) -> Result<String, Failure> {
    let NodesCommand::Lookup { project, node } = command;
    let found = transport(cli)?
        .directory(project)
        .read_node(node)
        .await
        .map_err(|e| failed(&e))?
        .map(|stored| node_answer(node, stored));
    Ok(match (cli.json, found) {
        (true, node) => to_json(&NodeLookupAnswer { node }),
        (false, Some(found)) => format!(
            "{} at {} (registered {} ms ago, {} ms left)",
            found.node, found.addr, found.age_ms, found.ttl_left_ms
        ),
        (false, None) => format!("no registration: node {node} is not registered (or expired)"),
    })
}

fn lease_answer(room: &str, lease: StoredLease) -> LeaseAnswer {
    LeaseAnswer {
        room: room.to_owned(),
        node: lease.node_id,
        token: lease.lease_token,
        epoch: lease.epoch,
        ttl_left_ms: lease.ttl_left_ms,
    }
}

fn node_answer(node: &str, stored: StoredNode) -> NodeAnswer {
    NodeAnswer {
        node: node.to_owned(),
        addr: stored.grpc_addr,
        age_ms: stored.age_ms,
        ttl_left_ms: stored.ttl_left_ms,
    }
}

/// `room R held by N at epoch E, T ms left`.
fn held(lease: &LeaseAnswer) -> String {
    format!(
        "room {} held by {} at epoch {}, {} ms left",
        lease.room, lease.node, lease.epoch, lease.ttl_left_ms
    )
}

/// The token a holder verifies and releases with (`--lease-token`).
fn token_line(lease: &LeaseAnswer) -> String {
    format!("token {}", lease.token)
}

/// A lease call's failure, with the exit status of its kind (as the session calls').
fn failed(error: &LeaseError) -> Failure {
    match error {
        LeaseError::Unauthenticated(message) => Failure::new(
            REFUSED,
            format!("{message}; pass a token the server knows with --token or UNIQUE_TOKEN"),
        ),
        LeaseError::Forbidden(message) => Failure::new(
            REFUSED,
            format!("{message}; the token's entry must cover the project with every env"),
        ),
        LeaseError::InvalidParams(message) => Failure::new(
            INVALID,
            format!("the server refused the request: {message}"),
        ),
        LeaseError::Throttled(message) => Failure::new(
            THROTTLED,
            format!("the server's store throttled the request (429): {message}; retry later"),
        ),
        // A server without leases (501), a wrong base URL (404): no retry fixes it.
        LeaseError::Backend { .. } => Failure::new(INVALID, error.to_string()),
        other => Failure::new(
            UNAVAILABLE,
            format!("the server is unreachable or unavailable: {other}"),
        ),
    }
}
