//! Unit tests of `lease.rs`.
use super::*;

fn sql() -> LeaseStatements {
    LeaseStatements::for_prefix("ops.lease").unwrap()
}

#[test]
fn names_come_from_the_prefix() {
    let sql = sql();
    assert_eq!(sql.leases, "\"ops\".\"lease_leases\"");
    assert_eq!(sql.nodes, "\"ops\".\"lease_nodes\"");
    assert_eq!(sql.epoch, "\"ops\".\"lease_epoch\"");
    assert!(
        sql.grant
            .contains("nextval('\"ops\".\"lease_epoch\"'::regclass)")
    );
    for bad in ["", "ops.", "a;b", "a.b.c", "x'y", &"p".repeat(57)] {
        let e = LeaseStatements::for_prefix(bad).unwrap_err();
        assert!(e.is_invalid_params(), "{bad}: {e}");
    }
}

#[test]
fn lock_keys_are_fixed_and_differ_by_room_and_table() {
    let sql = sql();
    assert_ne!(sql.lock_key("room-1"), sql.lock_key("room-2"));
    let other = LeaseStatements::for_prefix("lease").unwrap();
    assert_ne!(sql.lock_key("room-1"), other.lock_key("room-1"));
    assert_ne!(sql.lock_key("room-1"), sql.node_lock_key("room-1"));
    // Pinned: a build that hashed otherwise would not exclude an older one.
    assert_eq!(sql.lock_key("room-1"), 0x0f87_82f4_dd17_fe0d);
}

#[test]
fn the_check_names_what_is_missing() {
    let sql = sql();
    let good = || Inspection {
        leases: true,
        nodes: true,
        epoch: true,
        cache: 1,
        cycle: false,
        standby: false,
    };
    verdict(&sql, &good()).unwrap();
    let e = verdict(
        &sql,
        &Inspection {
            leases: false,
            epoch: false,
            ..good()
        },
    )
    .unwrap_err();
    assert!(e.is_unavailable());
    let text = e.to_string();
    assert!(
        text.contains("missing: \"ops\".\"lease_leases\", \"ops\".\"lease_epoch\" "),
        "{text}"
    );
    assert!(text.contains("create_tables()"), "{text}");
    assert!(!text.contains("missing: \"ops\".\"lease_nodes\""), "{text}");
    let e = verdict(
        &sql,
        &Inspection {
            cache: 20,
            ..good()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("CACHE 1"), "{e}");
    let e = verdict(
        &sql,
        &Inspection {
            standby: true,
            ..good()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("standby"), "{e}");
}

#[test]
fn store_errors_keep_their_class() {
    let e = lease_error(unique_core::Error::invalid("x"));
    assert!(e.is_invalid_params());
    let e = lease_error(unique_core::Error::unavailable("postgres read failed"));
    assert!(e.is_unavailable());
    assert_eq!(e.to_string(), "unavailable: postgres read failed");
    let e = lease_error(unique_core::Error::Throttled);
    assert!(matches!(e, LeaseError::Backend { .. }));
}
