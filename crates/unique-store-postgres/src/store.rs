//! [`PostgresStore`]: the `Store` operations, each one statement on a pooled connection.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio_postgres::types::{FromSql, ToSql, Type, WasNull};
use tokio_postgres::{Row, Statement};
use unique_core::{
    CasOutcome, CurrentView, Error, Fence, Key, Owner, OwnerState, Pins, Store, UserKey,
    UserSession, VacantClaim, VacantClaims, async_trait, encode_owner, listed_session,
};

use crate::builder::PostgresStoreBuilder;
use crate::error::{Failure, map_pool, timed_out};
use crate::schema::explain;
use crate::sql::{
    CLAIM_PARAMS, LIST_PARAMS, READ_MANY_PARAMS, READ_PARAMS, RELEASE_PARAMS, Statements,
    VACANT_PARAMS, WIN_PATTERN,
};
use crate::tls::TlsSetup;

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
    pub(crate) tls: TlsSetup,
    pub(crate) tls_summary: String,
    pub(crate) operation_timeout: Duration,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.inner.target)
            .field("tls", &self.inner.tls_summary)
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

    /// The TLS setup in libpq's words, for logs: the `sslmode` in force and where it came
    /// from, and what the certificate check trusts (`sslmode=verify-full, sslrootcert=PATH`;
    /// `sslmode=disable (the default for a loopback host)`). Never the password.
    pub fn tls(&self) -> &str {
        &self.inner.tls_summary
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
        Fut: Future<Output = Result<(Checkout, T), Failure>>,
    {
        let limit = self.inner.operation_timeout;
        let call = async {
            let client = self
                .inner
                .pool
                .get()
                .await
                .map_err(|e| map_pool(what, e, &self.inner.tls))?;
            match op(Checkout(Some(client))).await {
                Ok((mut checkout, value)) => {
                    checkout.keep();
                    Ok(value)
                }
                // The checkout went into `op` and was dropped there: closed.
                Err(failure) => Err(failure.into_error(what, &self.inner.sql.table)),
            }
        };
        tokio::time::timeout(limit, call)
            .await
            .unwrap_or_else(|_| Err(timed_out(what, limit)))
    }

    /// Runs the statement `sql`, whose parameters are `expected` (the column each goes to,
    /// and the type this store sends), and decodes each row it returns with `decode`.
    /// The prepared statement's parameter types are compared with `expected` first, so a
    /// table whose columns were altered is refused naming the column, before anything is
    /// sent.
    async fn query<T, D>(
        &self,
        what: &str,
        sql: &str,
        expected: &[(&str, Type)],
        params: &[&(dyn ToSql + Sync)],
        decode: D,
    ) -> Result<Vec<T>, Error>
    where
        D: Fn(&Row) -> Result<T, Failure> + Send,
        T: Send,
    {
        let table = self.inner.sql.table.as_str();
        self.with_connection(what, |c| async move {
            let decoded = async {
                let statement = c.client().prepare_cached(sql).await?;
                check_params(&statement, expected)?;
                let rows = c.client().query(&statement, params).await?;
                rows.iter().map(decode).collect::<Result<Vec<T>, Failure>>()
            }
            .await;
            match decoded {
                Ok(decoded) => Ok((c, decoded)),
                Err(failure) => Err(explain(&c, table, failure).await),
            }
        })
        .await
    }
}

/// Refuses a prepared statement whose parameter types are not those of `expected` (the
/// table's columns were altered): a value of the wrong type would otherwise fail in the
/// driver without saying which column is at fault.
pub(crate) fn check_params(
    statement: &Statement,
    expected: &[(&str, Type)],
) -> Result<(), Failure> {
    let found = statement.params();
    if found.len() != expected.len() {
        return Err(Failure::schema(format!(
            "a statement takes {} parameters, this store sends {}",
            found.len(),
            expected.len()
        )));
    }
    let wrong: Vec<String> = expected
        .iter()
        .zip(found)
        .enumerate()
        .filter(|(_, ((_, want), got))| want != *got)
        .map(|(i, ((column, want), got))| {
            format!(
                "column {column} is {got} where this store sends {want} (parameter ${})",
                i + 1
            )
        })
        .collect();
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(Failure::schema(wrong.join(", ")))
    }
}

