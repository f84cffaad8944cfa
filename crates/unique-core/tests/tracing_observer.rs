//! `TracingObserver` emits one structured event per claim, kick and release at the
//! levels its docs promise, and never logs an owner endpoint (whose query string
//! may hold a secret).

mod common;

use std::io;
use std::sync::{Arc, Mutex};

use common::{KickBehaviour, ScriptedKicker, ScriptedStore, input, key, online};
use serde_json::Value;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::fmt::MakeWriter;
use unique_core::{Arbiter, ClaimInput, Error, KickDetail, Owner, OwnerState, TracingObserver};

const OLD_SECRET_ENDPOINT: &str = "http://old.node:9000/kick?token=old-secret";
const NEW_SECRET_ENDPOINT: &str = "https://new.node/kick?token=new-secret";

/// Collects everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Self;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Captured {
    /// Installs a JSON subscriber for this thread (the test's current-thread runtime).
    fn install() -> (Self, DefaultGuard) {
        let captured = Self::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(captured.clone())
            .finish();
        (
            captured.clone(),
            tracing::subscriber::set_default(subscriber),
        )
    }

    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// Each event's `fields`, with `level` and `target` added for the asserts.
    fn events(&self) -> Vec<Value> {
        self.text()
            .lines()
            .map(|line| {
                let event: Value = serde_json::from_str(line).unwrap();
                let mut fields = event["fields"].clone();
                fields["level"] = event["level"].clone();
                fields["target"] = event["target"].clone();
                fields
            })
            .collect()
    }

    fn assert_no_endpoint(&self) {
        let text = self.text();
        for leak in ["secret", "token=", "old.node", "new.node", "ftp.node"] {
            assert!(!text.contains(leak), "{leak:?} logged:\n{text}");
        }
    }
}

fn secret_input() -> ClaimInput {
    with_endpoint(NEW_SECRET_ENDPOINT)
}

fn with_endpoint(endpoint: &str) -> ClaimInput {
    ClaimInput {
        owner: Owner::new("eu-west-1", "c2", endpoint),
        ..input()
    }
}

fn old_secret_session(generation: i64) -> OwnerState {
    online(
        generation,
        Owner::new("us-east-1", "c1", OLD_SECRET_ENDPOINT),
        "claim-old",
    )
}

fn traced(store: ScriptedStore, kick: KickBehaviour) -> Arbiter<ScriptedStore> {
    Arbiter::builder(store)
        .kicker(ScriptedKicker::always(kick))
        .observer(TracingObserver)
        .build()
}

#[tokio::test]
async fn confirmed_kick_and_claim_are_logged_without_endpoints() {
    let (captured, _guard) = Captured::install();
    let store = ScriptedStore::new()
        .read(Ok(old_secret_session(5)))
        .cas(Ok(6));

    traced(store, KickBehaviour::Confirm)
        .claim(&secret_input())
        .await
        .unwrap();

    let events = captured.events();
    assert_eq!(events.len(), 2, "{events:#?}");
    let kick = &events[0];
    assert_eq!(kick["message"], "kick");
    assert_eq!(kick["success"], true);
    assert_eq!(kick["level"], "DEBUG");
    assert_eq!(kick["target"], "unique");
    assert!(kick.get("detail").is_none(), "no detail on success");
    let claim = &events[1];
    assert_eq!(claim["message"], "claim ok");
    assert_eq!(
        claim["level"], "DEBUG",
        "a busy server does not log every claim"
    );
    assert_eq!(claim["generation"], 6);
    assert_eq!(claim["prev_generation"], 5);
    assert_eq!(claim["has_prev"], true);
    assert_eq!(claim["kicked"], true);
    assert_eq!(claim["replayed"], false);
    assert_eq!(claim["attempts"], 1);
    assert!(claim["took_us"].is_u64());
    captured.assert_no_endpoint();
}

#[tokio::test]
async fn failed_kick_is_logged_with_its_detail() {
    let (captured, _guard) = Captured::install();
    let store = ScriptedStore::new()
        .read(Ok(old_secret_session(5)))
        .cas(Ok(6));

    traced(store, KickBehaviour::Fail(KickDetail::ConnectError))
        .claim(&secret_input())
        .await
        .unwrap();

    let events = captured.events();
    assert_eq!(events[0]["message"], "kick");
    assert_eq!(events[0]["success"], false);
    assert_eq!(
        events[0]["level"], "INFO",
        "a presumed-offline kick is notable"
    );
    assert_eq!(events[0]["detail"], "connect-error");
    assert_eq!(events[1]["kick_detail"], "connect-error");
    assert_eq!(events[1]["kicked"], false);
    captured.assert_no_endpoint();
}

#[tokio::test]
async fn replay_is_logged_as_replayed() {
    let (captured, _guard) = Captured::install();
    let mine = online(4, Owner::new("", "", NEW_SECRET_ENDPOINT), common::CLAIM_ID);

    traced(ScriptedStore::new().read(Ok(mine)), KickBehaviour::Confirm)
        .claim(&secret_input())
        .await
        .unwrap();

    let events = captured.events();
    assert_eq!(events.len(), 1, "no kick event on a replay");
    assert_eq!(events[0]["replayed"], true);
    assert_eq!(events[0]["generation"], 4);
    captured.assert_no_endpoint();
}

#[tokio::test]
async fn invalid_endpoint_is_logged_as_failed_without_echoing_it() {
    let (captured, _guard) = Captured::install();
    let claim = with_endpoint("ftp://ftp.node/kick?token=bad-secret");

    let err = traced(ScriptedStore::new(), KickBehaviour::Confirm)
        .claim(&claim)
        .await
        .unwrap_err();

    assert!(err.is_invalid_params());
    let events = captured.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["message"], "claim failed");
    assert_eq!(events[0]["level"], "WARN");
    assert_eq!(events[0]["code"], "invalid_params");
    assert_eq!(events[0]["attempts"], 0);
    assert!(
        events[0]["error"]
            .as_str()
            .unwrap()
            .contains("owner.endpoint")
    );
    captured.assert_no_endpoint();
}

#[tokio::test]
async fn store_failure_is_logged_with_its_code() {
    let (captured, _guard) = Captured::install();
    let store = ScriptedStore::new()
        .read(Ok(old_secret_session(5)))
        .cas(Err(Error::Throttled));

    traced(store, KickBehaviour::Fail(KickDetail::Timeout))
        .claim(&secret_input())
        .await
        .unwrap_err();

    let events = captured.events();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["detail"], "timeout");
    assert_eq!(events[1]["message"], "claim failed");
    assert_eq!(events[1]["code"], "throttled");
    assert_eq!(events[1]["attempts"], 1);
    captured.assert_no_endpoint();
}

#[tokio::test]
async fn release_is_logged_with_key_and_result() {
    let (captured, _guard) = Captured::install();
    let arbiter = traced(
        ScriptedStore::new().release(Ok(true)),
        KickBehaviour::Confirm,
    );

    assert!(arbiter.release(&key(), 3).await.unwrap());
    assert!(!arbiter.release(&key(), 0).await.unwrap());

    let events = captured.events();
    assert_eq!(events.len(), 2);
    for (event, released) in events.iter().zip([true, false]) {
        assert_eq!(event["message"], "release");
        assert_eq!(event["key"], "game#prod#42");
        assert_eq!(event["released"], released);
        assert_eq!(event["level"], "DEBUG");
    }
}
