//! Quick start: two logins for one user on the in-memory store.
//!
//! The second login kicks the first (here a kicker that just prints and
//! confirms), then claims the key with the next gen.
//!
//! Run: `cargo run -p unique-examples --bin quickstart`

use std::time::Duration;

use unique_sessions::core::{KickOutcome, Kicker, async_trait};
use unique_sessions::store::MemoryStore;
use unique_sessions::{Arbiter, ClaimInput, Error, Key, KickPayload, Owner};

/// Stands in for the HTTP kicker: "delivers" the kick by printing it.
struct PrintingKicker;

#[async_trait]
impl Kicker for PrintingKicker {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, _timeout: Duration) -> KickOutcome {
        println!(
            "  kick -> {endpoint}: {}#{}#{} must go below gen {}",
            payload.project, payload.env, payload.uid, payload.generation
        );
        KickOutcome::Confirmed
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let arbiter = Arbiter::builder(MemoryStore::new())
        .kicker(PrintingKicker)
        .build();
    let key = Key::new("game", "prod", 42);

    let phone = arbiter
        .claim(&ClaimInput {
            key: key.clone(),
            owner: Owner::new("eu", "c1", "http://10.0.0.7:9000/kick"),
            claim_id: "login-on-phone".into(),
        })
        .await?;
    println!("phone logged in: gen {}", phone.generation);

    let tablet = arbiter
        .claim(&ClaimInput {
            key: key.clone(),
            owner: Owner::new("eu", "c2", "http://10.0.0.8:9000/kick"),
            claim_id: "login-on-tablet".into(),
        })
        .await?;
    println!(
        "tablet logged in: gen {} (previous gen {}, kicked: {})",
        tablet.generation, tablet.prev_generation, tablet.kicked
    );

    let view = arbiter.current(&key).await?;
    println!(
        "online now: gen {} at {}",
        view.generation,
        view.owner.map(|o| o.endpoint).unwrap_or_default()
    );
    assert_eq!((phone.generation, tablet.generation), (1, 2));
    Ok(())
}
