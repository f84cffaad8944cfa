//! The [`Store`] on DynamoDB: one request per operation, every claim a single
//! conditional `UpdateItem`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeValue, BillingMode, KeysAndAttributes, ReturnValue,
    ReturnValuesOnConditionCheckFailure, TableDescription, TableStatus,
};
use unique_core::{
    CasOutcome, CurrentView, Error, Fence, Key, MAX_BATCH_KEYS, Owner, OwnerState, Store, UserKey,
    UserSession, VacantClaim, VacantClaims, async_trait, encode_owner, ready_key,
};

use crate::batch::{self, Fetched};
use crate::builder::{DEFAULT_RETRY_BACKOFF, DynamoStoreBuilder};
use crate::codec::{self, CLAIM_UPDATE, ClaimForm, Item, RELEASE_CONDITION, RELEASE_UPDATE};
use crate::error::{self, Kind, UpdateFailure};
use crate::metrics::{RequestCounter, RequestCounts};
use crate::schema;

/// How often [`DynamoStore::create_table_if_missing`] looks at a table that is
/// still being created.
const TABLE_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// A [`Store`] on one DynamoDB table (C1–C10).
///
/// Every item is keyed by its user (`pk`) and slot (`sk`, see the crate docs).
///
/// - `read_owner` / `current`: `GetItem` with `ConsistentRead = true` (C2).
/// - `read_owners`: one `BatchGetItem` with `ConsistentRead = true`.
/// - `list_sessions`: one `Query` of the user's partition with
///   `ConsistentRead = true` (C10); a partition beyond one 1 MB page costs one
///   more `Query` per page.
/// - `claim_cas`: one `UpdateItem` that checks the snapshot's [`Fence`] and
///   writes `gen`, `owner`, `cid` and `won` (the snapshot's recent claims and
///   this win, C9) together (C4), returning the written gen
///   (`ReturnValues = UPDATED_NEW`). A failed condition is a lost race that
///   asks for the item (`ALL_OLD`) and hands it to the Arbiter as the next
///   snapshot when the server returns it.
/// - `release`: one `UpdateItem SET owner = "" REMOVE cid` conditioned on `gen`
///   (C5), leaving `won` as it is (C9).
/// - `check_ready`: a strongly consistent `GetItem` of [`ready_key`], whatever it holds.
///
/// Cheap to clone (the SDK client is shared).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: Arc<str>,
    counter: RequestCounter,
    /// Requests one batch read may send (the SDK's attempts per call).
    max_attempts: u32,
}

impl DynamoStore {
    /// Starts configuring a store.
    pub fn builder() -> DynamoStoreBuilder {
        DynamoStoreBuilder::default()
    }

    pub(crate) fn new(
        client: Client,
        table: String,
        counter: RequestCounter,
        max_attempts: u32,
    ) -> Self {
        Self {
            client,
            max_attempts,
            table: table.into(),
            counter,
        }
    }

    /// The SDK client the store sends through (with the request counter attached).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Requests sent so far by this store and its clones, per HTTP attempt.
    pub fn request_counts(&self) -> RequestCounts {
        self.counter.snapshot()
    }

    /// A bounded startup check (one `DescribeTable`): the table exists, is
    /// `ACTIVE`, and has the store's key schema, partition key `pk` (S) and sort
    /// key `sk` (S).
    ///
    /// # Errors
    ///
    /// `Unavailable` when the server does not answer within `within`, the table
    /// is missing or not active, the request fails, or the table has another key
    /// schema: a table from before device slots (partition key `pk` only) is
    /// refused with the steps that move its items to a new table, any other
    /// schema naming what was found. `Throttled` when throttled.
    pub async fn check_reachable(&self, within: Duration) -> Result<(), Error> {
        let describe = async {
            let Some(table) = self.describe().await? else {
                return Err(Error::unavailable(format!(
                    "dynamodb table {} does not exist",
                    self.table
                )));
            };
            match status(&table) {
                TableStatus::Active => schema::check(&self.table, &table),
                status => Err(Error::unavailable(format!(
                    "dynamodb table {} is {}, not ACTIVE",
                    self.table,
                    status.as_str()
                ))),
            }
        };
        bounded(within, "DescribeTable", describe).await
    }

