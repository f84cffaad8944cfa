//! The lease directory of `unique-lease` on DynamoDB: [`DynamoDirectory`].
//!
//! DynamoDB has no clock a request can read, so expiry follows the DynamoDB lock
//! client's protocol (D10): every grant and every renewal writes a fresh random record
//! version (`rvn`), and a directory instance judges a lease expired only once it has
//! watched that same version stay unchanged for the lease's whole ttl on its own
//! monotonic clock. Holders and takers never compare wall clocks.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ReturnValue, ScalarAttributeType,
    TableDescription, TableStatus,
};
use unique_lease::{
    Clock, LeaseBackend, LeaseError, StoredLease, StoredNode, async_trait, new_lease_token,
};

use crate::builder::DynamoStoreBuilder;
use crate::client::DynamoStore;
use crate::codec::{Item, PK};
use crate::error::{self, Kind, ServiceKind, UpdateFailure};

/// How many rooms an instance remembers an observation of, unless
/// [`DynamoDirectoryBuilder::max_observations`] says otherwise.
pub const DEFAULT_MAX_OBSERVATIONS: usize = 100_000;

/// How many times one `ensure_owner` reads the lease and tries its conditional write
/// before giving up with `Unavailable`. Every failed condition means another write
/// landed in between; two rounds settle a race on a free room, and each round of a
/// longer one lets one writer through.
const ENSURE_ROUNDS: usize = 16;

/// How long a node item outlives its registration before DynamoDB's TTL (when enabled on
/// [`GC_AT`]) may delete it. Generous, because the expiry it is added to was computed on
/// the writer's clock.
const NODE_GC_GRACE: Duration = Duration::from_hours(1);

/// How often [`DynamoDirectory::create_table_if_missing`] looks at a table being created.
const TABLE_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The epoch counter's partition key.
const EPOCH_KEY: &str = "epoch";
/// A lease item's partition key prefix (`lease#<room_id>`).
const LEASE_PREFIX: &str = "lease#";
/// A node item's partition key prefix (`node#<node_id>`).
const NODE_PREFIX: &str = "node#";

// Attribute names. Every expression names them through `#name` placeholders, so
// DynamoDB's reserved words (`TOKEN`, `TTL`, …) never matter.
const NODE: &str = "node";
const TOKEN: &str = "token";
/// On a lease item the holding's epoch; on the counter item the last epoch issued.
const EPOCH: &str = "epoch";
const TTL_MS: &str = "ttl_ms";
const RVN: &str = "rvn";
const ADDR: &str = "addr";
const UPDATED_MS: &str = "updated_ms";
const EXPIRES_MS: &str = "expires_ms";
/// Unix seconds after which a node item is garbage: the attribute to enable DynamoDB's
/// TTL on.
pub const GC_AT: &str = "gc_at";

/// A [`Directory`](unique_lease::Directory) and [`NodeRegistry`](unique_lease::NodeRegistry)
/// on one DynamoDB table, following the DynamoDB lock client's protocol (D10).
///
/// # Table
///
/// Partition key `pk` (S) alone, a table of its own (the session store's table has a
/// sort key; [`check_reachable`](Self::check_reachable) refuses it):
///
/// - `pk = "lease#<room_id>"`: `node` (S), `token` (S), `epoch` (N), `ttl_ms` (N) and
///   `rvn` (S), a fresh random record version written by **every** grant and renewal.
///   A release removes `node`, `token` and `ttl_ms` and writes a new `rvn`, leaving a
///   small tombstone that reads as no lease. Lease items are never deleted: every write
///   is conditioned on the version (or, for the very first grant of a room, on the item
///   not existing), and an item that disappeared could let a grant that read "no item"
///   and drew its epoch early land after a later holding, issuing a smaller epoch (D4).
/// - `pk = "epoch"`: `epoch` (N), incremented with `UpdateItem ADD` (which returns the
///   new value) for every new holding of any room, so epochs never repeat or reset (D4).
/// - `pk = "node#<node_id>"`: `addr` (S), `updated_ms` (N), `expires_ms` (N) and
///   [`GC_AT`] (N, Unix seconds an hour after `expires_ms`: enable DynamoDB's TTL on
///   it to have dead nodes deleted).
///
/// # Expiry without a clock
///
/// Each instance keeps an observation memory: for each room, the last few versions it saw
/// and when it first saw each on its monotonic clock ([`Instant`], or the test clock given to
/// [`DynamoDirectoryBuilder::clock`]). A read counts as seeing the version when its answer
/// arrived; a write, just before it was sent. A lease is valid for an instance until the
/// instance has seen its version unchanged for `ttl_ms`; a version seen for the first
/// time is valid for a whole `ttl_ms` from then, however old it really is. A holder acts
/// on a deadline counted from before its write was sent, every other instance counts from
/// after it saw the write, so no taker's expiry comes before the holder's deadline (with
/// clocks ticking at the same rate, however far apart they are set). A newcomer may wait
/// up to one ttl longer than needed; that is the price of no clock.
///
/// The memory is bounded ([`DynamoDirectoryBuilder::max_observations`]). Forgetting a
/// room is safe: its next sighting counts as the first, so the instance only waits longer.
///
/// Consequently validity is per instance: after a holder's ttl passed, an instance that
/// saw the version only later still reports the lease valid for a while (`lookup`,
/// `verify_owner`, `ensure_owner` of another node answering D3).
///
/// # Operations
///
/// - `lookup`, `verify_owner`: one strongly consistent `GetItem`.
/// - `ensure_owner`: a strongly consistent `GetItem`, then: a free room (no item, or a
///   tombstone) or a lease expired for this instance is taken with a new token and an
///   epoch from the counter (`UpdateItem ADD`) by one `UpdateItem` conditioned on
///   `attribute_not_exists(pk)` or on the version read; the caller's own valid lease is
///   renewed by one `UpdateItem` conditioned on the version read that writes a new `rvn`
///   and `ttl_ms = max(ttl, what the previous promise had left)`, so an observer that
///   only ever sees the renewed version still honours the whole earlier promise (D2);
///   another node's valid lease is returned and nothing is written (D3). A failed
///   condition means another write landed: the directory reads again and decides again
///   (up to 16 rounds, then `Unavailable`). Racers on a free room: one conditional write
///   wins, the others read the winner's lease (D8).
/// - `release_owner`: one `UpdateItem` to the tombstone conditioned on `node` and
///   `token`; a failed condition is `false`.
/// - Node registry: one `UpdateItem`, `GetItem` or `DeleteItem`. A registration is judged
///   on the writer's and the reader's wall clocks (the test clock when set): it is an
///   address hint with a ttl, not mutual exclusion, so clock skew between nodes only
///   shifts when a dead node's address stops being handed out.
///
/// Clones share the observation memory (they are one instance); separately built
/// directories keep their own.
#[derive(Clone)]
pub struct DynamoDirectory {
    client: Client,
    table: Arc<str>,
    ticker: Ticker,
    /// The test clock for node registrations; `None`: the system's wall clock.
    wall: Option<Arc<dyn Clock>>,
    seen: Arc<Mutex<Observations>>,
}

