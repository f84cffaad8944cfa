//! The backend guide's example failure (`docs/backend-guide.md`, "Running the suite") is
//! what the suite says to a backend with that bug: a release that resets the gen to 0, read
//! back through `OwnerState::from_record` as a real backend reads it. The guide's text may
//! stop at `..` where the message goes on; everything before that must match.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use unique_core::{
    CasOutcome, CurrentView, Error, Key, Owner, OwnerState, Store, async_trait, encode_owner,
};
use unique_store_contract::model::{ClaimVerdict, RecordModel};
use unique_store_contract::{RawRecord, RawWriter, Subject};

/// The guide, whose `text` block after "A failing case says" is checked here.
const GUIDE: &str = include_str!("../../../docs/backend-guide.md");

/// Records by key, each a correct model, except that a release writes gen 0.
#[derive(Default)]
struct ResetsGen(Mutex<HashMap<Key, RecordModel>>);

impl ResetsGen {
    fn with<R>(&self, key: &Key, f: impl FnOnce(&mut RecordModel) -> R) -> R {
        f(self.0.lock().unwrap().entry(key.clone()).or_default())
    }
}

#[async_trait]
impl Store for ResetsGen {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        Ok(self.with(key, |m| m.state().clone()))
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        encode_owner(owner)?;
        self.with(key, |m| match m.claim(owner, claim_id, snap) {
            ClaimVerdict::Won(generation) => Ok(CasOutcome::Written { generation }),
            ClaimVerdict::ConditionFailed => Ok(CasOutcome::lost()),
            ClaimVerdict::GenExhausted => Err(Error::unavailable("gen exhausted")),
        })
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.read_owner(key).await?.into_current_view()
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        Ok(self.with(key, |m| {
            let released = m.release(generation);
            if released {
                // The bug: the tombstone is written at gen 0, and a record at gen 0
                // reads back as absent.
                let stored = OwnerState::from_record(0, Some("").into(), None, None);
                *m = RecordModel::from_state(stored);
            }
            released
        }))
    }
}

#[async_trait]
impl RawWriter for ResetsGen {
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error> {
        let state = OwnerState::from_record(
            record.generation,
            record.owner.as_deref().into(),
            record.claim_id,
            record.won.as_deref(),
        );
        self.with(key, |m| *m = RecordModel::from_state(state));
        Ok(())
    }
}

/// The first line of the guide's `text` block after "A failing case says".
fn guide_example() -> &'static str {
    let (_, after) = GUIDE
        .split_once("A failing case says")
        .expect("the guide shows a failing case");
    let (_, block) = after
        .split_once("```text\n")
        .expect("the failing case is a text block");
    block.lines().next().expect("the block has a line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_failure_example_is_what_the_suite_says() {
    let report = unique_store_contract::check_all(|| async {
        let store = Arc::new(ResetsGen::default());
        Subject {
            store: store.clone(),
            raw: store,
        }
    })
    .await;
    let example = guide_example();
    let shown = example.split_once("..").map_or(example, |(head, _)| head);
    let said: Vec<&str> = report
        .failures
        .iter()
        .filter(|f| f.clause() == "C5")
        .map(|f| f.message.as_str())
        .collect();
    assert!(
        said.iter().any(|message| message.starts_with(shown)),
        "docs/backend-guide.md shows\n  {example}\nbut the suite's C5 failures on a store whose \
         release resets the gen say\n  {}",
        said.join("\n  ")
    );
}
