//! [`RivalKicker`]: a kicker that makes the claim it serves lose one race, for backends'
//! own tests of a contended claim (round trips per lost race, on their real server).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use unique_core::{CasOutcome, Key, KickOutcome, KickPayload, Kicker, Owner, Store, async_trait};

/// Confirms every kick; on the first one it also lands a competing claim on `key` through
/// `rival` (a second store on the same backend, whose requests a test does not count), so
/// the claim under test loses its CAS exactly once: a real contended retry.
pub struct RivalKicker<S> {
    rival: S,
    key: Key,
    interfered: AtomicBool,
    kicks: AtomicUsize,
}

impl<S: Store> RivalKicker<S> {
    /// A kicker that lands one rival claim on `key` through `rival`.
    pub fn new(rival: S, key: Key) -> Self {
        Self {
            rival,
            key,
            interfered: AtomicBool::new(false),
            kicks: AtomicUsize::new(0),
        }
    }

    /// Kicks received so far.
    pub fn kicks(&self) -> usize {
        self.kicks.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl<S: Store> Kicker for RivalKicker<S> {
    async fn kick(&self, _endpoint: &str, _payload: &KickPayload, _t: Duration) -> KickOutcome {
        self.kicks.fetch_add(1, Ordering::SeqCst);
        if !self.interfered.swap(true, Ordering::SeqCst) {
            let snap = self.rival.read_owner(&self.key).await.expect("rival read");
            let owner = Owner::new("r", "c", "http://rival.invalid/kick");
            let rival = self
                .rival
                .claim_cas(&self.key, &owner, "cid-rival", &snap)
                .await
                .expect("rival claim");
            assert!(
                matches!(rival, CasOutcome::Written { .. }),
                "the rival wins: {rival:?}"
            );
        }
        KickOutcome::Confirmed
    }
}
