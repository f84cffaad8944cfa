//! [`PostgresStore`]: the `Store` operations, each one statement on a pooled connection.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use unique_core::{
    CasOutcome, CurrentView, Error, Fence, Key, Owner, OwnerState, Pins, Store, async_trait,
    encode_owner,
};

use crate::builder::PostgresStoreBuilder;
use crate::error::{map_pg, map_pool, timed_out};
use crate::sql::Statements;

/// A [`Store`] on one PostgreSQL table; see the crate docs. Cheap to clone (the pool is
/// shared).
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) sql: Statements,
    pub(crate) target: String,
    pub(crate) operation_timeout: Duration,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.inner.target)
            .field("table", &self.inner.sql.table)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// A builder for a store on the database at `url`: a libpq URL
    /// (`postgres://user:password@host:5432/db`) or `key=value` string.
    pub fn builder(url: &str) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(url)
    }

    /// `user@host:port/db`: where the store connects, without the password (for logs).
    pub fn target(&self) -> &str {
        &self.inner.target
    }

    /// The table as a quoted SQL identifier.
    pub fn table(&self) -> &str {
        &self.inner.sql.table
    }

    /// Runs `op` on a pooled connection, bounded by the operation timeout (waiting for the
    /// connection included). A connection whose call failed or ran out of time is closed
    /// rather than returned to the pool: its state is unknown.
    pub(crate) async fn with_connection<T, F, Fut>(&self, what: &str, op: F) -> Result<T, Error>
    where
        F: FnOnce(Checkout) -> Fut,
        Fut: Future<Output = Result<(Checkout, T), tokio_postgres::Error>>,
    {
        let limit = self.inner.operation_timeout;
        let call = async {
            let client = self.inner.pool.get().await.map_err(|e| map_pool(what, e))?;
            match op(Checkout(Some(client))).await {
                Ok((mut checkout, value)) => {
                    checkout.keep();
                    Ok(value)
                }
                // The checkout went into `op` and was dropped there: closed.
                Err(e) => Err(map_pg(what, e)),
            }
        };
        tokio::time::timeout(limit, call)
            .await
            .unwrap_or_else(|_| Err(timed_out(what, limit)))
    }

    async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        self.with_connection(what, |c| async move {
            let statement = c.client().prepare_cached(sql).await?;
            let rows = c.client().query(&statement, params).await?;
            Ok((c, rows))
        })
        .await
    }
}

/// A pooled connection that is closed on drop unless [`keep`](Self::keep) was called, so a
/// connection abandoned mid-call (an error, the operation timeout) is never reused.
pub(crate) struct Checkout(Option<Object>);

impl Checkout {
    pub(crate) fn client(&self) -> &Object {
        self.0
            .as_ref()
            .expect("a checkout holds its connection until dropped")
    }

    fn keep(&mut self) {
        // Dropping the object returns it to the pool.
        drop(self.0.take());
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            // Detach from the pool; dropping the client closes the connection.
            drop(Object::take(object));
        }
    }
}

/// The snapshot of one `(gen, owner, cid)` row.
fn record(generation: i64, owner: Option<&str>, cid: Option<String>) -> OwnerState {
    OwnerState::from_record(generation, owner.into(), cid, None)
}

#[async_trait]
impl Store for PostgresStore {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        let pk = key.to_string();
        let rows = self.query("read", &self.inner.sql.read, &[&pk]).await?;
        Ok(match rows.first() {
            None => OwnerState::absent(),
            Some(row) => record(row.get(0), row.get(1), row.get(2)),
        })
    }

    /// One statement for the whole batch (`pk = ANY($1)`); keys without a row read absent,
    /// and a key given twice is answered twice.
    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let pks: Vec<String> = keys.iter().map(Key::to_string).collect();
        let rows = self
            .query("batch read", &self.inner.sql.read_many, &[&pks])
            .await?;
        let found: HashMap<String, OwnerState> = rows
            .iter()
            .map(|row| (row.get(0), record(row.get(1), row.get(2), row.get(3))))
            .collect();
        Ok(pks
            .iter()
            .map(|pk| Ok(found.get(pk).cloned().unwrap_or_else(OwnerState::absent)))
            .collect())
    }

    async fn claim_cas(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
        snap: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        // Refusals first: nothing is sent for an exhausted gen or an unusable owner (C4, C8).
        let fence = Fence::for_snapshot(snap)?;
        let owner = encode_owner(owner)?;
        let pk = key.to_string();
        let next = fence.next_generation();
        let sql = &self.inner.sql;
        let rows = match fence {
            Fence::FirstLogin => {
                self.query("claim", &sql.first_login, &[&pk, &owner, &claim_id, &next])
                    .await?
            }
            Fence::DoublePin {
                generation,
                claim_id: pinned,
            } => {
                let params: [&(dyn ToSql + Sync); 6] =
                    [&pk, &owner, &claim_id, &next, &generation, &pinned];
                self.query("claim", &sql.double_pin, &params).await?
            }
            Fence::Tombstone { generation } => {
                let params: [&(dyn ToSql + Sync); 5] = [&pk, &owner, &claim_id, &next, &generation];
                self.query("claim", &sql.tombstone, &params).await?
            }
        };
        Ok(outcome(fence, rows.first()))
    }

    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.read_owner(key).await?.into_current_view()
    }

    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        if generation <= 0 {
            return Ok(false);
        }
        let pk = key.to_string();
        let sql = self.inner.sql.release.as_str();
        self.with_connection("release", |c| async move {
            let statement = c.client().prepare_cached(sql).await?;
            let updated = c.client().execute(&statement, &[&pk, &generation]).await?;
            Ok((c, updated > 0))
        })
        .await
    }
}

/// What a claim statement's answer means: the written gen, or a lost race with the record
/// that failed the fence. The record comes from the statement's snapshot, taken after the
/// request arrived; when it would still satisfy the fence, a write committed after that
/// snapshot is what failed it, so the snapshot is stale and not handed back (the Arbiter
/// reads instead).
fn outcome(fence: Fence<'_>, row: Option<&Row>) -> CasOutcome {
    let Some(row) = row else {
        return CasOutcome::lost();
    };
    let generation: i64 = row.get(0);
    if row.get::<_, bool>(1) {
        return CasOutcome::Written { generation };
    }
    let cid: Option<String> = row.get(3);
    let pins = Pins {
        generation,
        claim_id: cid.as_deref(),
    };
    if fence.holds(Some(pins)) {
        return CasOutcome::lost();
    }
    CasOutcome::LostRace {
        current: Some(record(generation, row.get(2), cid)),
    }
}
