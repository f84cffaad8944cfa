//! The pure self-eviction decision a heartbeat makes.

use crate::types::{CurrentView, EvictReason, Owner};

/// Decides whether the local session — gen `local_generation`, claimed for `local_owner` —
/// must go, given the store's view.
///
/// `!exists` → `NotExists`; `gen != local_generation` → `GenMismatch`; `owner == None` →
/// `OwnerEmpty` (released); an owner whose endpoint, region or cluster is not
/// `local_owner`'s → `OwnerChanged`; otherwise `None` (keep).
///
/// `OwnerChanged` is the one reason that evicts at the session's own gen: a gen names one
/// session only while gens never go back (I2), and after a rollback (a restarted memory
/// store, a restored backup, a failover to a lagging replica) a new login can be handed the
/// same gen. Its kick then announces that gen, which the old session does not yield to (not
/// older, I6), so the record's owner is all that tells the two apart.
pub fn decide_evict(local_generation: i64, local_owner: &Owner, view: &CurrentView) -> EvictReason {
    if !view.exists {
        EvictReason::NotExists
    } else if view.generation != local_generation {
        EvictReason::GenMismatch
    } else {
        match &view.owner {
            None => EvictReason::OwnerEmpty,
            Some(stored) if !same_owner(stored, local_owner) => EvictReason::OwnerChanged,
            Some(_) => EvictReason::None,
        }
    }
}

/// The four fields named one by one, so a field added to [`Owner`] later (say, metadata the
/// server may rewrite) has to be judged here before it can evict anyone.
fn same_owner(stored: &Owner, local: &Owner) -> bool {
    // `since` is the login time the arbiter stamps on a pooled session: the node's own copy
    // of its owner never holds it, so it cannot tell two sessions apart.
    let Owner {
        region,
        cluster,
        endpoint,
        node,
        since: _,
    } = local;
    stored.endpoint == *endpoint
        && stored.node == *node
        && stored.region == *region
        && stored.cluster == *cluster
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Owner {
        Owner::new("eu", "c1", "http://10.0.0.7:9001/kick")
    }

    fn held_by(generation: i64, owner: Owner) -> CurrentView {
        CurrentView {
            generation,
            owner: Some(owner),
            exists: true,
        }
    }

    fn online(generation: i64) -> CurrentView {
        held_by(generation, me())
    }

    fn tomb(generation: i64) -> CurrentView {
        CurrentView {
            generation,
            owner: None,
            exists: true,
        }
    }

    #[test]
    fn no_record_is_not_exists() {
        assert_eq!(
            decide_evict(1, &me(), &CurrentView::default()),
            EvictReason::NotExists
        );
    }

    #[test]
    fn another_gen_is_gen_mismatch_whoever_holds_it() {
        assert_eq!(decide_evict(1, &me(), &online(2)), EvictReason::GenMismatch);
        assert_eq!(decide_evict(2, &me(), &online(1)), EvictReason::GenMismatch);
        let other = Owner::new("us", "c9", "http://10.0.0.8:9001/kick");
        assert_eq!(
            decide_evict(1, &me(), &held_by(2, other)),
            EvictReason::GenMismatch
        );
        assert_eq!(decide_evict(2, &me(), &tomb(3)), EvictReason::GenMismatch);
    }

    #[test]
    fn a_tombstone_at_this_gen_is_owner_empty() {
        assert_eq!(decide_evict(3, &me(), &tomb(3)), EvictReason::OwnerEmpty);
    }

    #[test]
    fn this_gen_held_by_another_owner_is_owner_changed() {
        let me = me();
        let endpoint = Owner {
            endpoint: "http://10.0.0.8:9001/kick".into(),
            ..me.clone()
        };
        let region = Owner {
            region: "us".into(),
            ..me.clone()
        };
        let cluster = Owner {
            cluster: "c2".into(),
            ..me.clone()
        };
        let emptied = Owner::new("", "", me.endpoint.clone());
        let case = Owner {
            endpoint: "http://10.0.0.7:9001/KICK".into(),
            ..me.clone()
        };
        let node = Owner {
            node: "n1".into(),
            ..me.clone()
        };
        for other in [endpoint, region, cluster, emptied, case, node] {
            assert_eq!(
                decide_evict(5, &me, &held_by(5, other.clone())),
                EvictReason::OwnerChanged,
                "{other:?}"
            );
        }
    }

    #[test]
    fn this_gen_held_by_this_owner_is_kept() {
        assert_eq!(decide_evict(5, &me(), &online(5)), EvictReason::None);
        // Only the three fields count, compared exactly; empty ones match empty ones.
        let bare = Owner::new("", "", "http://h/k");
        assert_eq!(
            decide_evict(1, &bare, &held_by(1, bare.clone())),
            EvictReason::None
        );
    }
}