    /// Creates the table when it is missing (partition key `pk` and sort key
    /// `sk`, both of type S, on-demand billing) and waits until it is `ACTIVE`,
    /// all within `within`. Returns whether this call created it. Safe to race: a
    /// concurrent creation is waited for, not reported. An existing table is
    /// left as it is, whatever its key schema: [`check_reachable`](Self::check_reachable)
    /// refuses one the store cannot use.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the table is not active within `within` or a request
    /// fails; `Throttled` when throttled.
    pub async fn create_table_if_missing(&self, within: Duration) -> Result<bool, Error> {
        let ensure = async {
            let mut created = false;
            loop {
                // Bound first: a temporary of the match would be held across
                // the creation's await.
                let table_status = self.describe().await?.as_ref().map(status);
                match table_status {
                    Some(TableStatus::Active) => return Ok(created),
                    Some(TableStatus::Creating | TableStatus::Updating) => {}
                    Some(status) => {
                        return Err(Error::unavailable(format!(
                            "dynamodb table {} is {}",
                            self.table,
                            status.as_str()
                        )));
                    }
                    None => created = self.create_table().await?,
                }
                tokio::time::sleep(TABLE_POLL_INTERVAL).await;
            }
        };
        bounded(within, "CreateTable", ensure).await
    }

    /// The table as `DescribeTable` reports it; `None` when it does not exist.
    async fn describe(&self) -> Result<Option<TableDescription>, Error> {
        let result = self
            .client
            .describe_table()
            .table_name(&*self.table)
            .send()
            .await;
        match result {
            Ok(out) => Ok(Some(
                out.table
                    .unwrap_or_else(|| TableDescription::builder().build()),
            )),
            Err(e) if error::service_kind(&e) == Some(Kind::NotFound) => Ok(None),
            Err(e) => Err(error::classify("DescribeTable", e)),
        }
    }

    /// Returns `false` when another caller created it first.
    async fn create_table(&self) -> Result<bool, Error> {
        let result = self
            .client
            .create_table()
            .table_name(&*self.table)
            .set_attribute_definitions(Some(schema::attribute_definitions()?))
            .set_key_schema(Some(schema::key_schema()?))
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if error::service_kind(&e) == Some(Kind::InUse) => Ok(false),
            Err(e) => Err(error::classify("CreateTable", e)),
        }
    }

    /// Strongly consistent `GetItem` (C2).
    async fn get(&self, key: &Key) -> Result<Option<Item>, Error> {
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .set_key(Some(codec::item_key(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| error::classify("GetItem", e))?;
        Ok(out.item)
    }
}

impl DynamoStore {
    /// One `BatchGetItem` of `keys` with `ConsistentRead = true` (C2).
    async fn batch_get(&self, keys: Vec<Item>) -> Result<Fetched, Error> {
        let request = KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(true)
            .build()
            .map_err(|e| Error::unavailable_with("dynamodb batch request is invalid", e))?;
        let out = self
            .client
            .batch_get_item()
            .request_items(&*self.table, request)
            .send()
            .await
            .map_err(|e| error::classify("BatchGetItem", e))?;
        let items = out
            .responses
            .and_then(|mut tables| tables.remove(&*self.table))
            .unwrap_or_default();
        let unprocessed = out
            .unprocessed_keys
            .and_then(|mut tables| tables.remove(&*self.table))
            .map(|left| left.keys)
            .unwrap_or_default();
        Ok(Fetched { items, unprocessed })
    }

    /// One `Query` page of `user`'s partition from `start` (`ExclusiveStartKey`),
    /// `ConsistentRead = true` (C2, C10). A page ends at 1 MB of items: hundreds of
    /// slots even at the largest records, so a listing is one page in practice.
    async fn query_user(&self, user: &UserKey, start: Option<Item>) -> Result<Page, Error> {
        let out = self
            .client
            .query()
            .table_name(&*self.table)
            .key_condition_expression(codec::USER_CONDITION)
            .set_expression_attribute_names(Some(codec::user_names()))
            .expression_attribute_values(codec::USER_VALUE, codec::partition_key(user))
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| error::classify("Query", e))?;
        Ok(Page {
            items: out.items.unwrap_or_default(),
            next: out.last_evaluated_key.filter(|key| !key.is_empty()),
        })
    }
}

/// One page of a user's partition.
struct Page {
    items: Vec<Item>,
    /// Where the next page starts (`LastEvaluatedKey`); `None` after the last.
    next: Option<Item>,
}

/// A described table's status; a description without one is a table still being created.
fn status(table: &TableDescription) -> TableStatus {
    table
        .table_status()
        .cloned()
        .unwrap_or(TableStatus::Creating)
}

/// Runs `work`, failing with `Unavailable` when it takes longer than `within`.
async fn bounded<T>(
    within: Duration,
    operation: &'static str,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout(within, work)
        .await
        .unwrap_or_else(|_| {
            Err(Error::unavailable(format!(
                "dynamodb {operation} did not finish within {within:?}"
            )))
        })
}

