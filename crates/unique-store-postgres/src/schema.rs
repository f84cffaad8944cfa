//! The table and its listing index: created (or migrated) only when asked, checked at
//! startup, versioned by the table's comment.

use tokio_postgres::error::SqlState;
use unique_core::Error;

use crate::error::{Failure, is_schema_mismatch};
use crate::sql::{
    CLAIM_PARAMS, COLUMNS, LIST_PARAMS, READ_MANY_PARAMS, READ_PARAMS, RELEASE_PARAMS,
    SCHEMA_COMMENT, SCHEMA_COMMENT_PREFIX, SCHEMA_VERSION, Statements, VACANT_PARAMS,
};
use crate::store::{Checkout, PostgresStore, check_params, column};

/// Whether the table whose oid the SQL expression `$oid` gives has an index the listing's
/// range can use (see `Statements::list`): a valid, non-partial btree whose first column is
/// `pk` in the "C" collation with the default `text_ops` class, whatever its name, so an
/// index an operator built by hand (`CREATE INDEX CONCURRENTLY … (pk COLLATE "C")`) counts.
macro_rules! has_listing_index {
    ($oid:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM pg_index i \
             JOIN pg_class ic ON ic.oid = i.indexrelid \
             JOIN pg_am am ON am.oid = ic.relam \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
             JOIN pg_collation co ON co.oid = i.indcollation[0] \
             JOIN pg_opclass oc ON oc.oid = i.indclass[0] \
             WHERE i.indrelid = ",
            $oid,
            " AND i.indisvalid AND i.indpred IS NULL AND am.amname = 'btree' \
             AND a.attname = 'pk' \
             AND co.collname = 'C' AND co.collnamespace = 'pg_catalog'::regnamespace \
             AND oc.opcname = 'text_ops' AND oc.opcnamespace = 'pg_catalog'::regnamespace)"
        )
    };
}

/// Whether the table `$1` has the listing index (see [`has_listing_index`]).
const LISTING_INDEX: &str = concat!("SELECT ", has_listing_index!("to_regclass($1)"));

/// What the startup check reads in one round trip: whether the table exists, its comment,
/// the role's privileges, `synchronous_commit`, whether the server is a standby, the
/// table's columns with their types in `format_type`'s words, and whether it has the
/// listing index.
const INSPECT: &str = concat!(
    "SELECT t.oid IS NOT NULL, obj_description(t.oid, 'pg_class'), \
     CASE WHEN t.oid IS NULL THEN false ELSE has_table_privilege(t.oid, 'SELECT') \
     AND has_table_privilege(t.oid, 'INSERT') AND has_table_privilege(t.oid, 'UPDATE') END, \
     current_setting('synchronous_commit'), pg_is_in_recovery(), \
     ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = t.oid \
     AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum), \
     ARRAY(SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
     WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum), ",
    has_listing_index!("t.oid"),
    " FROM (SELECT to_regclass($1) AS oid) t"
);

/// The table's columns and their types, as in [`INSPECT`].
const COLUMNS_SQL: &str = "SELECT \
     ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = t.oid \
     AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum), \
     ARRAY(SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
     WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum) \
     FROM (SELECT to_regclass($1) AS oid) t";

/// The table's comment (NULL when it has none or does not exist).
const COMMENT: &str = "SELECT obj_description(to_regclass($1), 'pg_class')";

/// What [`INSPECT`] found.
// One field per column of the query's row: the flags are independent facts, not a state.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug)]
struct Inspection {
    exists: bool,
    comment: Option<String>,
    allowed: bool,
    synchronous_commit: String,
    standby: bool,
    /// `(name, type)` of each column, in table order.
    columns: Vec<(String, String)>,
    /// The table has the listing index.
    listing_index: bool,
}

/// How a table's comment relates to this build's schema.
#[derive(Debug, PartialEq, Eq)]
enum Version {
    Current,
    /// An older version this build migrates.
    Older(u32),
    /// A newer version, or one this build cannot migrate.
    Other(String),
    /// No comment of this store: another application's table.
    Foreign,
}

