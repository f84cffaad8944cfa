//! `--max-slots-per-user` on the real binary: a login in a new slot of a user already holding
//! the limit is 409 `too_many_slots` with the limit and writes nothing, a login in an online
//! slot is never refused, a logout makes room; 0 and values above 1000 stop startup with a
//! message naming the flag. The Rust client reads the refusal as `TooManySlots`, not as
//! superseded (`docs/design.md#device-slots`).

mod common;

use std::process::Command;

use common::{BIN, post_json, start};
use serde_json::{Value, json};
use unique_client::Transport;
use unique_client_http::HttpTransport;
use unique_core::{ClaimInput, Error, Key, Owner};

fn claim(slot: &str, claim_id: &str) -> Value {
    json!({
        "project": "game", "env": "prod", "uid": 7, "slot": slot,
        "owner": {"endpoint": format!("http://127.0.0.1:9/{slot}")},
        "claim_id": claim_id,
    })
}

fn slots(listing: &Value) -> Vec<&str> {
    listing["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("not a listing: {listing}"))
        .iter()
        .map(|s| s["slot"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_new_slot_beyond_the_limit_is_409_too_many_slots_and_writes_nothing() {
    let (addr, _server) = start(Command::new(BIN).args([
        "--listen",
        "127.0.0.1:0",
        "--store",
        "memory",
        "--max-slots-per-user",
        "2",
    ]));
    let user = json!({"project": "game", "env": "prod", "uid": 7});
    for slot in ["pc", "mobile"] {
        let (status, answer) = post_json(&addr, "/v1/claim", "", &claim(slot, slot)).await;
        assert_eq!(status, 200, "{slot}: {answer}");
    }
    let (status, refused) = post_json(&addr, "/v1/claim", "", &claim("tablet", "t1")).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"], "too_many_slots", "{refused}");
    assert_eq!(refused["limit"], 2, "{refused}");
    assert!(refused.get("gen").is_none(), "{refused}");
    let (_, listing) = post_json(&addr, "/v1/sessions", "", &user).await;
    assert_eq!(
        slots(&listing),
        ["mobile", "pc"],
        "nothing written: {listing}"
    );

    // A login in an online slot is a takeover, never refused.
    let (status, again) = post_json(&addr, "/v1/claim", "", &claim("pc", "pc-2")).await;
    assert_eq!((status, &again["gen"]), (200, &json!(2)), "{again}");

    // The Rust client reads the 409 by its code: TooManySlots with the limit.
    let transport = HttpTransport::new(&format!("http://{addr}")).unwrap();
    let input = ClaimInput {
        key: Key::new("game", "prod", 7).with_slot("tablet"),
        owner: Owner::new("", "", "http://127.0.0.1:9/tablet"),
        claim_id: "t2".to_owned(),
    };
    let e = transport.claim(&input).await.unwrap_err();
    assert!(matches!(e, Error::TooManySlots { limit: 2 }), "{e:?}");
    assert!(!e.is_retryable() && !e.is_superseded(), "{e}");

    // A logout makes room.
    let release = json!({"project": "game", "env": "prod", "uid": 7, "slot": "mobile", "gen": 1});
    let (status, released) = post_json(&addr, "/v1/release", "", &release).await;
    assert_eq!(
        (status, &released["released"]),
        (200, &json!(true)),
        "{released}"
    );
    let (status, tablet) = post_json(&addr, "/v1/claim", "", &claim("tablet", "t1")).await;
    assert_eq!(status, 200, "{tablet}");
}

#[test]
fn a_limit_of_zero_or_above_1000_stops_startup_naming_the_flag() {
    for bad in ["0", "1001", "-1", "many"] {
        let out = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
            .arg(format!("--max-slots-per-user={bad}"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--max-slots-per-user"), "{bad}: {stderr}");
    }
}

#[tokio::test]
async fn the_listing_is_paged_and_the_client_follows_next_to_the_end() {
    let (addr, _server) = start(Command::new(BIN).args([
        "--listen",
        "127.0.0.1:0",
        "--store",
        "memory",
        "--max-slots-per-user",
        "150",
    ]));
    // 120 slots: more than one default page (100). Slot names sort as their numbers.
    let names: Vec<String> = (0..120).map(|i| format!("s{i:03}")).collect();
    for name in &names {
        let (status, answer) = post_json(&addr, "/v1/claim", "", &claim(name, name)).await;
        assert_eq!(status, 200, "{name}: {answer}");
    }
    let page = |limit: Value, after: Value| {
        let mut body = json!({"project": "game", "env": "prod", "uid": 7});
        if !limit.is_null() {
            body["limit"] = limit;
        }
        if !after.is_null() {
            body["after"] = after;
        }
        body
    };
    let (status, first) =
        post_json(&addr, "/v1/sessions", "", &page(Value::Null, Value::Null)).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(slots(&first), names[..100], "the default page is 100");
    assert_eq!(first["next"], "s099", "{first}");
    let (_, last) = post_json(&addr, "/v1/sessions", "", &page(json!(100), json!("s099"))).await;
    assert_eq!(slots(&last), names[100..]);
    assert!(
        last.get("next").is_none(),
        "the last page has no next: {last}"
    );
    let (_, small) = post_json(&addr, "/v1/sessions", "", &page(json!(2), json!("s010"))).await;
    assert_eq!(
        (slots(&small), &small["next"]),
        (vec!["s011", "s012"], &json!("s012"))
    );

    for (limit, after, needle) in [
        (json!(0), Value::Null, "limit"),
        (json!(1001), Value::Null, "limit"),
        (json!(2.5), Value::Null, "limit"),
        (Value::Null, json!("a#b"), "after"),
    ] {
        let (status, refused) = post_json(&addr, "/v1/sessions", "", &page(limit, after)).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"], "invalid_params", "{refused}");
        assert!(
            refused["message"].as_str().unwrap().contains(needle),
            "{refused}"
        );
    }

    // The Rust client (and the CLI through it) lists every page.
    let transport = HttpTransport::new(&format!("http://{addr}")).unwrap();
    let user = unique_core::UserKey::new("game", "prod", 7);
    let all = transport.sessions(&user).await.unwrap();
    let listed: Vec<&str> = all.iter().map(|s| s.slot.as_str()).collect();
    assert_eq!(listed, names);
    let one = transport
        .sessions_page(&user, Some("s118"), Some(5))
        .await
        .unwrap();
    assert_eq!((one.sessions.len(), one.next), (1, None));
}
