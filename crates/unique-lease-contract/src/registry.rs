//! Cases of the `NodeRegistry` contract (N1–N4).

use crate::check::{Answer, refused};
use std::time::Duration;

use super::Subject;
use unique_lease::{MAX_ADDR_LEN, MAX_ID_LEN, MAX_TTL, NodeRegistration};

const TTL: Duration = Duration::from_secs(15);

/// What a case compares of a registration: node, address and the span from its
/// update to its expiry (the times themselves are placed on the caller's clock,
/// which moves on its own between two answers).
fn view(r: &NodeRegistration) -> (String, String, Option<Duration>) {
    (
        r.node_id.clone(),
        r.grpc_addr.clone(),
        r.expires_at.duration_since(r.updated_at).ok(),
    )
}

fn view_opt(r: Option<&NodeRegistration>) -> Option<(String, String, Option<Duration>)> {
    r.map(view)
}

/// N1: a registration is stored with the whole ttl from the store's now and read
/// back unchanged.
pub async fn registered_node_can_be_looked_up(s: Subject) {
    let written = s
        .registry
        .register_node("n1-node", "10.0.0.7:7000", TTL)
        .await
        .answer("N1", "register_node must answer a valid call");
    ensure_eq!(
        view(&written),
        ("n1-node".to_owned(), "10.0.0.7:7000".to_owned(), Some(TTL)),
        "N1",
        "a registration must store the node and its address for the ttl"
    );
    ensure!(
        written.valid_at(std::time::SystemTime::now()),
        "N1",
        "a fresh registration must be valid",
        "{written:?} invalid at now"
    );
    ensure_eq!(
        view_opt(
            s.registry
                .lookup_node("n1-node")
                .await
                .answer("N2", "lookup_node must answer a valid call")
                .as_ref()
        ),
        Some(view(&written)),
        "N2",
        "a valid registration must read back unchanged"
    );
    ensure_eq!(
        view_opt(
            s.registry
                .lookup_node("n1-other")
                .await
                .answer("N2", "lookup_node must answer a valid call")
                .as_ref()
        ),
        None,
        "N2",
        "a node never registered must read as absent"
    );
}

/// N1: registering again replaces the address and renews the expiry from the new
/// now (a heartbeat keeps a node alive).
pub async fn reregistration_replaces_address_and_extends(s: Subject) {
    s.registry
        .register_node("n1-renew", "10.0.0.7:7000", TTL)
        .await
        .answer("N1", "register_node must answer a valid call");
    s.pass(Duration::from_secs(10));
    let renewed = s
        .registry
        .register_node("n1-renew", "10.0.0.8:7000", TTL)
        .await
        .answer("N1", "register_node must answer a valid call");
    ensure_eq!(
        view(&renewed),
        ("n1-renew".to_owned(), "10.0.0.8:7000".to_owned(), Some(TTL)),
        "N1",
        "registering again must replace the address and expire at the new now + ttl"
    );
    s.pass(Duration::from_secs(10));
    let seen = s
        .registry
        .lookup_node("n1-renew")
        .await
        .answer("N2", "lookup_node must answer a valid call");
    ensure_eq!(
        view_opt(seen.as_ref()),
        Some(view(&renewed)),
        "N1",
        "registering again must extend the registration",
        "past the first ttl"
    );
}

/// N1: a zero ttl means 30 s.
pub async fn zero_registration_ttl_means_thirty_seconds(s: Subject) {
    let r = s
        .registry
        .register_node("n1-zero", "10.0.0.7:7000", Duration::ZERO)
        .await
        .answer("N1", "register_node must answer a valid call");
    ensure_eq!(
        r.expires_at.duration_since(r.updated_at).ok(),
        Some(Duration::from_secs(30)),
        "N1",
        "a zero ttl must mean 30 s",
        "expires_at - updated_at"
    );
    s.pass(Duration::from_secs(29));
    let seen = s
        .registry
        .lookup_node("n1-zero")
        .await
        .answer("N2", "lookup_node must answer a valid call");
    ensure!(
        seen.is_some(),
        "N1",
        "a zero ttl must mean 30 s",
        "gone 29 s after registering"
    );
}