fn version(comment: Option<&str>) -> Version {
    let Some(comment) = comment else {
        return Version::Foreign;
    };
    if comment == SCHEMA_COMMENT {
        return Version::Current;
    }
    match comment.strip_prefix(SCHEMA_COMMENT_PREFIX) {
        None => Version::Foreign,
        Some(number) => match number.parse::<u32>() {
            Ok(1) => Version::Older(1),
            _ => Version::Other(comment.to_owned()),
        },
    }
}

impl PostgresStore {
    /// Creates the table when it does not exist: `pk text PRIMARY KEY, gen bigint NOT
    /// NULL, owner text, cid text, won text`, with the listing index on `pk COLLATE "C"`,
    /// marked with the schema version in its comment. A table of an older schema version is
    /// migrated instead (schema 1 → 2: `ADD COLUMN won text`, then the comment), in one
    /// transaction holding the table's lock, so processes starting together migrate it
    /// once; a table of this version without the listing index gets it, likewise once.
    /// Returns whether it created the table (a migration is `false`). Safe when several
    /// processes race. Needs the `CREATE` privilege on the schema to create, the table's
    /// ownership to migrate or index it; bounded by the operation timeout.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the database cannot be reached or refuses the DDL.
    pub async fn create_table_if_missing(&self) -> Result<bool, Error> {
        let sql = &self.inner.sql;
        self.with_connection("create table", |mut c| async move {
            let row = c
                .client()
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&sql.table])
                .await?;
            if !column::<bool>(&row, 0, "exists")? {
                // Both statements in one simple query: one implicit transaction.
                match c.client().batch_execute(&sql.create).await {
                    Ok(()) => return Ok((c, true)),
                    // Another process created it first. Concurrent creations collide on
                    // the table's name (42P07), on its row type (42710, "type … already
                    // exists") or on the catalog's unique index (23505), depending on
                    // timing. It may be of an older version: go on to the migration.
                    Err(e)
                        if [
                            SqlState::DUPLICATE_TABLE,
                            SqlState::DUPLICATE_OBJECT,
                            SqlState::UNIQUE_VIOLATION,
                        ]
                        .iter()
                        .any(|code| e.code() == Some(code)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            migrate_if_older(&mut c, sql).await?;
            ensure_listing_index(&mut c, sql).await?;
            Ok((c, false))
        })
        .await
    }

    /// The startup check: the database answers, on a primary, the table exists with this
    /// store's schema version and columns of this store's types (`pk text, gen bigint,
    /// owner text, cid text, won text`) and has the listing index, the role may `SELECT`,
    /// `INSERT` and `UPDATE` it, and commits are durable (`synchronous_commit` is not
    /// `off`). Bounded by the operation timeout. Every statement is prepared on the way, so a table of the wrong
    /// shape is found here, not on the first claim.
    ///
    /// # Errors
    ///
    /// `Unavailable` with a reason naming what to fix: a table of an older schema version
    /// names its migration, a column of the wrong type names the column and its type, a
    /// table without the listing index names the `CREATE INDEX`.
    pub async fn check(&self) -> Result<(), Error> {
        let sql = &self.inner.sql;
        self.with_connection("startup check", |c| async move {
            let row = c.client().query_one(INSPECT, &[&sql.table]).await?;
            let names: Vec<String> = column(&row, 5, "attname")?;
            let types: Vec<String> = column(&row, 6, "format_type")?;
            let found = Inspection {
                exists: column(&row, 0, "exists")?,
                comment: column(&row, 1, "obj_description")?,
                allowed: column(&row, 2, "has_table_privilege")?,
                synchronous_commit: column(&row, 3, "synchronous_commit")?,
                standby: column(&row, 4, "pg_is_in_recovery")?,
                columns: names.into_iter().zip(types).collect(),
                listing_index: column(&row, 7, "listing index")?,
            };
            verdict(sql, &found).map_err(Failure::Refused)?;
            for (statement, expected) in [
                (&sql.read, &READ_PARAMS[..]),
                (&sql.read_many, &READ_MANY_PARAMS[..]),
                (&sql.list, &LIST_PARAMS[..]),
                (&sql.first_login, &CLAIM_PARAMS[..5]),
                (&sql.double_pin, &CLAIM_PARAMS[..]),
                (&sql.tombstone, &CLAIM_PARAMS[..6]),
                (&sql.vacant, &VACANT_PARAMS[..]),
                (&sql.release, &RELEASE_PARAMS[..]),
            ] {
                let prepared = match c.client().prepare_cached(statement).await {
                    Ok(prepared) => check_params(&prepared, expected),
                    Err(e) => Err(e.into()),
                };
                if let Err(failure) = prepared {
                    return Err(explain(&c, &sql.table, failure).await);
                }
            }
            Ok((c, ()))
        })
        .await
    }
}

/// Migrates the table when its comment names an older schema version; leaves any other
/// table alone (the startup check judges it). The version is read again under the table's
/// lock, so of processes migrating together one does it and the others find it done, and a
/// table a newer build migrated meanwhile is never marked older again.
async fn migrate_if_older(c: &mut Checkout, sql: &Statements) -> Result<(), Failure> {
    let row = c.client().query_one(COMMENT, &[&sql.table]).await?;
    let comment: Option<String> = column(&row, 0, "obj_description")?;
    if !matches!(version(comment.as_deref()), Version::Older(_)) {
        return Ok(());
    }
    let client = c.client_mut();
    let tx = client.transaction().await?;
    let migrated = async {
        tx.batch_execute(&format!(
            "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
            sql.table
        ))
        .await?;
        let row = tx.query_one(COMMENT, &[&sql.table]).await?;
        let comment: Option<String> = column(&row, 0, "obj_description")?;
        if version(comment.as_deref()) == Version::Older(1) {
            tx.batch_execute(&sql.migrate_from_1).await?;
        }
        Ok::<(), Failure>(())
    }
    .await;
    match migrated {
        Ok(()) => tx.commit().await.map_err(Failure::from),
        Err(Failure::Pg(e)) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            Err(Failure::Refused(Error::unavailable_with(
                format!(
                    "postgres table {} has schema 1 and migrating it to schema \
                     {SCHEMA_VERSION} needs the table's owner (permission denied): start \
                     with --create-table as the owner, or run as the owner: {}",
                    sql.table, sql.migrate_from_1
                ),
                e,
            )))
        }
        // Dropping the transaction rolls it back; the connection is closed anyway.
        Err(failure) => Err(failure),
    }
}

