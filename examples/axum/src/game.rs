//! A game server's player connections: one WebSocket per player, one [`Session`] per
//! socket, and the socket closed with the session's [`EndNotice`](unique_sessions::node::EndNotice) when the session ends.
//!
//! `GET /play/{uid}` logs the player in on the node *before* upgrading the connection: a
//! login that fails is an HTTP answer (400 for a bad uid, 503 while the node drains or when
//! the arbitration cannot be reached), so the client knows at once. Once upgraded, the
//! connection task greets the player with `{"gen": N}` and waits for whichever comes first:
//!
//! - **the session ends** ([`Session::ended`]): a login elsewhere, an admin logout, a newer
//!   login of the player on this node, a heartbeat eviction, a drain. The socket closes with
//!   the notice's code and JSON reason ([`EndNotice::close_code`](unique_sessions::node::EndNotice::close_code),
//!   [`EndNotice::close_reason`](unique_sessions::node::EndNotice::close_reason)), so the client shows why and knows whether to reconnect:
//!   4001 (logged in elsewhere) and 4002 (logged out by an operator) mean do not, 4100
//!   (node draining) means reconnect now, and the load balancer sends it to another node;
//! - **the player leaves** (a close frame, or the connection drops): the session is logged
//!   out ([`Session::logout`]), so the key is free at once rather than after a takeover.
//!
//! A rolling deploy calls `node.drain(deadline)` on the node going away: every connection
//! closes with 4100, the keys are released, and logins are refused while the process exits.

use axum::Router;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use unique_sessions::node::{KickService, Node, NodeLoginError, Session, Transport};
use unique_sessions::{Error, Key};

use crate::KICK_PATH;

/// Where players connect: `ws://<this app>/play/<uid>`.
pub const PLAY_PATH: &str = "/play/{uid}";

/// The project and environment of the example's keys.
pub const GAME: (&str, &str) = ("game", "prod");

/// The game server's router: player sockets at [`PLAY_PATH`] on `node`, and the node's kick
/// receiver (`kicks`, over `node.kick_handler()`) at [`KICK_PATH`].
pub fn game_router<T>(node: Node<T>, kicks: KickService) -> Router
where
    T: Transport + Clone + Send + Sync + 'static,
{
    Router::new()
        .route(PLAY_PATH, get(play::<T>))
        .route_service(KICK_PATH, kicks)
        .with_state(node)
}

/// Logs the player in, then upgrades; a failed login is an HTTP error saying why.
async fn play<T>(
    State(node): State<Node<T>>,
    Path(uid): Path<i64>,
    upgrade: WebSocketUpgrade,
) -> Response
where
    T: Transport + Clone + Send + Sync + 'static,
{
    match node.login(Key::new(GAME.0, GAME.1, uid)).await {
        Ok(session) => upgrade.on_upgrade(move |socket| connection(socket, session)),
        Err(NodeLoginError::Draining) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "this node is draining: connect again",
        )
            .into_response(),
        Err(NodeLoginError::Claim(e)) if matches!(e.error, Error::InvalidParams(_)) => {
            (StatusCode::BAD_REQUEST, e.to_string()).into_response()
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

/// One player's connection, for as long as both the socket and the session last.
async fn connection<T: Transport + Clone>(mut socket: WebSocket, session: Session<T>) {
    let hello = format!(r#"{{"gen":{}}}"#, session.generation());
    if socket.send(Message::Text(hello.into())).await.is_ok() {
        loop {
            tokio::select! {
                ending = session.ended() => {
                    let notice = session.notice(&ending);
                    let close = CloseFrame {
                        code: notice.close_code(),
                        reason: notice.close_reason().into(),
                    };
                    // The player may be gone already; the session has ended either way.
                    let _ = socket.send(Message::Close(Some(close))).await;
                    return;
                }
                received = socket.recv() => match received {
                    // Game traffic would be handled here.
                    Some(Ok(Message::Text(_) | Message::Binary(_) | Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                },
            }
        }
    }
    // The player left: free the key now. A failed release is left to the next login,
    // which replaces the session.
    if let Err(e) = session.logout().await {
        tracing::warn!(key = %session.key(), error = %e, "logout after the player left failed");
    }
}
