//! A scripted [`Transport`] for exact, paused-clock tests.

#![allow(dead_code, unreachable_pub)]

pub mod kicks;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use unique_client::{ClaimInput, ClaimOutcome, Transport, async_trait};
use unique_core::{CurrentView, Error, Key, Owner};

/// One scripted answer.
pub enum Step<T> {
    /// Answer at once with this result.
    Reply(Result<T, Error>),
    /// Never answer.
    Hang,
}

/// What the transport saw.
#[derive(Debug, Clone)]
pub struct Call {
    pub at: Instant,
    pub claim_id: Option<String>,
}

#[derive(Default)]
struct Script {
    claims: VecDeque<Step<ClaimOutcome>>,
    currents: VecDeque<Step<CurrentView>>,
    releases: VecDeque<Step<bool>>,
    /// Answer every claim beyond the script with this error kind (retry-budget tests).
    claim_forever: Option<fn() -> Error>,
    log: Vec<Call>,
}

/// A transport that answers from a script and records every call.
#[derive(Clone, Default)]
pub struct Scripted {
    script: Arc<Mutex<Script>>,
}

impl Scripted {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn claim(self, step: Step<ClaimOutcome>) -> Self {
        self.script.lock().unwrap().claims.push_back(step);
        self
    }

    pub fn claim_forever(self, error: fn() -> Error) -> Self {
        self.script.lock().unwrap().claim_forever = Some(error);
        self
    }

    pub fn current(self, step: Step<CurrentView>) -> Self {
        self.script.lock().unwrap().currents.push_back(step);
        self
    }

    pub fn release(self, step: Step<bool>) -> Self {
        self.script.lock().unwrap().releases.push_back(step);
        self
    }

    pub fn calls(&self) -> Vec<Call> {
        self.script.lock().unwrap().log.clone()
    }

    fn record(&self, claim_id: Option<String>) {
        self.script.lock().unwrap().log.push(Call {
            at: Instant::now(),
            claim_id,
        });
    }
}

async fn play<T>(step: Step<T>) -> Result<T, Error> {
    match step {
        Step::Reply(result) => result,
        Step::Hang => std::future::pending().await,
    }
}

#[async_trait]
impl Transport for Scripted {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        self.record(Some(request.claim_id.clone()));
        let step = {
            let mut s = self.script.lock().unwrap();
            match (s.claims.pop_front(), s.claim_forever) {
                (Some(step), _) => step,
                (None, Some(error)) => Step::Reply(Err(error())),
                (None, None) => panic!("claim script exhausted"),
            }
        };
        play(step).await
    }

    async fn current(&self, _key: &Key) -> Result<CurrentView, Error> {
        self.record(None);
        let step = self.script.lock().unwrap().currents.pop_front();
        play(step.expect("current script exhausted")).await
    }

    async fn release(&self, _key: &Key, _generation: i64) -> Result<bool, Error> {
        self.record(None);
        let step = self.script.lock().unwrap().releases.pop_front();
        play(step.expect("release script exhausted")).await
    }
}

pub fn key() -> Key {
    Key::new("game", "prod", 42)
}

pub fn owner() -> Owner {
    Owner::new("eu", "c1", "http://127.0.0.1:9/kick")
}

pub fn outcome(generation: i64) -> ClaimOutcome {
    ClaimOutcome {
        generation,
        prev_generation: generation - 1,
        has_prev: generation > 1,
        prev_owner: None,
        kicked: generation > 1,
        kick_detail: None,
        replayed: false,
    }
}

/// What the replay short-circuit answers.
pub fn replayed(generation: i64) -> ClaimOutcome {
    ClaimOutcome {
        generation,
        prev_generation: 0,
        has_prev: false,
        prev_owner: None,
        kicked: false,
        kick_detail: None,
        replayed: true,
    }
}

/// The session at `generation` is online.
pub fn online(generation: i64) -> CurrentView {
    CurrentView {
        generation,
        owner: Some(owner()),
        exists: true,
    }
}

/// A tombstone at `generation`.
pub fn tombstone(generation: i64) -> CurrentView {
    CurrentView {
        generation,
        owner: None,
        exists: true,
    }
}

/// No record.
pub fn absent() -> CurrentView {
    CurrentView::default()
}
