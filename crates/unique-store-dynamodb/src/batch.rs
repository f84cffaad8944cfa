//! `read_owners` as `BatchGetItem`: the loop that re-sends unprocessed keys.
//!
//! DynamoDB may answer a `BatchGetItem` with only part of the items and hand the rest back as
//! `UnprocessedKeys` (when a partition's throughput is exceeded). Those are sent again, after
//! a backoff that doubles each time, within the store's attempt budget (`max_attempts`
//! requests in all, the same budget the SDK gives one call); keys still unprocessed then make
//! the batch `Throttled`, which callers retry later. Kept apart from the SDK call so the loop
//! is tested with a scripted fetch: dynalite never leaves keys unprocessed.

use std::future::Future;
use std::time::Duration;

use unique_core::Error;

use crate::codec::Item;

/// What one `BatchGetItem` returned: the items found, and the keys it left for later.
#[derive(Debug, Default)]
pub(crate) struct Fetched {
    pub(crate) items: Vec<Item>,
    pub(crate) unprocessed: Vec<Item>,
}

/// Reads `keys` (each a `{pk}` key map, no duplicates) with `fetch`, re-sending unprocessed
/// keys at most `attempts` requests in all, waiting `backoff`, then twice as long, … between
/// them. Returns every item found (absent keys have none).
pub(crate) async fn fetch_all<F, Fut>(
    keys: Vec<Item>,
    attempts: u32,
    backoff: Duration,
    mut fetch: F,
) -> Result<Vec<Item>, Error>
where
    F: FnMut(Vec<Item>) -> Fut,
    Fut: Future<Output = Result<Fetched, Error>>,
{
    let attempts = attempts.max(1);
    let mut found = Vec::with_capacity(keys.len());
    let mut pending = keys;
    let mut wait = backoff;
    for attempt in 1..=attempts {
        let fetched = fetch(pending).await?;
        found.extend(fetched.items);
        pending = fetched.unprocessed;
        if pending.is_empty() {
            return Ok(found);
        }
        if attempt < attempts {
            tokio::time::sleep(wait).await;
            wait = wait.saturating_mul(2);
        }
    }
    Err(Error::Throttled)
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use aws_sdk_dynamodb::types::AttributeValue;

    use super::*;
    use crate::codec::PK;

    fn key(pk: &str) -> Item {
        Item::from([(PK.to_owned(), AttributeValue::S(pk.to_owned()))])
    }

    /// A fetch that answers from a script: per request, how many of the sent keys it
    /// processes (the rest come back unprocessed), or an error. Records what was sent.
    struct Script {
        answers: Mutex<VecDeque<Result<usize, Error>>>,
        sent: Mutex<Vec<Vec<Item>>>,
    }

    impl Script {
        fn new(answers: Vec<Result<usize, Error>>) -> Self {
            Self {
                answers: Mutex::new(answers.into()),
                sent: Mutex::new(Vec::new()),
            }
        }

        /// Async like the real fetch, though the script answers at once.
        #[allow(clippy::unused_async)]
        async fn fetch(&self, keys: Vec<Item>) -> Result<Fetched, Error> {
            self.sent.lock().unwrap().push(keys.clone());
            let processed = self
                .answers
                .lock()
                .unwrap()
                .pop_front()
                .expect("scripted")?;
            let mut keys = keys;
            let unprocessed = keys.split_off(processed.min(keys.len()));
            Ok(Fetched {
                items: keys,
                unprocessed,
            })
        }

        fn sent_sizes(&self) -> Vec<usize> {
            self.sent.lock().unwrap().iter().map(Vec::len).collect()
        }
    }

    fn keys(n: usize) -> Vec<Item> {
        (0..n).map(|i| key(&format!("p#e#{i}"))).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn unprocessed_keys_are_sent_again_until_all_are_read() {
        let script = Script::new(vec![Ok(40), Ok(50), Ok(100)]);
        let started = tokio::time::Instant::now();
        let found = fetch_all(keys(100), 3, Duration::from_millis(100), |k| {
            script.fetch(k)
        })
        .await
        .unwrap();
        assert_eq!(found.len(), 100);
        assert_eq!(
            script.sent_sizes(),
            [100, 60, 10],
            "only the unprocessed go again"
        );
        // Backoff 100 ms, then 200 ms.
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        let mut pks: Vec<_> = found
            .iter()
            .map(|i| i[PK].as_s().unwrap().clone())
            .collect();
        pks.sort();
        pks.dedup();
        assert_eq!(pks.len(), 100, "each key read once");
    }

    #[tokio::test(start_paused = true)]
    async fn keys_still_unprocessed_after_the_budget_are_throttled() {
        let script = Script::new(vec![Ok(10), Ok(0), Ok(5)]);
        let err = fetch_all(keys(30), 3, Duration::from_millis(100), |k| script.fetch(k))
            .await
            .unwrap_err();
        assert!(err.is_throttled(), "{err}");
        assert_eq!(script.sent_sizes(), [30, 20, 20], "three requests, no more");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_request_fails_the_batch_at_once() {
        let script = Script::new(vec![Ok(1), Err(Error::unavailable("down"))]);
        let err = fetch_all(keys(3), 3, Duration::from_millis(1), |k| script.fetch(k))
            .await
            .unwrap_err();
        assert!(err.is_unavailable(), "{err}");
        assert_eq!(script.sent_sizes(), [3, 2]);
    }

    #[tokio::test]
    async fn one_request_when_everything_is_processed() {
        let script = Script::new(vec![Ok(100)]);
        let found = fetch_all(keys(100), 1, Duration::ZERO, |k| script.fetch(k))
            .await
            .unwrap();
        assert_eq!((found.len(), script.sent_sizes()), (100, vec![100]));
    }
}
