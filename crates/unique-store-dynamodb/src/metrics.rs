//! Round-trip counting: an SDK interceptor that counts every HTTP attempt the
//! store's client sends, by operation, SDK retries included.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;

/// Requests a [`DynamoStore`](crate::DynamoStore) has sent, counted per HTTP
/// attempt (an SDK retry is one more request): the store's round trips.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// `GetItem` requests (`read_owner`, `current`).
    pub get_item: u64,
    /// `UpdateItem` requests (claims and releases).
    pub update_item: u64,
    /// `BatchGetItem` requests (`read_owners`, retries of unprocessed keys included).
    pub batch_get_item: u64,
    /// `Query` requests (`list_sessions`, one per page).
    pub query: u64,
    /// Every other request (`DescribeTable`, `CreateTable`, …).
    pub other: u64,
}

impl RequestCounts {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.get_item + self.update_item + self.batch_get_item + self.query + self.other
    }

    /// The requests sent between `earlier` and `self` (field by field).
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            get_item: self.get_item - earlier.get_item,
            update_item: self.update_item - earlier.update_item,
            batch_get_item: self.batch_get_item - earlier.batch_get_item,
            query: self.query - earlier.query,
            other: self.other - earlier.other,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    get_item: AtomicU64,
    update_item: AtomicU64,
    batch_get_item: AtomicU64,
    query: AtomicU64,
    other: AtomicU64,
}

/// The interceptor, and the handle the store reads counts from (shared).
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestCounter {
    counters: Arc<Counters>,
}

impl RequestCounter {
    pub(crate) fn snapshot(&self) -> RequestCounts {
        let c = &self.counters;
        RequestCounts {
            get_item: c.get_item.load(Ordering::Relaxed),
            update_item: c.update_item.load(Ordering::Relaxed),
            batch_get_item: c.batch_get_item.load(Ordering::Relaxed),
            query: c.query.load(Ordering::Relaxed),
            other: c.other.load(Ordering::Relaxed),
        }
    }
}

/// The DynamoDB JSON protocol names the operation in this header
/// (`DynamoDB_20120810.UpdateItem`), so no extra crate is needed to tell them apart.
const TARGET_HEADER: &str = "x-amz-target";

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "unique-store-dynamodb request counter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context.request().headers().get(TARGET_HEADER);
        let operation = target.and_then(|t| t.rsplit('.').next());
        let counter = match operation {
            Some("GetItem") => &self.counters.get_item,
            Some("UpdateItem") => &self.counters.update_item,
            Some("BatchGetItem") => &self.counters.batch_get_item,
            Some("Query") => &self.counters.query,
            _ => &self.counters.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_subtracts_field_by_field() {
        let before = RequestCounts {
            get_item: 1,
            update_item: 2,
            batch_get_item: 1,
            query: 5,
            other: 3,
        };
        let after = RequestCounts {
            get_item: 4,
            update_item: 4,
            batch_get_item: 3,
            query: 6,
            other: 3,
        };
        let delta = after.since(&before);
        assert_eq!(
            delta,
            RequestCounts {
                get_item: 3,
                update_item: 2,
                batch_get_item: 2,
                query: 1,
                other: 0
            }
        );
        assert_eq!(delta.total(), 8);
    }
}
