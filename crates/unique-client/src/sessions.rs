//! A minimal local session table to wire a [`KickHandler`](crate::KickHandler) to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use unique_core::Key;

/// This node's online sessions: key → gen. Cheap to clone (shared).
///
/// Applications with their own session store do not need it; it exists so a node can be
/// wired in a few lines: insert after a login, read it from the kick handler's
/// `get_local_generation`, and remove with [`remove_if`](Self::remove_if) from `destroy`
/// and on heartbeat eviction, so that a stale callback never removes a newer session.
#[derive(Debug, Clone, Default)]
pub struct Sessions {
    inner: Arc<Mutex<HashMap<Key, i64>>>,
}

impl Sessions {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the session `generation` for `key`, replacing any other; returns the gen
    /// it replaced.
    pub fn insert(&self, key: Key, generation: i64) -> Option<i64> {
        self.lock().insert(key, generation)
    }

    /// The gen of the local session for `key`, if any.
    pub fn generation(&self, key: &Key) -> Option<i64> {
        self.lock().get(key).copied()
    }

    /// Removes the session for `key` only if it is still at `generation`; `true` if removed.
    pub fn remove_if(&self, key: &Key, generation: i64) -> bool {
        let mut map = self.lock();
        if map.get(key) == Some(&generation) {
            map.remove(key);
            true
        } else {
            false
        }
    }

    /// How many sessions are online here.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// No session is online here.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, i64>> {
        // Every update is a single map operation, so a poisoned map is still consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_if_only_removes_that_generation() {
        let s = Sessions::new();
        let k = Key::new("p", "e", 1);
        assert_eq!(s.insert(k.clone(), 3), None);
        assert_eq!(s.insert(k.clone(), 4), Some(3));
        assert!(
            !s.remove_if(&k, 3),
            "a stale destroy must not remove the newer session"
        );
        assert_eq!(s.generation(&k), Some(4));
        assert!(s.remove_if(&k, 4));
        assert!(s.is_empty());
        assert_eq!(s.generation(&k), None);
    }
}