impl fmt::Debug for DynamoDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDirectory")
            .field("table", &self.table)
            .field("test_clock", &self.wall.is_some())
            .field("observations", &self.observations().len())
            .finish_non_exhaustive()
    }
}

/// Configures a [`DynamoDirectory`]: its table, how it reaches DynamoDB, and its clock.
#[must_use]
pub struct DynamoDirectoryBuilder {
    table: String,
    connection: Connection,
    clock: Option<Arc<dyn Clock>>,
    max_observations: usize,
}

impl fmt::Debug for DynamoDirectoryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDirectoryBuilder")
            .field("table", &self.table)
            .field("connection", &self.connection)
            .field("test_clock", &self.clock.is_some())
            .field("max_observations", &self.max_observations)
            .finish()
    }
}

/// Where the SDK client comes from.
enum Connection {
    /// Built by a store builder: its endpoint, region, credentials, timeouts and retries.
    Builder(Box<DynamoStoreBuilder>),
    /// An existing store's client, shared (timeouts, retries and request counts included).
    Store(Client),
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Builder(builder) => builder.fmt(f),
            Self::Store(_) => f.write_str("a store's client"),
        }
    }
}

impl DynamoDirectory {
    /// Starts configuring a directory on table `table` (a table of its own, see the type's
    /// docs). Without [`connection`](DynamoDirectoryBuilder::connection) or
    /// [`store`](DynamoDirectoryBuilder::store) it connects as
    /// `DynamoStoreBuilder::default()` does (the standard AWS chain).
    pub fn builder(table: impl Into<String>) -> DynamoDirectoryBuilder {
        DynamoDirectoryBuilder {
            table: table.into(),
            connection: Connection::Builder(Box::default()),
            clock: None,
            max_observations: DEFAULT_MAX_OBSERVATIONS,
        }
    }

    /// The SDK client the directory sends through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// A bounded startup check (one `DescribeTable`): the table exists, is `ACTIVE`, and has
    /// partition key `pk` (S) and no sort key.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the table is missing or not active, the request fails, or the
    /// server does not answer within `within`; `Backend` for a table of another key
    /// schema (the session store's table named as such), naming what was found.
    pub async fn check_reachable(&self, within: Duration) -> Result<(), LeaseError> {
        let check = async {
            let Some(table) = self.describe().await? else {
                return Err(unavailable(format!(
                    "dynamodb table {} does not exist",
                    self.table
                )));
            };
            match status(&table) {
                TableStatus::Active => check_schema(&self.table, &table),
                status => Err(unavailable(format!(
                    "dynamodb table {} is {}, not ACTIVE",
                    self.table,
                    status.as_str()
                ))),
            }
        };
        bounded(within, "DescribeTable", check).await
    }