/// Creates the listing index on a table of this schema version that lacks it (a table
/// created before slots, or by hand), leaving any other table alone (the startup check
/// judges it). The index is looked for by what it is (see [`has_listing_index`]), first
/// without a lock, so a table that has one costs two catalog queries. Otherwise, in one transaction,
/// the table is locked in `SHARE ROW EXCLUSIVE` mode, which conflicts with itself: of
/// processes starting together one builds the index, and the others wait, then find it
/// (two `CREATE INDEX IF NOT EXISTS` of one name at once can both pass the name check and
/// one fails on the catalog). The lock blocks claims while the index builds, as any
/// `CREATE INDEX` does; see the crate docs for building it by hand on a large table.
async fn ensure_listing_index(c: &mut Checkout, sql: &Statements) -> Result<(), Failure> {
    if !needs_listing_index(c.client(), sql).await? {
        return Ok(());
    }
    let client = c.client_mut();
    let tx = client.transaction().await?;
    let built = async {
        tx.batch_execute(&format!(
            "LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE",
            sql.table
        ))
        .await?;
        // Again under the lock: another process may have built it, or a newer build
        // migrated the table, meanwhile.
        if !needs_listing_index(&tx, sql).await? {
            return Ok(());
        }
        tx.batch_execute(&sql.create_listing_index).await?;
        if has_listing_index(&tx, sql).await? {
            return Ok(());
        }
        // `IF NOT EXISTS` skipped it: another relation of the schema has the name.
        Err(Failure::Refused(Error::unavailable(format!(
            "postgres table {} needs an index for listing a user's sessions, and the \
             name {} is taken by another relation: create it under a name of your own: \
             CREATE INDEX ON {} (pk COLLATE \"C\")",
            sql.table, sql.listing_index, sql.table
        ))))
    }
    .await;
    match built {
        Ok(()) => tx.commit().await.map_err(Failure::from),
        Err(Failure::Pg(e)) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            Err(Failure::Refused(Error::unavailable_with(
                format!(
                    "postgres table {} needs an index for listing a user's sessions, and \
                     creating it needs the table's owner (permission denied): start with \
                     --create-table as the owner, or run as the owner: {}",
                    sql.table, sql.create_listing_index
                ),
                e,
            )))
        }
        // Dropping the transaction rolls it back; the connection is closed anyway.
        Err(failure) => Err(failure),
    }
}