#[async_trait]
impl Store for DynamoStore {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        codec::owner_state(self.get(key).await?.as_ref())
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        // Both refusals happen before any request (C4, C8).
        let owner_json = encode_owner(owner)?;
        let form = ClaimForm::from(Fence::for_snapshot(snap)?);
        let next_generation = form.next_generation;
        let condition = form.condition;
        let request = self
            .client
            .update_item()
            .table_name(&*self.table)
            .set_key(Some(codec::item_key(key)))
            .update_expression(CLAIM_UPDATE)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(codec::claim_names()))
            .set_expression_attribute_values(Some(form.values(owner_json, claim_id, snap)))
            .return_values(ReturnValue::UpdatedNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let out = match request.send().await {
            Ok(out) => out,
            Err(e) => {
                return match error::update_failure(e) {
                    UpdateFailure::ConditionFailed(item) => Ok(codec::lost_race(item.as_ref())),
                    UpdateFailure::Error(e) => Err(e),
                };
            }
        };
        // The gen the server reports writing; a server that returns no
        // attributes wrote exactly `next_generation`, since the condition pinned the old gen.
        let generation = match out.attributes() {
            Some(written) if written.contains_key(codec::GEN) => codec::generation(written)?,
            _ => next_generation,
        };
        Ok(CasOutcome::Written { generation })
    }

    /// Absent records only: an update expression cannot build the next `won` list of a
    /// tombstone (C9), so a tombstone fails the condition and goes through `claim_cas`.
    fn vacant_claims(&self) -> VacantClaims {
        VacantClaims::AbsentOnly
    }

    /// The first-login `claim_cas` from an absent snapshot (one `UpdateItem`, C11): written,
    /// or the item that failed the condition (`ALL_OLD`). A server that does not return it
    /// (dynalite) leaves the Arbiter to read: one more round trip there.
    async fn claim_vacant(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
    ) -> Result<VacantClaim, Error> {
        Ok(
            match self
                .claim_cas(key, owner, claim_id, &OwnerState::absent())
                .await?
            {
                CasOutcome::Written { generation } => VacantClaim::Written { generation },
                CasOutcome::LostRace {
                    current: Some(state),
                } => VacantClaim::Occupied(state),
                CasOutcome::LostRace { current: None } => VacantClaim::Unread,
            },
        )
    }

    /// One `BatchGetItem` (plus one per retry of unprocessed keys, see `batch.rs`).
    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        if keys.len() > MAX_BATCH_KEYS {
            return Err(Error::invalid(format!(
                "at most {MAX_BATCH_KEYS} keys per batch read, got {}",
                keys.len()
            )));
        }
        let wanted: Vec<(String, String)> = keys.iter().map(codec::primary_key).collect();
        // BatchGetItem refuses a request naming a key twice: ask each once.
        let mut distinct: Vec<&(String, String)> = wanted.iter().collect();
        distinct.sort_unstable();
        distinct.dedup();
        let request = distinct
            .into_iter()
            .map(|(pk, sk)| codec::key_item(pk, sk))
            .collect();
        let items = batch::fetch_all(request, self.max_attempts, DEFAULT_RETRY_BACKOFF, |k| {
            self.batch_get(k)
        })
        .await?;
        let found: HashMap<(&str, &str), &Item> = items
            .iter()
            .filter_map(|item| Some((codec::stored_key(item)?, item)))
            .collect();
        Ok(wanted
            .iter()
            .map(|(pk, sk)| codec::owner_state(found.get(&(pk.as_str(), sk.as_str())).copied()))
            .collect())
    }

    /// One `Query` of the user's partition (C10), more only past a 1 MB page.
    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let mut sessions = Vec::new();
        let mut start = None;
        loop {
            let page = self.query_user(user, start).await?;
            for item in &page.items {
                sessions.extend(codec::listed(item)?);
            }
            match page.next {
                Some(next) => start = Some(next),
                None => return Ok(sessions),
            }
        }
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        codec::current_view(self.get(key).await?.as_ref())
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        if generation <= 0 {
            return Ok(false);
        }
        let result = self
            .client
            .update_item()
            .table_name(&*self.table)
            .set_key(Some(codec::item_key(key)))
            .update_expression(RELEASE_UPDATE)
            .condition_expression(RELEASE_CONDITION)
            .set_expression_attribute_names(Some(codec::release_names()))
            .expression_attribute_values(":empty", AttributeValue::S(String::new()))
            .expression_attribute_values(":gen", codec::number(generation))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) => match error::update_failure(e) {
                // Gen mismatch or no record: nothing written, not an error (C5).
                UpdateFailure::ConditionFailed(_) => Ok(false),
                UpdateFailure::Error(e) => Err(e),
            },
        }
    }

    /// A strongly consistent `GetItem` of the sentinel key, its item ignored: the
    /// request a claim starts with (same endpoint, credentials, IAM action and
    /// timeouts), so ready means claims can read. `DescribeTable` is a control-plane
    /// call: it can answer while reads fail (or the reverse), and it needs no read
    /// permission, so it would not say whether a claim can start.
    async fn check_ready(&self) -> Result<(), Error> {
        self.get(&ready_key()).await.map(drop)
    }
}