    /// Creates the table when it is missing (partition key `pk` of type S, on-demand
    /// billing) and waits until it is `ACTIVE`, all within `within`. Returns whether this
    /// call created it. Safe to race. An existing table is left as it is:
    /// [`check_reachable`](Self::check_reachable) refuses one of another schema. DynamoDB's
    /// TTL is not enabled here; enable it on [`GC_AT`] to have expired node items deleted.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the table is not active within `within` or a request fails.
    pub async fn create_table_if_missing(&self, within: Duration) -> Result<bool, LeaseError> {
        let ensure = async {
            let mut created = false;
            loop {
                let table_status = self.describe().await?.as_ref().map(status);
                match table_status {
                    Some(TableStatus::Active) => return Ok(created),
                    Some(TableStatus::Creating | TableStatus::Updating) => {}
                    Some(status) => {
                        return Err(unavailable(format!(
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

    async fn describe(&self) -> Result<Option<TableDescription>, LeaseError> {
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
            Err(e) => Err(lease_error(error::classify("DescribeTable", e))),
        }
    }

    /// Returns `false` when another caller created it first.
    async fn create_table(&self) -> Result<bool, LeaseError> {
        let definition = AttributeDefinition::builder()
            .attribute_name(PK)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(table_definition)?;
        let key = KeySchemaElement::builder()
            .attribute_name(PK)
            .key_type(KeyType::Hash)
            .build()
            .map_err(table_definition)?;
        let result = self
            .client
            .create_table()
            .table_name(&*self.table)
            .attribute_definitions(definition)
            .key_schema(key)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if error::service_kind(&e) == Some(Kind::InUse) => Ok(false),
            Err(e) => Err(lease_error(error::classify("CreateTable", e))),
        }
    }

    fn observations(&self) -> MutexGuard<'_, Observations> {
        // Nothing panics while holding the lock; a poisoned one must not turn every
        // later call into a panic.
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Now on the wall clock that judges node registrations, in Unix milliseconds.
    fn wall_ms(&self) -> Result<u64, LeaseError> {
        let now = self.wall.as_ref().map_or_else(SystemTime::now, |c| c.now());
        now.duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|since| u64::try_from(since.as_millis()).ok())
            .ok_or_else(|| LeaseError::backend("the clock is before the unix epoch"))
    }

    /// A strongly consistent `GetItem` of `pk`.
    async fn get(&self, pk: &str) -> Result<Option<Item>, LeaseError> {
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .key(PK, AttributeValue::S(pk.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| lease_error(error::classify("GetItem", e)))?;
        Ok(out.item)
    }

    fn update(&self, pk: &str) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&*self.table)
            .key(PK, AttributeValue::S(pk.to_owned()))
    }

    /// Sends a conditional update; `Ok(false)` when its condition failed.
    async fn conditional(&self, request: UpdateItemFluentBuilder) -> Result<bool, LeaseError> {
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) => match error::update_failure(e) {
                UpdateFailure::ConditionFailed(_) => Ok(false),
                UpdateFailure::Error(e) => Err(lease_error(e)),
            },
        }
    }

    /// The next epoch of the directory's counter (D4).
    async fn next_epoch(&self) -> Result<u64, LeaseError> {
        let out = self
            .update(EPOCH_KEY)
            .update_expression("ADD #epoch :one")
            .expression_attribute_names("#epoch", EPOCH)
            .expression_attribute_values(":one", AttributeValue::N("1".to_owned()))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(|e| lease_error(error::classify("UpdateItem", e)))?;
        let counter = out.attributes().cloned().unwrap_or_default();
        number(&counter, EPOCH, "epoch counter")?
            .ok_or_else(|| corrupt("epoch counter", "the counter update returned no epoch"))
    }

    /// A new holding of `room_id` for `node_id` (D1, D4), written only if the item is
    /// still as read (`expect`); `None` when it was not.
    async fn grant(
        &self,
        room_id: &str,
        node_id: &str,
        ttl_ms: u64,
        expect: Expect<'_>,
    ) -> Result<Option<StoredLease>, LeaseError> {
        // Drawn after the read `expect` comes from: every holding of the room written
        // before that read drew its epoch earlier, so this one is greater (D4).
        let epoch = self.next_epoch().await?;
        let lease_token = new_lease_token();
        let rvn = new_lease_token();
        let request = self
            .update(&lease_key(room_id))
            .update_expression(
                "SET #node = :node, #token = :token, #epoch = :epoch, #ttl = :ttl, #rvn = :rvn",
            )
            .expression_attribute_names("#node", NODE)
            .expression_attribute_names("#token", TOKEN)
            .expression_attribute_names("#epoch", EPOCH)
            .expression_attribute_names("#ttl", TTL_MS)
            .expression_attribute_names("#rvn", RVN)
            .expression_attribute_values(":node", AttributeValue::S(node_id.to_owned()))
            .expression_attribute_values(":token", AttributeValue::S(lease_token.clone()))
            .expression_attribute_values(":epoch", AttributeValue::N(epoch.to_string()))
            .expression_attribute_values(":ttl", AttributeValue::N(ttl_ms.to_string()))
            .expression_attribute_values(":rvn", AttributeValue::S(rvn.clone()));
        let request = expect.condition(request);
        let sent = self.ticker.now();
        if !self.conditional(request).await? {
            return Ok(None);
        }
        self.observations().saw(room_id, &rvn, sent);
        Ok(Some(StoredLease {
            node_id: node_id.to_owned(),
            lease_token,
            epoch,
            ttl_left_ms: self.left_ms(ttl_ms, sent),
        }))
    }

    /// Renews the caller's valid holding `held`, first seen at `first_seen` (D2): a new
    /// version lasting `max(ttl, what the current one has left)`. `None` when the item
    /// changed meanwhile, or the holding ran out before the write could be sent.
    async fn renew(
        &self,
        room_id: &str,
        held: Holding,
        first_seen: Duration,
        ttl_ms: u64,
    ) -> Result<Option<StoredLease>, LeaseError> {
        let rvn = new_lease_token();
        let sent = self.ticker.now();
        let left =
            Duration::from_millis(held.ttl_ms).saturating_sub(sent.saturating_sub(first_seen));
        if left.is_zero() {
            // Expired on the way: decide again, which takes it over (D1).
            return Ok(None);
        }
        // Rounded up: a renewal must never shorten the promise (D2).
        let lasts_ms = ttl_ms.max(ceil_ms(left));
        let request = self
            .update(&lease_key(room_id))
            .update_expression("SET #rvn = :rvn, #ttl = :ttl")
            .expression_attribute_names("#rvn", RVN)
            .expression_attribute_names("#ttl", TTL_MS)
            .expression_attribute_values(":rvn", AttributeValue::S(rvn.clone()))
            .expression_attribute_values(":ttl", AttributeValue::N(lasts_ms.to_string()));
        let request = Expect::Version(&held.rvn).condition(request);
        if !self.conditional(request).await? {
            return Ok(None);
        }
        self.observations().saw(room_id, &rvn, sent);
        Ok(Some(StoredLease {
            node_id: held.node_id,
            lease_token: held.lease_token,
            epoch: held.epoch,
            ttl_left_ms: self.left_ms(lasts_ms, sent),
        }))
    }

    /// Whole milliseconds left of `ttl_ms` counted from `since`, now.
    fn left_ms(&self, ttl_ms: u64, since: Duration) -> u64 {
        let seen_for = self.ticker.now().saturating_sub(since);
        floor_ms(Duration::from_millis(ttl_ms).saturating_sub(seen_for))
    }
}

impl DynamoDirectoryBuilder {
    /// Connects with `builder`: its endpoint, region, credentials, timeouts and retries
    /// (the same defaults as the session store's). Its table name is replaced by the
    /// directory's.
    pub fn connection(mut self, builder: DynamoStoreBuilder) -> Self {
        self.connection = Connection::Builder(Box::new(builder));
        self
    }

    /// Sends through `store`'s client (its endpoint, credentials, timeouts and retries),
    /// to the directory's own table. The store's
    /// [`request_counts`](DynamoStore::request_counts) then include the directory's
    /// requests.
    pub fn store(mut self, store: &DynamoStore) -> Self {
        self.connection = Connection::Store(store.client().clone());
        self
    }

    /// Judges leases and registrations on `clock` instead of [`Instant`] and the system's
    /// wall clock: for tests and simulations that move time by hand. Durations are
    /// differences of its readings. Every directory on the table should then use the same
    /// clock; in production leave it unset.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// How many rooms the instance remembers an observation of (default
    /// [`DEFAULT_MAX_OBSERVATIONS`]; at least one). When full it forgets the older half;
    /// see [`DynamoDirectory`] for why forgetting is safe.
    pub fn max_observations(mut self, rooms: usize) -> Self {
        self.max_observations = rooms.max(1);
        self
    }

    /// Builds the directory. Sends no request (see
    /// [`DynamoDirectory::check_reachable`]).
    ///
    /// # Errors
    ///
    /// `InvalidParams` for an empty table name, or for the connection settings the store
    /// builder refuses ([`DynamoStoreBuilder::build`]).
    pub async fn build(self) -> Result<DynamoDirectory, LeaseError> {
        if self.table.is_empty() {
            return Err(LeaseError::invalid("dynamodb table name must not be empty"));
        }
        let client = match self.connection {
            Connection::Store(client) => client,
            Connection::Builder(builder) => builder
                .table(self.table.clone())
                .build()
                .await
                .map_err(lease_error)?
                .client()
                .clone(),
        };
        let ticker = match &self.clock {
            Some(clock) => Ticker::Test(clock.clone()),
            None => Ticker::Monotonic(Instant::now()),
        };
        Ok(DynamoDirectory {
            client,
            table: self.table.into(),
            ticker,
            wall: self.clock,
            seen: Arc::new(Mutex::new(Observations::new(self.max_observations))),
        })
    }
}

#[async_trait]
impl LeaseBackend for DynamoDirectory {
    async fn read_lease(&self, room_id: &str) -> Result<Option<StoredLease>, LeaseError> {
        let item = self.get(&lease_key(room_id)).await?;
        let at = self.ticker.now();
        match decode(item.as_ref())? {
            Record::Absent | Record::Free { .. } => Ok(None),
            Record::Held(held) => {
                let first_seen = self.observations().saw(room_id, &held.rvn, at);
                let left = held.left(at.saturating_sub(first_seen));
                Ok(Some(held.report(left)))
            }
        }
    }

    async fn ensure_lease(
        &self,
        room_id: &str,
        node_id: &str,
        ttl_ms: u64,
    ) -> Result<StoredLease, LeaseError> {
        for _ in 0..ENSURE_ROUNDS {
            let item = self.get(&lease_key(room_id)).await?;
            let at = self.ticker.now();
            let written = match decode(item.as_ref())? {
                Record::Absent => self.grant(room_id, node_id, ttl_ms, Expect::Absent).await?,
                Record::Free { rvn } => {
                    self.grant(room_id, node_id, ttl_ms, Expect::Version(&rvn))
                        .await?
                }
                Record::Held(held) => {
                    let first_seen = self.observations().saw(room_id, &held.rvn, at);
                    let left = held.left(at.saturating_sub(first_seen));
                    if left.is_zero() {
                        // Expired for this instance: take it over (D1), whoever held it.
                        self.grant(room_id, node_id, ttl_ms, Expect::Version(&held.rvn))
                            .await?
                    } else if held.node_id == node_id {
                        self.renew(room_id, held, first_seen, ttl_ms).await?
                    } else {
                        // Another node's valid lease: report it, write nothing (D3).
                        return Ok(held.report(left));
                    }
                }
            };
            if let Some(lease) = written {
                return Ok(lease);
            }
        }
        Err(unavailable(format!(
            "dynamodb lease of the room changed during {ENSURE_ROUNDS} attempts in a row"
        )))
    }

    async fn release_lease(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        // The tombstone keeps the item (see the type's docs) under a new version, so a
        // grant conditioned on the released holding's version cannot land afterwards.
        let request = self
            .update(&lease_key(room_id))
            .update_expression("SET #rvn = :rvn REMOVE #node, #token, #ttl")
            .condition_expression("#node = :node AND #token = :token")
            .expression_attribute_names("#rvn", RVN)
            .expression_attribute_names("#node", NODE)
            .expression_attribute_names("#token", TOKEN)
            .expression_attribute_names("#ttl", TTL_MS)
            .expression_attribute_values(":rvn", AttributeValue::S(new_lease_token()))
            .expression_attribute_values(":node", AttributeValue::S(node_id.to_owned()))
            .expression_attribute_values(":token", AttributeValue::S(lease_token.to_owned()));
        self.conditional(request).await
    }

    async fn write_node(
        &self,
        node_id: &str,
        grpc_addr: &str,
        ttl_ms: u64,
    ) -> Result<StoredNode, LeaseError> {
        let now_ms = self.wall_ms()?;
        let expires_ms = now_ms.saturating_add(ttl_ms);
        let gc_at = (expires_ms / 1_000).saturating_add(NODE_GC_GRACE.as_secs());
        self.update(&node_key(node_id))
            .update_expression(
                "SET #addr = :addr, #updated = :updated, #expires = :expires, #gc = :gc",
            )
            .expression_attribute_names("#addr", ADDR)
            .expression_attribute_names("#updated", UPDATED_MS)
            .expression_attribute_names("#expires", EXPIRES_MS)
            .expression_attribute_names("#gc", GC_AT)
            .expression_attribute_values(":addr", AttributeValue::S(grpc_addr.to_owned()))
            .expression_attribute_values(":updated", AttributeValue::N(now_ms.to_string()))
            .expression_attribute_values(":expires", AttributeValue::N(expires_ms.to_string()))
            .expression_attribute_values(":gc", AttributeValue::N(gc_at.to_string()))
            .send()
            .await
            .map_err(|e| lease_error(error::classify("UpdateItem", e)))?;
        Ok(StoredNode {
            grpc_addr: grpc_addr.to_owned(),
            age_ms: 0,
            ttl_left_ms: ttl_ms,
        })
    }

    async fn read_node(&self, node_id: &str) -> Result<Option<StoredNode>, LeaseError> {
        let Some(item) = self.get(&node_key(node_id)).await? else {
            return Ok(None);
        };
        let what = "node registration";
        let grpc_addr = string(&item, ADDR, what)?;
        let updated_ms = number(&item, UPDATED_MS, what)?;
        let expires_ms = number(&item, EXPIRES_MS, what)?;
        let (Some(grpc_addr), Some(updated_ms), Some(expires_ms)) =
            (grpc_addr, updated_ms, expires_ms)
        else {
            return Err(corrupt(what, "addr, updated_ms or expires_ms is missing"));
        };
        let now_ms = self.wall_ms()?;
        if now_ms >= expires_ms {
            // Expired: DynamoDB's TTL (when enabled) deletes it; reading writes nothing.
            return Ok(None);
        }
        Ok(Some(StoredNode {
            grpc_addr: grpc_addr.to_owned(),
            age_ms: now_ms.saturating_sub(updated_ms),
            ttl_left_ms: expires_ms - now_ms,
        }))
    }

    async fn delete_node(&self, node_id: &str) -> Result<(), LeaseError> {
        self.client
            .delete_item()
            .table_name(&*self.table)
            .key(PK, AttributeValue::S(node_key(node_id)))
            .send()
            .await
            .map_err(|e| lease_error(error::classify("DeleteItem", e)))?;
        Ok(())
    }
}

/// The instance's monotonic clock: readings are durations since an origin, and only
/// their differences mean anything.
#[derive(Clone)]
enum Ticker {
    /// Production: [`Instant`] since the directory was built.
    Monotonic(Instant),
    /// A test clock's readings since the Unix epoch.
    Test(Arc<dyn Clock>),
}

impl Ticker {
    fn now(&self) -> Duration {
        match self {
            Self::Monotonic(origin) => origin.elapsed(),
            Self::Test(clock) => clock.now().duration_since(UNIX_EPOCH).unwrap_or_default(),
        }
    }
}

/// How many versions of one room an instance remembers. Concurrent calls on one
/// instance can record what they saw out of order (a read of the old version answered
/// before another call's grant, but recorded after it); remembering the last few keeps
/// the old version's first sighting, so a version this instance already saw expire
/// never looks fresh again.
const VERSIONS_PER_ROOM: usize = 4;

/// The versions of a room's lease this instance saw most recently, each with when it
/// first saw it, oldest first.
#[derive(Debug)]
struct Observation {
    versions: Vec<(String, Duration)>,
}

impl Observation {
    /// The latest first sighting of any of its versions (what eviction goes by).
    fn latest(&self) -> Duration {
        self.versions
            .iter()
            .map(|(_, first_seen)| *first_seen)
            .max()
            .unwrap_or_default()
    }
}

/// The observation memory, bounded.
///
/// Forgetting a room is always safe: the next sighting counts as the first, so this
/// instance judges the lease valid for a whole ttl from then — longer than needed. A
/// taker only waits longer; a holder renews by writing a new version anyway, which
/// every instance then times from when it sees it.
#[derive(Debug)]
struct Observations {
    rooms: HashMap<String, Observation>,
    capacity: usize,
}

impl Observations {
    fn new(capacity: usize) -> Self {
        Self {
            rooms: HashMap::new(),
            capacity,
        }
    }

    fn len(&self) -> usize {
        self.rooms.len()
    }

    /// Records that version `rvn` of `room_id` was seen at `at`; returns when this
    /// instance first saw it (the earlier of `at` and an earlier sighting of the same
    /// version).
    fn saw(&mut self, room_id: &str, rvn: &str, at: Duration) -> Duration {
        if let Some(room) = self.rooms.get_mut(room_id) {
            if let Some((_, first_seen)) = room.versions.iter_mut().find(|(v, _)| v == rvn) {
                *first_seen = (*first_seen).min(at);
                return *first_seen;
            }
            if room.versions.len() >= VERSIONS_PER_ROOM {
                room.versions.remove(0);
            }
            room.versions.push((rvn.to_owned(), at));
            return at;
        }
        if self.rooms.len() >= self.capacity {
            self.forget_older_half();
        }
        self.rooms.insert(
            room_id.to_owned(),
            Observation {
                versions: vec![(rvn.to_owned(), at)],
            },
        );
        at
    }

    /// Keeps the `capacity / 2` rooms where something new was seen last (one sweep per
    /// `capacity / 2` new rooms, so the cost per room stays constant).
    fn forget_older_half(&mut self) {
        let keep = self.capacity / 2;
        if keep == 0 {
            self.rooms.clear();
            return;
        }
        let mut sightings: Vec<Duration> = self.rooms.values().map(Observation::latest).collect();
        let cut_at = sightings.len() - keep;
        let (_, &mut cut, _) = sightings.select_nth_unstable(cut_at);
        // Rooms at the cut itself fill what is left of `keep` after the newer ones.
        let newer = self.rooms.values().filter(|o| o.latest() > cut).count();
        let mut ties = keep - newer;
        self.rooms.retain(|_, o| {
            let latest = o.latest();
            if latest > cut {
                return true;
            }
            if latest == cut && ties > 0 {
                ties -= 1;
                return true;
            }
            false
        });
    }
}

/// What a conditional lease write expects to find.
#[derive(Debug, Clone, Copy)]
enum Expect<'a> {
    /// No item: the room was never held.
    Absent,
    /// The item at this version.
    Version(&'a str),
}

impl Expect<'_> {
    fn condition(self, request: UpdateItemFluentBuilder) -> UpdateItemFluentBuilder {
        match self {
            Self::Absent => request
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", PK),
            Self::Version(rvn) => request
                .condition_expression("#rvn = :seen")
                .expression_attribute_names("#rvn", RVN)
                .expression_attribute_values(":seen", AttributeValue::S(rvn.to_owned())),
        }
    }
}

/// A lease item as read.
#[derive(Debug, PartialEq, Eq)]
enum Record {
    /// No item.
    Absent,
    /// A released room's tombstone at version `rvn`.
    Free { rvn: String },
    /// A holding, valid or not.
    Held(Holding),
}

#[derive(Debug, PartialEq, Eq)]
struct Holding {
    node_id: String,
    lease_token: String,
    epoch: u64,
    ttl_ms: u64,
    rvn: String,
}

impl Holding {
    /// What is left after this instance has seen the version for `seen_for`.
    fn left(&self, seen_for: Duration) -> Duration {
        Duration::from_millis(self.ttl_ms).saturating_sub(seen_for)
    }

