//! Ending every session of a node at once: [`Node::drain`] for a deploy, and the release of
//! the ended sessions within a deadline that it shares with [`Node::shutdown`].

use std::collections::HashMap;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{Instant, timeout_at};
use unique_core::{Key, ReleaseReason};

use crate::event::NodeEvent;
use crate::node::{Live, Node};
use crate::session::Ending;
use crate::transport::Transport;

/// What [`Node::drain`] came to: how many sessions it ended, by whether the server released
/// them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Drain {
    /// Sessions the server tombstoned.
    pub released: usize,
    /// Sessions it did not: a newer session already held the key (a takeover raced the
    /// drain), the release failed, or it did not finish within the deadline (left to the
    /// server, where the next login's kick finds nothing here).
    pub unreleased: usize,
}

impl<T: Transport + Clone> Node<T> {
    /// Drains the node for a deploy: it stops taking logins, ends every session with
    /// [`Ending::Drained`] (reason `node-draining`: the user's client should reconnect, and
    /// lands on another node), and releases every key on the server within `deadline`.
    ///
    /// In order: under the session table's lock, the node starts refusing logins (a new one
    /// fails at once with [`NodeLoginError::Draining`](crate::NodeLoginError::Draining), one
    /// whose claim is in flight releases the gen it wins and fails so too) and every session
    /// leaves the table, its handle ended there; then every heartbeat stops; then all keys
    /// are released concurrently, each with the claimer's retry policy and fenced by its gen,
    /// and each session is reported `Drained` as its release ends. Releases still running at
    /// the deadline are abandoned and reported with `released = false`.
    ///
    /// The kick handler stays open, so kicks are fenced as always: a kick that reaches a
    /// session before the drain takes it ends it as [`Ending::Kicked`] (and the drain then
    /// finds nothing to end), one that comes after finds no session and is answered
    /// `no-session`; every session ends exactly once. A takeover that raced the drain
    /// holds a newer gen, which the drain's release (of the older gen) leaves alone. Call
    /// [`shutdown`](Self::shutdown) afterwards to close the kick handler (a `KickReceiver`
    /// then stops listening). Idempotent: a second call finds nothing to end.
    pub async fn drain(&self, deadline: Duration) -> Drain {
        let deadline = Instant::now() + deadline;
        let ended = self.shared().take_all(&Ending::Drained);
        let (released, unreleased) = release_all(
            self,
            ended,
            deadline,
            Some(ReleaseReason::NodeDraining),
            |key, generation, released| NodeEvent::Drained {
                key,
                generation,
                released,
            },
        )
        .await;
        Drain {
            released,
            unreleased,
        }
    }

    /// The node is draining ([`drain`](Self::drain) has begun): it takes no logins.
    pub fn is_draining(&self) -> bool {
        self.shared().is_draining()
    }
}

/// Stops the heartbeats of `ended` and releases them concurrently (telling the server
/// `reason` when given), reporting each as `report` says as its release ends, until
/// `deadline`; what is still running then is abandoned and reported unreleased. Returns
/// (released, unreleased).
pub(crate) async fn release_all<T: Transport + Clone>(
    node: &Node<T>,
    ended: Vec<(Key, Live)>,
    deadline: Instant,
    reason: Option<ReleaseReason>,
    report: impl Fn(Key, i64, bool) -> NodeEvent,
) -> (usize, usize) {
    // Local only (a heartbeat polls its stop signal first), so this cannot wait on the
    // server; bounded all the same, and a heartbeat whose stop was abandoned still ends
    // when its handle is dropped.
    let mut stopping = JoinSet::new();
    let mut unfinished = HashMap::with_capacity(ended.len());
    for (key, live) in ended {
        unfinished.insert(key, live.generation);
        stopping.spawn(live.heartbeat.stop());
    }
    let _ = timeout_at(deadline, async {
        while stopping.join_next().await.is_some() {}
    })
    .await;
    drop(stopping);

    let mut releasing = JoinSet::new();
    for (key, &generation) in &unfinished {
        let (claimer, key) = (node.claimer().clone(), key.clone());
        releasing.spawn(async move {
            let released = claimer.logout_with_reason(&key, generation, reason).await;
            (key, generation, released)
        });
    }
    let (mut released_count, mut unreleased_count) = (0, 0);
    while let Ok(Some(done)) = timeout_at(deadline, releasing.join_next()).await {
        // A panicking transport leaves its session in `unfinished`: unreleased.
        let Ok((key, generation, released)) = done else {
            continue;
        };
        unfinished.remove(&key);
        let released = released.is_ok_and(|released| released);
        if released {
            released_count += 1;
        } else {
            unreleased_count += 1;
        }
        node.shared().emit(report(key, generation, released));
    }
    // Aborts the releases still running: those sessions are left to the server.
    drop(releasing);
    if !unfinished.is_empty() {
        tracing::warn!(
            unreleased = unfinished.len(),
            "releases unfinished at the deadline, left to the server"
        );
    }
    for (key, generation) in unfinished {
        unreleased_count += 1;
        node.shared().emit(report(key, generation, false));
    }
    (released_count, unreleased_count)
}
