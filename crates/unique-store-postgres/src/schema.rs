//! The table: created only when asked, checked at startup, versioned by its comment.

use tokio_postgres::error::SqlState;
use unique_core::Error;

use crate::sql::{SCHEMA_COMMENT, SCHEMA_COMMENT_PREFIX};
use crate::store::PostgresStore;

/// What the startup check reads in one round trip.
const INSPECT: &str = "SELECT t.oid IS NOT NULL, obj_description(t.oid, 'pg_class'), \
     CASE WHEN t.oid IS NULL THEN false ELSE has_table_privilege(t.oid, 'SELECT') \
     AND has_table_privilege(t.oid, 'INSERT') AND has_table_privilege(t.oid, 'UPDATE') END, \
     current_setting('synchronous_commit'), pg_is_in_recovery() \
     FROM (SELECT to_regclass($1) AS oid) t";

impl PostgresStore {
    /// Creates the table when it does not exist: `pk text PRIMARY KEY, gen bigint NOT
    /// NULL, owner text, cid text`, marked with the schema version in its comment. Returns
    /// whether it created it. Safe when several processes race to create it. Needs the
    /// `CREATE` privilege on the schema; bounded by the operation timeout.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the database cannot be reached or refuses the DDL.
    pub async fn create_table_if_missing(&self) -> Result<bool, Error> {
        let sql = &self.inner.sql;
        self.with_connection("create table", |c| async move {
            let exists = c
                .client()
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&sql.table])
                .await?
                .get::<_, bool>(0);
            if exists {
                return Ok((c, false));
            }
            // Both statements in one simple query: one implicit transaction.
            match c.client().batch_execute(&sql.create).await {
                Ok(()) => Ok((c, true)),
                // Another process created it first. Concurrent creations collide on the
                // table's name (42P07), on its row type (42710, "type … already exists") or
                // on the catalog's unique index (23505), depending on timing.
                Err(e)
                    if [
                        SqlState::DUPLICATE_TABLE,
                        SqlState::DUPLICATE_OBJECT,
                        SqlState::UNIQUE_VIOLATION,
                    ]
                    .iter()
                    .any(|code| e.code() == Some(code)) =>
                {
                    Ok((c, false))
                }
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// The startup check: the database answers, on a primary, the table exists with this
    /// store's schema version and columns, the role may `SELECT`, `INSERT` and `UPDATE` it,
    /// and commits are durable (`synchronous_commit` is not `off`). Bounded by the
    /// operation timeout. Every statement is prepared on the way, so a table of the wrong
    /// shape is found here, not on the first claim.
    ///
    /// # Errors
    ///
    /// `Unavailable` with a reason naming what to fix.
    pub async fn check(&self) -> Result<(), Error> {
        let sql = &self.inner.sql;
        let (exists, comment, allowed, synchronous_commit, standby) = self
            .with_connection("startup check", |c| async move {
                let row = c.client().query_one(INSPECT, &[&sql.table]).await?;
                let found: (bool, Option<String>, bool, String, bool) =
                    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
                if found.0 && found.1.as_deref() == Some(SCHEMA_COMMENT) && found.2 {
                    for statement in [
                        &sql.read,
                        &sql.read_many,
                        &sql.first_login,
                        &sql.double_pin,
                        &sql.tombstone,
                        &sql.release,
                    ] {
                        c.client().prepare_cached(statement).await?;
                    }
                }
                Ok((c, found))
            })
            .await?;
        let table = &sql.table;
        if standby {
            return Err(Error::unavailable(
                "postgres server is a read-only standby: point the url at the primary",
            ));
        }
        if !exists {
            return Err(Error::unavailable(format!(
                "postgres table {table} is missing: create it (see the unique-store-postgres \
                 docs) or start with --create-table"
            )));
        }
        match comment.as_deref() {
            Some(SCHEMA_COMMENT) => {}
            Some(other) if other.starts_with(SCHEMA_COMMENT_PREFIX) => {
                return Err(Error::unavailable(format!(
                    "postgres table {table} has schema '{other}', this build understands \
                     '{SCHEMA_COMMENT}' only"
                )));
            }
            _ => {
                return Err(Error::unavailable(format!(
                    "postgres table {table} exists but is not a unique store table (its \
                     comment is not '{SCHEMA_COMMENT}'); refusing to use it"
                )));
            }
        }
        if !allowed {
            return Err(Error::unavailable(format!(
                "postgres role lacks SELECT, INSERT or UPDATE on {table}"
            )));
        }
        if synchronous_commit == "off" {
            return Err(Error::unavailable(
                "postgres synchronous_commit is off: an acknowledged claim could be lost and \
                 its gen issued again; set it on (ALTER ROLE ... SET synchronous_commit = on)",
            ));
        }
        Ok(())
    }
}