    fn report(self, left: Duration) -> StoredLease {
        StoredLease {
            node_id: self.node_id,
            lease_token: self.lease_token,
            epoch: self.epoch,
            ttl_left_ms: floor_ms(left),
        }
    }
}

/// Decodes a lease item. A record this crate did not write is `Corrupt`: no lease is
/// granted over it.
fn decode(item: Option<&Item>) -> Result<Record, LeaseError> {
    let Some(item) = item else {
        return Ok(Record::Absent);
    };
    let what = "lease";
    let rvn = string(item, RVN, what)?
        .ok_or_else(|| corrupt(what, "the record version rvn is missing"))?
        .to_owned();
    let node = string(item, NODE, what)?;
    let token = string(item, TOKEN, what)?;
    let ttl_ms = number(item, TTL_MS, what)?;
    match (node, token, ttl_ms) {
        (None, None, None) => Ok(Record::Free { rvn }),
        (Some(node), Some(token), Some(ttl_ms)) if !node.is_empty() && !token.is_empty() => {
            let epoch =
                number(item, EPOCH, what)?.ok_or_else(|| corrupt(what, "the epoch is missing"))?;
            Ok(Record::Held(Holding {
                node_id: node.to_owned(),
                lease_token: token.to_owned(),
                epoch,
                ttl_ms,
                rvn,
            }))
        }
        _ => Err(corrupt(
            what,
            "node, token and ttl_ms must be all present (and non-empty) or all absent",
        )),
    }
}

/// A string attribute; `None` when absent, `Corrupt` when of another type.
fn string<'a>(item: &'a Item, name: &str, what: &str) -> Result<Option<&'a str>, LeaseError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(s)) => Ok(Some(s)),
        Some(_) => Err(corrupt(what, &format!("{name} is not a string"))),
    }
}

