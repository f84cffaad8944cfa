//! The pure self-eviction decision a heartbeat makes.

use crate::types::{CurrentView, EvictReason};

/// Decides whether the session at `local_generation` must go, given the store's view.
///
/// `!exists` → `NotExists`; `gen != local_generation` → `GenMismatch`;
/// `owner == None` → `OwnerEmpty` (released); otherwise `None` (keep).
pub fn decide_evict(local_generation: i64, view: &CurrentView) -> EvictReason {
    if !view.exists {
        EvictReason::NotExists
    } else if view.generation != local_generation {
        EvictReason::GenMismatch
    } else if view.owner.is_none() {
        EvictReason::OwnerEmpty
    } else {
        EvictReason::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Owner;

    #[test]
    fn every_branch() {
        let online = |generation| CurrentView {
            generation,
            owner: Some(Owner::new("", "", "http://h")),
            exists: true,
        };
        assert_eq!(
            decide_evict(1, &CurrentView::default()),
            EvictReason::NotExists
        );
        assert_eq!(decide_evict(1, &online(2)), EvictReason::GenMismatch);
        assert_eq!(decide_evict(2, &online(1)), EvictReason::GenMismatch);
        let tomb = CurrentView {
            generation: 3,
            owner: None,
            exists: true,
        };
        assert_eq!(decide_evict(3, &tomb), EvictReason::OwnerEmpty);
        assert_eq!(decide_evict(2, &tomb), EvictReason::GenMismatch);
        assert_eq!(decide_evict(5, &online(5)), EvictReason::None);
    }
}