/// Value `idx` of `row`, which holds the table's column `column`: a value of another type
/// (or a NULL where the schema has none) is a schema failure naming the column, not a panic.
pub(crate) fn column<'a, T: FromSql<'a>>(
    row: &'a Row,
    idx: usize,
    column: &str,
) -> Result<T, Failure> {
    row.try_get(idx).map_err(|e| {
        let found = row
            .columns()
            .get(idx)
            .map_or_else(|| "missing".to_owned(), |c| c.type_().to_string());
        let null =
            std::error::Error::source(&e).is_some_and(<dyn std::error::Error>::is::<WasNull>);
        let detail = if null {
            format!("column {column} is NULL")
        } else {
            format!("column {column} is {found}")
        };
        Failure::Schema {
            detail,
            source: Some(e),
        }
    })
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

    pub(crate) fn client_mut(&mut self) -> &mut Object {
        self.0
            .as_mut()
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

/// The snapshot of one `(gen, owner, cid, won)` row whose first column is `first`.
fn record(row: &Row, first: usize) -> Result<OwnerState, Failure> {
    let generation: i64 = column(row, first, "gen")?;
    let owner: Option<&str> = column(row, first + 1, "owner")?;
    let cid: Option<String> = column(row, first + 2, "cid")?;
    let won: Option<&str> = column(row, first + 3, "won")?;
    Ok(OwnerState::from_record(generation, owner.into(), cid, won))
}

#[async_trait]
impl Store for PostgresStore {
    async fn read_owner(&self, key: &Key) -> Result<OwnerState, Error> {
        let pk = key.to_string();
        let sql = &self.inner.sql.read;
        let mut records = self
            .query("read", sql, &READ_PARAMS, &[&pk], |row| record(row, 0))
            .await?;
        Ok(records.pop().unwrap_or_else(OwnerState::absent))
    }

    /// One statement for the whole batch (`pk = ANY($1)`); keys without a row read absent,
    /// and a key given twice is answered twice.
    async fn read_owners(&self, keys: &[Key]) -> Result<Vec<Result<OwnerState, Error>>, Error> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let pks: Vec<String> = keys.iter().map(Key::to_string).collect();
        let sql = &self.inner.sql.read_many;
        let rows = self
            .query("batch read", sql, &READ_MANY_PARAMS, &[&pks], |row| {
                Ok((column::<String>(row, 0, "pk")?, record(row, 1)?))
            })
            .await?;
        let found: HashMap<String, OwnerState> = rows.into_iter().collect();
        Ok(pks
            .iter()
            .map(|pk| Ok(found.get(pk).cloned().unwrap_or_else(OwnerState::absent)))
            .collect())
    }

    /// One statement (`Statements::list`): the default key by the primary key, the slots'
    /// byte range by the listing index, every row from the statement's one snapshot, taken
    /// on the primary after the call began (C10).
    /// C13: one `count(*)` under the operation timeout.
    async fn count_online(&self) -> Result<Option<u64>, Error> {
        let sql = &self.inner.sql.count_online;
        let counts = self
            .query("count", sql, &[], &[], |row| column::<i64>(row, 0, "count"))
            .await?;
        let online = counts.first().copied().unwrap_or_default();
        Ok(Some(online.cast_unsigned()))
    }

    async fn list_sessions(&self, user: &UserKey) -> Result<Vec<UserSession>, Error> {
        let default_key = user.to_string();
        let (start, end) = user.slot_range();
        let sql = &self.inner.sql.list;
        let rows = self
            .query(
                "listing",
                sql,
                &LIST_PARAMS,
                &[&default_key, &start, &end],
                |row| Ok((column::<String>(row, 0, "pk")?, record(row, 1)?)),
            )
            .await?;
        let mut sessions = Vec::with_capacity(rows.len());
        for (pk, state) in rows {
            // The statement selects only this user's keys; `slot_of` names their slot.
            if let Some(slot) = user.slot_of(&pk)
                && let Some(session) = listed_session(slot, state)?
            {
                sessions.push(session);
            }
        }
        Ok(sessions)
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
        // Written with gen, owner and cid in the one statement (C9).
        let won = snap.won_after(claim_id, next);
        let sql = &self.inner.sql;
        let decode = |row: &Row| answer(&fence, row);
        let answers = match fence {
            Fence::FirstLogin => {
                let params: [&(dyn ToSql + Sync); 5] = [&pk, &owner, &claim_id, &next, &won];
                self.query(
                    "claim",
                    &sql.first_login,
                    &CLAIM_PARAMS[..5],
                    &params,
                    decode,
                )
                .await?
            }
            Fence::DoublePin {
                generation,
                claim_id: pinned,
            } => {
                let params: [&(dyn ToSql + Sync); 7] =
                    [&pk, &owner, &claim_id, &next, &won, &generation, &pinned];
                self.query("claim", &sql.double_pin, &CLAIM_PARAMS, &params, decode)
                    .await?
            }
            Fence::Tombstone { generation } => {
                let params: [&(dyn ToSql + Sync); 6] =
                    [&pk, &owner, &claim_id, &next, &won, &generation];
                self.query("claim", &sql.tombstone, &CLAIM_PARAMS[..6], &params, decode)
                    .await?
            }
        };
        Ok(answers.into_iter().next().unwrap_or_else(CasOutcome::lost))
    }

    fn vacant_claims(&self) -> VacantClaims {
        VacantClaims::AbsentAndTombstones
    }

    /// One statement (`Statements::vacant`): the claim of an absent record or a tombstone,
    /// or the record from the statement's snapshot. That snapshot is taken after the call
    /// began but may predate the row the condition saw (READ COMMITTED): a stale record is
    /// still a committed state within the call, and the fenced CAS the Arbiter makes from it
    /// loses if it is stale. No row at all (the snapshot predates the row) is `Unread`.
    async fn claim_vacant(
        &self,
        key: &Key,
        owner: &Owner,
        claim_id: &str,
    ) -> Result<VacantClaim, Error> {
        let owner = encode_owner(owner)?;
        let pk = key.to_string();
        let first_won = OwnerState::absent().won_after(claim_id, 1);
        // How a win of this claim_id starts (C9), cut from the list of its one win as
        // `RecentClaims::encode` writes it: `[["<claim_id>",1]]` gives `["<claim_id>",`.
        let win_prefix = first_won
            .strip_prefix('[')
            .and_then(|won| won.strip_suffix("1]]"))
            .ok_or_else(|| Error::unavailable("recent claims encode in an unknown form"))?;
        let params: [&(dyn ToSql + Sync); 6] = [
            &pk,
            &owner,
            &claim_id,
            &first_won,
            &win_prefix,
            &WIN_PATTERN,
        ];
        let answers = self
            .query(
                "claim",
                &self.inner.sql.vacant,
                &VACANT_PARAMS,
                &params,
                vacant_answer,
            )
            .await?;
        Ok(answers.into_iter().next().unwrap_or(VacantClaim::Unread))
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
        let table = self.inner.sql.table.as_str();
        self.with_connection("release", |c| async move {
            let updated = async {
                let statement = c.client().prepare_cached(sql).await?;
                check_params(&statement, &RELEASE_PARAMS)?;
                Ok::<u64, Failure>(c.client().execute(&statement, &[&pk, &generation]).await?)
            }
            .await;
            match updated {
                Ok(updated) => Ok((c, updated > 0)),
                Err(failure) => Err(explain(&c, table, failure).await),
            }
        })
        .await
    }
}

/// What a claim statement's answer row means: the written gen, or a lost race with the
/// record that failed the fence. The record comes from the statement's snapshot, taken
/// after the request arrived; when it would still satisfy the fence, a write committed
/// after that snapshot is what failed it, so the snapshot is stale and not handed back (the
/// Arbiter reads instead). No row at all is a lost race without a record.
fn answer(fence: &Fence<'_>, row: &Row) -> Result<CasOutcome, Failure> {
    let generation: i64 = column(row, 0, "gen")?;
    if column::<bool>(row, 1, "written")? {
        return Ok(CasOutcome::Written { generation });
    }
    let owner: Option<&str> = column(row, 2, "owner")?;
    let cid: Option<String> = column(row, 3, "cid")?;
    let won: Option<&str> = column(row, 4, "won")?;
    let pins = Pins {
        generation,
        claim_id: cid.as_deref(),
    };
    if fence.holds(Some(pins)) {
        return Ok(CasOutcome::lost());
    }
    Ok(CasOutcome::LostRace {
        current: Some(OwnerState::from_record(generation, owner.into(), cid, won)),
    })
}

/// What the vacant claim's answer row means: the written gen, or the record that was not
/// vacant (from the statement's snapshot).
fn vacant_answer(row: &Row) -> Result<VacantClaim, Failure> {
    let generation: i64 = column(row, 0, "gen")?;
    if column::<bool>(row, 1, "written")? {
        return Ok(VacantClaim::Written { generation });
    }
    let owner: Option<&str> = column(row, 2, "owner")?;
    let cid: Option<String> = column(row, 3, "cid")?;
    let won: Option<&str> = column(row, 4, "won")?;
    Ok(VacantClaim::Occupied(OwnerState::from_record(
        generation,
        owner.into(),
        cid,
        won,
    )))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_postgres::NoTls;
    use unique_testsupport::postgres;

    use super::*;

    use crate::test_icu as icu;

    /// The plan of `EXECUTE listing` (prepared beforehand) for `user`, one line per node.
    async fn plan(client: &tokio_postgres::Client, user: &UserKey) -> String {
        let (start, end) = user.slot_range();
        let literal = |text: &str| format!("'{}'", text.replace('\'', "''"));
        let rows = client
            .query(
                &format!(
                    "EXPLAIN EXECUTE listing ({}, {}, {})",
                    literal(&user.to_string()),
                    literal(&start),
                    literal(&end)
                ),
                &[],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|row| row.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// C10 stays cheap on a table of any size: on 60 000 records, in the test server's C
    /// database and in a database whose default collation ignores punctuation, the planner
    /// serves the listing from the primary key and the listing index, never a scan of the
    /// table — with the user's values, and in the generic plan a prepared statement falls
    /// back to after a few executions.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_listing_reads_the_indexes_not_the_table() {
        let server = postgres::shared();
        let blind = icu::punctuation_blind_database(&server).await;
        let table = format!("listing_plan_{}", std::process::id());
        for (database, url) in [
            ("the C database", server.url()),
            ("the punctuation-blind database", blind.as_str()),
        ] {
            let store = PostgresStore::builder(url)
                .table(&table)
                .operation_timeout(Duration::from_secs(20))
                .build()
                .unwrap();
            let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
            tokio::spawn(connection);
            client
                .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
                .await
                .unwrap();
            store.create_table_if_missing().await.unwrap();
            client
                .batch_execute(&format!(
                    "INSERT INTO {table} (pk, gen, owner) \
                     SELECT 'g#prod#' || u || CASE s WHEN 0 THEN '' ELSE '#s' || s END, 1, '' \
                     FROM generate_series(1, 20000) u, generate_series(0, 2) s; \
                     ANALYZE {table}"
                ))
                .await
                .unwrap();
            let sql = &store.inner.sql;
            let user = UserKey::new("g", "prod", 4321);
            client
                .batch_execute(&format!(
                    "PREPARE listing (text, text, text) AS {}",
                    sql.list
                ))
                .await
                .unwrap();
            let custom = plan(&client, &user).await;
            client
                .batch_execute("SET plan_cache_mode = force_generic_plan")
                .await
                .unwrap();
            let generic = plan(&client, &user).await;
            let index = sql.listing_index.trim_matches('"');
            for (which, plan) in [("custom", custom), ("generic", generic)] {
                assert!(!plan.contains("Seq Scan"), "{database}: {which}: {plan}");
                assert!(
                    plan.contains(&format!("Index Scan on {index}")),
                    "{database}: {which}: {plan}"
                );
                assert!(
                    plan.contains(&format!("Index Scan on {table}_pkey")),
                    "{database}: {which}: {plan}"
                );
            }
            let listed = store.list_sessions(&user).await.unwrap();
            assert!(listed.is_empty(), "tombstones only: {listed:?}");
        }
    }
}