/// A whole-number attribute; `None` when absent, `Corrupt` when of another type or not a
/// whole number that fits 64 bits.
fn number(item: &Item, name: &str, what: &str) -> Result<Option<u64>, LeaseError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(n)) => n
            .parse::<u64>()
            .map(Some)
            .map_err(|_| corrupt(what, &format!("{name} is not a whole number"))),
        Some(_) => Err(corrupt(what, &format!("{name} is not a number"))),
    }
}

fn corrupt(what: &str, why: &str) -> LeaseError {
    LeaseError::Corrupt(format!("dynamodb {what} record: {why}"))
}

fn unavailable(reason: String) -> LeaseError {
    LeaseError::Unavailable {
        reason,
        source: None,
    }
}

fn lease_key(room_id: &str) -> String {
    format!("{LEASE_PREFIX}{room_id}")
}

fn node_key(node_id: &str) -> String {
    format!("{NODE_PREFIX}{node_id}")
}

/// Whole milliseconds, rounded down (what is reported left).
fn floor_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whole milliseconds, rounded up (what a renewal must keep).
fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// The crate's store errors (C8, one mapping in `error.rs`) as lease errors: a throttle
/// is `Unavailable` (retry after a backoff), bad settings `InvalidParams`, everything
/// else what it was.
fn lease_error(e: unique_core::Error) -> LeaseError {
    match e {
        unique_core::Error::InvalidParams(reason) => LeaseError::InvalidParams(reason),
        unique_core::Error::Throttled => unavailable("dynamodb throttled the request".to_owned()),
        unique_core::Error::Unavailable { reason, source } => {
            LeaseError::Unavailable { reason, source }
        }
        // Session outcomes, which no lease request produces.
        other => LeaseError::backend_with("dynamodb request failed", other),
    }
}

