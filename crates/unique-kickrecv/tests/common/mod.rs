//! Shared by the integration tests: a receiver on the real accept loop.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use unique_kickrecv::{KickService, ServeOptions, serve_with};

/// Serves `service` through the standalone listener ([`serve_with`], as a node
/// runs it) on a loopback port until the test ends; returns its address.
pub(crate) async fn serve_service(service: KickService) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_with(
        listener,
        service,
        ServeOptions::default(),
        std::future::pending(),
    ));
    addr
}
