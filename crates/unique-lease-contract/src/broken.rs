//! The broken reference every lease check must catch: a directory that judges expiry
//! by the `now` each caller passes, as every backend did before D10. The contract's own
//! test shows its D10 cases fail on it; the lease history checker's test shows the checker
//! finds its overlapping holdings.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use unique_lease::{
    Clock, Directory, Lease, LeaseError, ManualClock, MemoryDirectory, async_trait,
};

/// A memory directory whose clock is set to the caller's `now` for every call.
pub struct TrustsTheCaller {
    caller: Arc<ManualClock>,
    memory: MemoryDirectory,
    /// Holds the caller's clock at the caller's `now` for the whole call.
    one_at_a_time: Mutex<()>,
}

impl TrustsTheCaller {
    /// An empty directory; `start` is the clock a lookup reads before any call set it.
    pub fn new(start: SystemTime) -> Self {
        let caller = Arc::new(ManualClock::new(start));
        Self {
            memory: MemoryDirectory::with_clock(caller.clone()),
            caller,
            one_at_a_time: Mutex::new(()),
        }
    }

    /// Runs `call` on the memory directory with its clock at `now`. The memory
    /// directory answers without awaiting anything, so polling once suffices.
    fn at<T>(
        &self,
        now: SystemTime,
        call: impl Future<Output = Result<T, LeaseError>>,
    ) -> Result<T, LeaseError> {
        let _one = self
            .one_at_a_time
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.caller.set(now);
        let mut call = std::pin::pin!(call);
        let waker = std::task::Waker::noop();
        match call
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
        {
            std::task::Poll::Ready(answer) => answer,
            std::task::Poll::Pending => unreachable!("the memory directory never waits"),
        }
    }
}

#[async_trait]
impl Directory for TrustsTheCaller {
    async fn lookup(&self, room_id: &str) -> Result<Option<Lease>, LeaseError> {
        let now = self.caller.now();
        self.at(now, self.memory.lookup(room_id))
    }

    async fn ensure_owner(
        &self,
        room_id: &str,
        node_id: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        self.at(now, self.memory.ensure_owner(room_id, node_id, now, ttl))
    }

    async fn verify_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
        now: SystemTime,
    ) -> Result<bool, LeaseError> {
        self.at(
            now,
            self.memory.verify_owner(room_id, node_id, lease_token, now),
        )
    }

    async fn release_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        self.memory
            .release_owner(room_id, node_id, lease_token)
            .await
    }
}