/// A table definition the SDK builder refused (a bug here, never user input).
fn table_definition(e: aws_sdk_dynamodb::error::BuildError) -> LeaseError {
    LeaseError::backend_with("dynamodb table definition is invalid", e)
}

/// `DeleteItem` (unregistering a node) is classified as the other operations are: the
/// modelled errors by kind, anything else as a plain service error (`Unavailable`, as a
/// throttle is for a lease caller).
impl ServiceKind for DeleteItemError {
    fn kind(&self) -> Kind {
        match self {
            Self::ConditionalCheckFailedException(_) => Kind::ConditionFailed,
            Self::ProvisionedThroughputExceededException(_)
            | Self::RequestLimitExceeded(_)
            | Self::ThrottlingException(_) => Kind::Throttled,
            Self::ResourceNotFoundException(_) => Kind::NotFound,
            _ => Kind::Other,
        }
    }
}

/// A described table's status; a description without one is a table still being created.
fn status(table: &TableDescription) -> TableStatus {
    table
        .table_status()
        .cloned()
        .unwrap_or(TableStatus::Creating)
}

/// Accepts a table whose key is exactly `pk` (HASH, S).
fn check_schema(table: &str, description: &TableDescription) -> Result<(), LeaseError> {
    let found: Vec<String> = description
        .key_schema()
        .iter()
        .map(|element| {
            let name = element.attribute_name();
            let ty = description
                .attribute_definitions()
                .iter()
                .find(|d| d.attribute_name() == name)
                .map_or("undefined type", |d| d.attribute_type().as_str());
            format!("{name} ({}, {ty})", element.key_type().as_str())
        })
        .collect();
    if found == ["pk (HASH, S)"] {
        return Ok(());
    }
    let found_text = if found.is_empty() {
        "none".to_owned()
    } else {
        found.join(", ")
    };
    let hint = if found == ["pk (HASH, S)", "sk (RANGE, S)"] {
        " (the session store's layout: the lease directory needs a table of its own)"
    } else {
        ""
    };
    Err(LeaseError::backend(format!(
        "dynamodb table {table} has key schema {found_text}{hint}, and the lease directory \
         needs partition key pk (S) alone: create one with \
         DynamoDirectory::create_table_if_missing and point the directory at it"
    )))
}

