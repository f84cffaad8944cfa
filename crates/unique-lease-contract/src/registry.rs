//! Cases of the `NodeRegistry` contract (N1–N4).

use std::time::Duration;

use super::{Subject, whole_ms};
use unique_lease::{Clock, MAX_ADDR_LEN, MAX_ID_LEN, MAX_TTL};

const TTL: Duration = Duration::from_secs(15);

/// N1: a registration is stored with `updated_at = now`, `expires_at = now + ttl`
/// and read back unchanged.
pub async fn registered_node_can_be_looked_up(s: Subject) {
    let now = whole_ms(s.clock.now());
    let written = s
        .registry
        .register_node("n1-node", "10.0.0.7:7000", TTL)
        .await
        .unwrap();
    assert_eq!(written.node_id, "n1-node");
    assert_eq!(written.grpc_addr, "10.0.0.7:7000");
    assert_eq!(written.updated_at, now);
    assert_eq!(written.expires_at, now + TTL);
    assert!(written.valid_at(s.clock.now()));
    assert_eq!(
        s.registry.lookup_node("n1-node").await.unwrap(),
        Some(written)
    );
    assert_eq!(s.registry.lookup_node("n1-other").await.unwrap(), None);
}

/// N1: registering again replaces the address and renews the expiry from the new
/// `now` (a heartbeat keeps a node alive).
pub async fn reregistration_replaces_address_and_extends(s: Subject) {
    s.registry
        .register_node("n1-renew", "10.0.0.7:7000", TTL)
        .await
        .unwrap();
    s.clock.advance(Duration::from_secs(10));
    let renewed = s
        .registry
        .register_node("n1-renew", "10.0.0.8:7000", TTL)
        .await
        .unwrap();
    let now = whole_ms(s.clock.now());
    assert_eq!(renewed.updated_at, now);
    assert_eq!(renewed.expires_at, now + TTL);
    s.clock.advance(Duration::from_secs(10));
    let seen = s.registry.lookup_node("n1-renew").await.unwrap();
    assert_eq!(
        seen,
        Some(renewed),
        "alive past the first ttl thanks to the renewal"
    );
}

/// N1: a zero ttl means 30 s.
pub async fn zero_registration_ttl_means_thirty_seconds(s: Subject) {
    let r = s
        .registry
        .register_node("n1-zero", "10.0.0.7:7000", Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        r.expires_at.duration_since(r.updated_at).unwrap(),
        Duration::from_secs(30)
    );
    s.clock.advance(Duration::from_secs(29));
    assert!(s.registry.lookup_node("n1-zero").await.unwrap().is_some());
}

/// N2: a registration is visible until its expiry instant and reads as absent
/// from then on.
pub async fn registration_expires(s: Subject) {
    let r = s
        .registry
        .register_node("n2-expire", "10.0.0.7:7000", TTL)
        .await
        .unwrap();
    s.clock.set(r.expires_at - Duration::from_millis(1));
    assert_eq!(
        s.registry.lookup_node("n2-expire").await.unwrap(),
        Some(r.clone())
    );
    s.clock.set(r.expires_at);
    assert_eq!(s.registry.lookup_node("n2-expire").await.unwrap(), None);
    s.clock.advance(Duration::from_hours(1));
    assert_eq!(s.registry.lookup_node("n2-expire").await.unwrap(), None);
}

/// N3: unregistering removes the registration; unregistering an unknown node is
/// fine; registering again afterwards works.
pub async fn unregister_removes_and_tolerates_unknown(s: Subject) {
    s.registry
        .register_node("n3-node", "10.0.0.7:7000", TTL)
        .await
        .unwrap();
    s.registry.unregister_node("n3-node").await.unwrap();
    assert_eq!(s.registry.lookup_node("n3-node").await.unwrap(), None);
    s.registry.unregister_node("n3-node").await.unwrap();
    s.registry.unregister_node("n3-never").await.unwrap();
    let again = s
        .registry
        .register_node("n3-node", "10.0.0.9:7000", TTL)
        .await
        .unwrap();
    assert_eq!(
        s.registry.lookup_node("n3-node").await.unwrap(),
        Some(again)
    );
}

/// N4: bad node ids, addresses and ttls are `InvalidParams`; nothing is written.
pub async fn invalid_registrations_are_rejected(s: Subject) {
    let r = &s.registry;
    let long_id = "n".repeat(MAX_ID_LEN + 1);
    for bad in ["", "n4\n", long_id.as_str()] {
        let e = r
            .register_node(bad, "10.0.0.7:7000", TTL)
            .await
            .unwrap_err();
        assert!(e.is_invalid_params(), "{bad:?}: {e}");
        assert!(r.lookup_node(bad).await.unwrap_err().is_invalid_params());
        assert!(
            r.unregister_node(bad)
                .await
                .unwrap_err()
                .is_invalid_params()
        );
    }
    let long_addr = "a".repeat(MAX_ADDR_LEN + 1);
    for bad in ["", "10.0.0.7 7000", "10.0.0.7:7000\n", long_addr.as_str()] {
        let e = r.register_node("n4-node", bad, TTL).await.unwrap_err();
        assert!(e.is_invalid_params(), "{bad:?}: {e}");
    }
    let e = r
        .register_node(
            "n4-node",
            "10.0.0.7:7000",
            MAX_TTL + Duration::from_millis(1),
        )
        .await
        .unwrap_err();
    assert!(e.is_invalid_params(), "{e}");
    assert_eq!(
        r.lookup_node("n4-node").await.unwrap(),
        None,
        "nothing written"
    );
}