/// N2: a registration is visible until its expiry instant and reads as absent
/// from then on.
pub async fn registration_expires(s: Subject) {
    let r = s
        .registry
        .register_node("n2-expire", "10.0.0.7:7000", TTL)
        .await
        .answer("N1", "register_node must answer a valid call");
    s.pass(TTL.saturating_sub(Duration::from_millis(1)));
    ensure_eq!(
        view_opt(
            s.registry
                .lookup_node("n2-expire")
                .await
                .answer("N2", "lookup_node must answer a valid call")
                .as_ref()
        ),
        Some(view(&r)),
        "N2",
        "a registration must be visible until its expiry instant",
        "1 ms before it"
    );
    s.pass(Duration::from_millis(1));
    ensure_eq!(
        view_opt(
            s.registry
                .lookup_node("n2-expire")
                .await
                .answer("N2", "lookup_node must answer a valid call")
                .as_ref()
        ),
        None,
        "N2",
        "an expired registration must read as absent",
        "at the expiry instant"
    );
    s.pass(Duration::from_hours(1));
    ensure_eq!(
        view_opt(
            s.registry
                .lookup_node("n2-expire")
                .await
                .answer("N2", "lookup_node must answer a valid call")
                .as_ref()
        ),
        None,
        "N2",
        "an expired registration must read as absent",
        "an hour after expiry"
    );
}

/// N3: unregistering removes the registration; unregistering an unknown node is
/// fine; registering again afterwards works.
pub async fn unregister_removes_and_tolerates_unknown(s: Subject) {
    s.registry
        .register_node("n3-node", "10.0.0.7:7000", TTL)
        .await
        .answer("N1", "register_node must answer a valid call");
    s.registry.unregister_node("n3-node").await.answer(
        "N3",
        "unregister_node must answer a valid call, an unknown node included",
    );
    ensure_eq!(
        view_opt(
            s.registry
                .lookup_node("n3-node")
                .await
                .answer("N2", "lookup_node must answer a valid call")
                .as_ref()
        ),
        None,
        "N3",
        "unregister_node must remove the registration"
    );
    s.registry.unregister_node("n3-node").await.answer(
        "N3",
        "unregister_node must answer a valid call, an unknown node included",
    );
    s.registry.unregister_node("n3-never").await.answer(
        "N3",
        "unregister_node must answer a valid call, an unknown node included",
    );
    let again = s
        .registry
        .register_node("n3-node", "10.0.0.9:7000", TTL)
        .await
        .answer("N1", "register_node must answer a valid call");
    ensure_eq!(
        view_opt(
            s.registry
                .lookup_node("n3-node")
                .await
                .answer("N2", "lookup_node must answer a valid call")
                .as_ref()
        ),
        Some(view(&again)),
        "N3",
        "a node must register again after unregistering"
    );
}

/// N4: bad node ids, addresses and ttls are `InvalidParams`; nothing is written.
pub async fn invalid_registrations_are_rejected(s: Subject) {
    let r = &s.registry;
    let long_id = "n".repeat(MAX_ID_LEN + 1);
    for bad in ["", "n4\n", long_id.as_str()] {
        let registered = r.register_node(bad, "10.0.0.7:7000", TTL).await;
        refused(registered, "N4", format_args!("register_node id {bad:?}"));
        let seen = r.lookup_node(bad).await;
        refused(seen, "N4", format_args!("lookup_node id {bad:?}"));
        let gone = r.unregister_node(bad).await;
        refused(gone, "N4", format_args!("unregister_node id {bad:?}"));
    }
    let long_addr = "a".repeat(MAX_ADDR_LEN + 1);
    for bad in ["", "10.0.0.7 7000", "10.0.0.7:7000\n", long_addr.as_str()] {
        let registered = r.register_node("n4-node", bad, TTL).await;
        refused(registered, "N4", format_args!("address {bad:?}"));
    }
    let registered = r
        .register_node(
            "n4-node",
            "10.0.0.7:7000",
            MAX_TTL + Duration::from_millis(1),
        )
        .await;
    refused(registered, "N4", format_args!("a ttl above the maximum"));
    ensure_eq!(
        view_opt(
            r.lookup_node("n4-node")
                .await
                .answer("N2", "lookup_node must answer a valid call")
                .as_ref()
        ),
        None,
        "N4",
        "a refused registration must write nothing"
    );
}