/// Whether `sql`'s table is of this schema version and lacks the listing index, as `client`
/// (or its transaction) sees it.
async fn needs_listing_index(
    client: &impl deadpool_postgres::GenericClient,
    sql: &Statements,
) -> Result<bool, Failure> {
    let row = client.query_one(COMMENT, &[&sql.table]).await?;
    let comment: Option<String> = column(&row, 0, "obj_description")?;
    Ok(version(comment.as_deref()) == Version::Current && !has_listing_index(client, sql).await?)
}

/// Whether `sql`'s table has the listing index, as `client` (or its transaction) sees it.
async fn has_listing_index(
    client: &impl deadpool_postgres::GenericClient,
    sql: &Statements,
) -> Result<bool, Failure> {
    let row = client.query_one(LISTING_INDEX, &[&sql.table]).await?;
    column(&row, 0, "listing index")
}

/// Each column of the schema that `columns` (`(name, type)` as `format_type` names it)
/// lacks or has with another type, in words: `column gen is text, needs bigint`.
fn column_mismatches(columns: &[(String, String)]) -> Vec<String> {
    COLUMNS
        .iter()
        .filter_map(
            |(name, want)| match columns.iter().find(|(column, _)| column == name) {
                None => Some(format!("column {name} is missing (needs {want})")),
                Some((_, got)) if got != want => {
                    Some(format!("column {name} is {got}, needs {want}"))
                }
                Some(_) => None,
            },
        )
        .collect()
}

/// `failure` of a statement on `table`, explained from the catalog when it looks like a
/// table of the wrong shape (a parameter or value of another type, or the server's own
/// type or column error): the columns that differ from the schema replace the driver's
/// words, so every operation names the column and its type the way the startup check does.
/// One more query, on the failure path only; any other failure is returned as it is.
pub(crate) async fn explain(c: &Checkout, table: &str, failure: Failure) -> Failure {
    let (detail, source) = match failure {
        Failure::Pg(e) if e.code().is_some_and(is_schema_mismatch) => (None, Some(e)),
        Failure::Schema { detail, source } => (Some(detail), source),
        other => return other,
    };
    let columns = match c.client().query_one(COLUMNS_SQL, &[&table]).await {
        Ok(row) => match (row.try_get(0), row.try_get(1)) {
            (Ok(names), Ok(types)) => {
                let (names, types): (Vec<String>, Vec<String>) = (names, types);
                names.into_iter().zip(types).collect()
            }
            _ => Vec::new(),
        },
        Err(_) => Vec::new(),
    };
    let wrong = column_mismatches(&columns);
    if !wrong.is_empty() {
        return Failure::Schema {
            detail: wrong.join(", "),
            source,
        };
    }
    // Nothing to see in the catalog: the failure as it was.
    match (detail, source) {
        (Some(detail), source) => Failure::Schema { detail, source },
        (None, Some(e)) => Failure::Pg(e),
        (None, None) => Failure::schema("a value of another type"),
    }
}

