//! The lease directory of `unique-lease` on DynamoDB: [`DynamoDirectory`].
//!
//! DynamoDB has no clock a request can read, so expiry follows the DynamoDB lock
//! client's protocol (D10): every grant and every renewal writes a fresh random record
//! version (`rvn`), and a directory instance judges a lease expired only once it has
//! watched that same version stay unchanged for the lease's whole ttl on its own
//! monotonic clock. Holders and takers never compare wall clocks.

mod error;
mod expiry;
mod item;
mod protocol;
mod table;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::Client;
use unique_lease::{Clock, LeaseError};

use crate::builder::DynamoStoreBuilder;
use crate::client::DynamoStore;

use self::error::lease_error;
use self::expiry::{Observations, Ticker};

/// How many rooms an instance remembers an observation of, unless
/// [`DynamoDirectoryBuilder::max_observations`] says otherwise.
pub const DEFAULT_MAX_OBSERVATIONS: usize = 100_000;

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