/// Runs `work`, failing with `Unavailable` when it takes longer than `within`.
async fn bounded<T>(
    within: Duration,
    operation: &'static str,
    work: impl Future<Output = Result<T, LeaseError>>,
) -> Result<T, LeaseError> {
    tokio::time::timeout(within, work)
        .await
        .unwrap_or_else(|_| {
            Err(unavailable(format!(
                "dynamodb {operation} did not finish within {within:?}"
            )))
        })
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::error::{ErrorMetadata, SdkError};
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
        ResourceNotFoundException,
    };

    use super::*;

    fn item(attributes: &[(&str, AttributeValue)]) -> Item {
        attributes
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .chain([(PK.to_owned(), AttributeValue::S("lease#r".into()))])
            .collect()
    }

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.to_owned())
    }

    fn held() -> Vec<(&'static str, AttributeValue)> {
        vec![
            (NODE, s("a")),
            (TOKEN, s("t")),
            (EPOCH, n("7")),
            (TTL_MS, n("30000")),
            (RVN, s("v1")),
        ]
    }

    #[test]
    fn decodes_absent_tombstone_and_holding() {
        assert_eq!(decode(None).unwrap(), Record::Absent);
        let tombstone = item(&[(EPOCH, n("7")), (RVN, s("v2"))]);
        assert_eq!(
            decode(Some(&tombstone)).unwrap(),
            Record::Free { rvn: "v2".into() }
        );
        assert_eq!(
            decode(Some(&item(&held()))).unwrap(),
            Record::Held(Holding {
                node_id: "a".into(),
                lease_token: "t".into(),
                epoch: 7,
                ttl_ms: 30_000,
                rvn: "v1".into(),
            })
        );
    }

    #[test]
    fn records_this_crate_did_not_write_are_corrupt() {
        let without = |name: &str| {
            let mut attributes = held();
            attributes.retain(|(k, _)| *k != name);
            item(&attributes)
        };
        let replaced = |name: &str, value: AttributeValue| {
            let mut attributes = held();
            for (k, v) in &mut attributes {
                if *k == name {
                    *v = value.clone();
                }
            }
            item(&attributes)
        };
        let cases = [
            without(RVN),
            without(NODE),
            without(TOKEN),
            without(TTL_MS),
            without(EPOCH),
            replaced(NODE, s("")),
            replaced(TOKEN, n("1")),
            replaced(EPOCH, n("-1")),
            replaced(EPOCH, n("1.5")),
            replaced(TTL_MS, s("30000")),
            replaced(RVN, n("1")),
            item(&[]),
        ];
        for case in cases {
            let err = decode(Some(&case)).unwrap_err();
            assert!(err.is_corrupt(), "{case:?}: {err}");
            assert!(
                err.to_string()
                    .starts_with("corrupt record: dynamodb lease record: ")
            );
        }
    }

    #[test]
    fn a_version_is_timed_from_its_first_sighting() {
        let mut seen = Observations::new(10);
        let at = Duration::from_secs;
        assert_eq!(seen.saw("r", "v1", at(5)), at(5));
        assert_eq!(
            seen.saw("r", "v1", at(9)),
            at(5),
            "same version: first sighting"
        );
        assert_eq!(
            seen.saw("r", "v1", at(3)),
            at(3),
            "an earlier sighting counts"
        );
        assert_eq!(
            seen.saw("r", "v2", at(9)),
            at(9),
            "a new version starts again"
        );
        assert_eq!(
            seen.saw("r", "v1", at(10)),
            at(3),
            "an older version recorded late keeps its first sighting"
        );
        for (i, version) in ["v3", "v4", "v5"].into_iter().enumerate() {
            seen.saw("r", version, at(11 + i as u64));
        }
        assert_eq!(
            seen.saw("r", "v1", at(20)),
            at(20),
            "only the last few versions are remembered"
        );
        assert_eq!(seen.len(), 1);
    }

    #[test]
    fn a_full_memory_forgets_its_older_half() {
        let mut seen = Observations::new(4);
        for (i, room) in ["a", "b", "c", "d"].into_iter().enumerate() {
            seen.saw(room, "v", Duration::from_secs(i as u64));
        }
        seen.saw("e", "v", Duration::from_secs(10));
        let mut kept: Vec<&str> = seen.rooms.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["c", "d", "e"]);

        // Ties at the cut are kept only up to half the capacity.
        let mut seen = Observations::new(4);
        for room in ["a", "b", "c", "d"] {
            seen.saw(room, "v", Duration::ZERO);
        }
        seen.saw("e", "v", Duration::ZERO);
        assert_eq!(seen.len(), 3);
        assert!(seen.rooms.contains_key("e"));

        let mut seen = Observations::new(1);
        seen.saw("a", "v", Duration::ZERO);
        seen.saw("b", "v", Duration::ZERO);
        assert_eq!(seen.rooms.keys().collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn milliseconds_round_down_when_reported_and_up_when_kept() {
        let d = Duration::from_micros(1_500);
        assert_eq!(floor_ms(d), 1);
        assert_eq!(ceil_ms(d), 2);
        assert_eq!(floor_ms(Duration::from_millis(7)), 7);
        assert_eq!(ceil_ms(Duration::from_millis(7)), 7);
        assert_eq!(ceil_ms(Duration::ZERO), 0);
    }

    #[test]
    fn store_errors_map_to_lease_errors() {
        let invalid = lease_error(unique_core::Error::invalid("bad region"));
        assert!(invalid.is_invalid_params());
        assert_eq!(invalid.to_string(), "invalid params: bad region");

        let throttled = lease_error(unique_core::Error::Throttled);
        assert!(throttled.is_unavailable() && throttled.is_retryable());
        assert_eq!(
            throttled.to_string(),
            "unavailable: dynamodb throttled the request"
        );

        let down = lease_error(unique_core::Error::unavailable_with(
            "dynamodb GetItem timed out",
            std::io::Error::other("x"),
        ));
        assert!(down.is_unavailable());
        assert_eq!(down.to_string(), "unavailable: dynamodb GetItem timed out");
        assert!(std::error::Error::source(&down).is_some());

        let other = lease_error(unique_core::Error::Superseded {
            generation: 1,
            current: 2,
        });
        assert!(matches!(other, LeaseError::Backend { .. }), "{other:?}");
    }

    #[test]
    fn delete_item_errors_are_classified() {
        type Sdk = SdkError<DeleteItemError, ()>;
        let service = |e| -> Sdk { SdkError::service_error(e, ()) };
        let throttled = service(DeleteItemError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder().build(),
        ));
        assert_eq!(error::service_kind(&throttled), Some(Kind::Throttled));
        assert!(lease_error(error::classify("DeleteItem", throttled)).is_unavailable());
        let missing = service(DeleteItemError::ResourceNotFoundException(
            ResourceNotFoundException::builder().build(),
        ));
        assert_eq!(error::service_kind(&missing), Some(Kind::NotFound));
        let failed = service(DeleteItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder().build(),
        ));
        assert_eq!(error::service_kind(&failed), Some(Kind::ConditionFailed));
        let other = service(DeleteItemError::generic(
            ErrorMetadata::builder()
                .code("AccessDeniedException")
                .build(),
        ));
        assert_eq!(error::service_kind(&other), Some(Kind::Other));
        let mapped = lease_error(error::classify("DeleteItem", other));
        assert_eq!(
            mapped.to_string(),
            "unavailable: dynamodb DeleteItem failed: AccessDeniedException"
        );
    }

    fn table(key: &[(&str, KeyType)]) -> TableDescription {
        let mut description = TableDescription::builder();
        for (name, kind) in key {
            description = description
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(*name)
                        .key_type(kind.clone())
                        .build()
                        .unwrap(),
                )
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(*name)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .unwrap(),
                );
        }
        description.build()
    }

    #[test]
    fn only_a_pk_table_is_accepted() {
        check_schema("t", &table(&[("pk", KeyType::Hash)])).unwrap();
        let sessions = check_schema(
            "t",
            &table(&[("pk", KeyType::Hash), ("sk", KeyType::Range)]),
        )
        .unwrap_err();
        assert_eq!(
            sessions.to_string(),
            "backend error: dynamodb table t has key schema pk (HASH, S), sk (RANGE, S) (the \
             session store's layout: the lease directory needs a table of its own), and the \
             lease directory needs partition key pk (S) alone: create one with \
             DynamoDirectory::create_table_if_missing and point the directory at it"
        );
        let other = check_schema("t", &table(&[("id", KeyType::Hash)])).unwrap_err();
        assert!(
            other
                .to_string()
                .contains("has key schema id (HASH, S), and the lease directory"),
            "{other}"
        );
        let none = check_schema("t", &TableDescription::builder().build()).unwrap_err();
        assert!(none.to_string().contains("has key schema none,"), "{none}");
    }
}