/// The startup check's decision on what [`INSPECT`] found.
fn verdict(sql: &Statements, found: &Inspection) -> Result<(), Error> {
    let table = &sql.table;
    if found.standby {
        return Err(Error::unavailable(
            "postgres server is a read-only standby: point the url at the primary",
        ));
    }
    if !found.exists {
        return Err(Error::unavailable(format!(
            "postgres table {table} is missing: create it (see the unique-store-postgres \
             docs) or start with --create-table"
        )));
    }
    match version(found.comment.as_deref()) {
        Version::Current => {}
        Version::Older(old) => {
            return Err(Error::unavailable(format!(
                "postgres table {table} has schema {old}, this build needs schema \
                 {SCHEMA_VERSION}: start once with --create-table as the table's owner to \
                 migrate it, or run as the owner: {}",
                sql.migrate_from_1
            )));
        }
        Version::Other(other) => {
            return Err(Error::unavailable(format!(
                "postgres table {table} has schema '{other}', this build understands \
                 '{SCHEMA_COMMENT}' only"
            )));
        }
        Version::Foreign => {
            return Err(Error::unavailable(format!(
                "postgres table {table} exists but is not a unique store table (its \
                 comment is not '{SCHEMA_COMMENT}'); refusing to use it"
            )));
        }
    }
    let wrong = column_mismatches(&found.columns);
    if !wrong.is_empty() {
        return Err(Error::unavailable(format!(
            "postgres table {table} has an invalid schema: {}; schema {SCHEMA_VERSION} is {}",
            wrong.join(", "),
            COLUMNS
                .iter()
                .map(|(name, ty)| format!("{name} {ty}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if !found.listing_index {
        return Err(Error::unavailable(format!(
            "postgres table {table} has no index for listing a user's sessions: start once \
             with --create-table as the table's owner to create it, or run as the owner: {} \
             (on a large table, CREATE INDEX CONCURRENTLY ON {table} (pk COLLATE \"C\") \
             builds it without blocking claims)",
            sql.create_listing_index
        )));
    }
    if !found.allowed {
        return Err(Error::unavailable(format!(
            "postgres role lacks SELECT, INSERT or UPDATE on {table}"
        )));
    }
    if found.synchronous_commit == "off" {
        return Err(Error::unavailable(
            "postgres synchronous_commit is off: an acknowledged claim could be lost and \
             its gen issued again; set it on (ALTER ROLE ... SET synchronous_commit = on)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Inspection {
        Inspection {
            exists: true,
            comment: Some(SCHEMA_COMMENT.to_owned()),
            allowed: true,
            synchronous_commit: "on".to_owned(),
            standby: false,
            columns: COLUMNS
                .iter()
                .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
                .collect(),
            listing_index: true,
        }
    }

    fn refusal(found: &Inspection) -> String {
        let sql = Statements::for_table("t").unwrap();
        verdict(&sql, found).unwrap_err().to_string()
    }

    #[test]
    fn the_comment_is_this_schema_version() {
        assert_eq!(
            SCHEMA_COMMENT,
            format!("{SCHEMA_COMMENT_PREFIX}{SCHEMA_VERSION}")
        );
        assert_eq!(version(Some(SCHEMA_COMMENT)), Version::Current);
        assert_eq!(
            version(Some("unique-store-postgres schema 1")),
            Version::Older(1)
        );
        assert!(matches!(
            version(Some("unique-store-postgres schema 3")),
            Version::Other(_)
        ));
        assert_eq!(version(Some("sessions")), Version::Foreign);
        assert_eq!(version(None), Version::Foreign);
    }

    #[test]
    fn a_good_table_passes_and_extra_columns_are_allowed() {
        let sql = Statements::for_table("t").unwrap();
        verdict(&sql, &good()).unwrap();
        let mut found = good();
        found
            .columns
            .push(("note".to_owned(), "character varying(20)".to_owned()));
        verdict(&sql, &found).unwrap();
    }

    #[test]
    fn each_refusal_names_what_to_fix() {
        let mut old = good();
        old.comment = Some("unique-store-postgres schema 1".to_owned());
        let e = refusal(&old);
        assert!(e.contains("has schema 1"), "{e}");
        assert!(e.contains("ADD COLUMN IF NOT EXISTS won text"), "{e}");
        assert!(e.contains("--create-table"), "{e}");

        let mut altered = good();
        altered.columns[1].1 = "text".to_owned();
        altered.columns[2].1 = "integer".to_owned();
        altered.columns.pop();
        let e = refusal(&altered);
        assert!(e.contains("invalid schema"), "{e}");
        assert!(e.contains("column gen is text, needs bigint"), "{e}");
        assert!(e.contains("column owner is integer, needs text"), "{e}");
        assert!(e.contains("column won is missing"), "{e}");

        let mut off = good();
        off.synchronous_commit = "off".to_owned();
        assert!(refusal(&off).contains("synchronous_commit is off"));

        let mut unindexed = good();
        unindexed.listing_index = false;
        let e = refusal(&unindexed);
        assert!(e.contains("no index for listing"), "{e}");
        assert!(e.contains("--create-table"), "{e}");
        assert!(
            e.contains(r#"CREATE INDEX IF NOT EXISTS "t_pk_c" ON "t" (pk COLLATE "C")"#),
            "{e}"
        );
    }
}
