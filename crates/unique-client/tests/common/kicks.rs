//! An in-process kicker: each kick goes straight to the kick handler of the node whose
//! endpoint it names (what HTTP and `unique-kickrecv` do in production).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use unique_client::{KickHandler, Node, NodeBuilder, Transport};
use unique_core::{Arbiter, KickDetail, KickOutcome, KickPayload, Kicker, Owner, async_trait};
use unique_store_memory::MemoryStore;

/// Endpoint → that node's kick handler; an unknown endpoint cannot be reached.
#[derive(Clone, Default)]
pub struct InProcess(Arc<Mutex<HashMap<String, KickHandler>>>);

impl InProcess {
    /// Delivers kicks for `node`'s endpoint to its handler.
    pub fn serve<T: Transport + Clone>(&self, node: &Node<T>) {
        self.0
            .lock()
            .unwrap()
            .insert(node.owner().endpoint.clone(), node.kick_handler().clone());
    }
}

#[async_trait]
impl Kicker for InProcess {
    async fn kick(&self, endpoint: &str, kick: &KickPayload, _: Duration) -> KickOutcome {
        let handler = self.0.lock().unwrap().get(endpoint).cloned();
        match handler {
            Some(h) if h.handle(kick).await.no_older_session() => KickOutcome::Confirmed,
            Some(_) => KickOutcome::Failed(KickDetail::Non2xx),
            None => KickOutcome::Failed(KickDetail::ConnectError),
        }
    }
}

/// An Arbiter on the memory store, kicking in process.
pub fn arbiter() -> (Arbiter<MemoryStore>, InProcess) {
    let kicks = InProcess::default();
    let arbiter = Arbiter::builder(MemoryStore::new())
        .kicker(kicks.clone())
        .build();
    (arbiter, kicks)
}

/// A node builder named `name` over `arbiter`.
pub fn node(arbiter: &Arbiter<MemoryStore>, name: &str) -> NodeBuilder<Arbiter<MemoryStore>> {
    let owner = Owner::new("eu", name, format!("http://{name}.internal/kick"));
    Node::builder(arbiter.clone(), owner)
}
