//! The statements, written once per table: one per operation, each a single statement that
//! runs in its own implicit transaction under READ COMMITTED.

use unique_core::Error;

/// The comment that marks a table as this store's, with its schema version. A later schema
/// change bumps the number and migrates tables carrying an older one.
pub(crate) const SCHEMA_COMMENT: &str = "unique-store-postgres schema 1";

/// The prefix every version of [`SCHEMA_COMMENT`] shares.
pub(crate) const SCHEMA_COMMENT_PREFIX: &str = "unique-store-postgres schema ";

/// The statement texts for one table.
#[derive(Debug)]
pub(crate) struct Statements {
    /// The table name as a quoted identifier, for `to_regclass` and DDL.
    pub(crate) table: String,
    /// `$1` pk → `gen, owner, cid`.
    pub(crate) read: String,
    /// `$1` pks (text[]) → `pk, gen, owner, cid` of those that exist, one round trip for a
    /// batch.
    pub(crate) read_many: String,
    /// Claim forms: `$1` pk, `$2` owner, `$3` cid, `$4` the gen written; the pinned forms
    /// add `$5` the snapshot's gen, the double pin `$6` its cid. Each returns one row
    /// `(gen, written, owner, cid)`: the written gen, or (lost race) the record as the
    /// statement's snapshot saw it, or no row when there was none.
    pub(crate) first_login: String,
    pub(crate) double_pin: String,
    pub(crate) tombstone: String,
    /// `$1` pk, `$2` gen → rows affected.
    pub(crate) release: String,
    /// Creates the table and marks it (one implicit transaction).
    pub(crate) create: String,
}

impl Statements {
    /// The statements for `table` (`name` or `schema.name`, letters, digits, `_` and `-`).
    pub(crate) fn for_table(table: &str) -> Result<Self, Error> {
        let table = quote_table(table)?;
        // A lost race answers in the same round trip: when the write matched no row, the
        // second branch returns the record from the statement's snapshot.
        let lost_race_tail = format!(
            "SELECT w.gen, true, NULL::text, NULL::text FROM w \
             UNION ALL \
             SELECT c.gen, false, c.owner, c.cid FROM {table} c \
             WHERE c.pk = $1 AND NOT EXISTS (SELECT 1 FROM w)"
        );
        Ok(Self {
            read: format!("SELECT gen, owner, cid FROM {table} WHERE pk = $1"),
            read_many: format!("SELECT pk, gen, owner, cid FROM {table} WHERE pk = ANY($1)"),
            // A record at gen 0 reads as absent, so the first login takes it too (C3).
            first_login: format!(
                "WITH w AS (INSERT INTO {table} AS r (pk, gen, owner, cid) VALUES ($1, $4, $2, $3) \
                 ON CONFLICT (pk) DO UPDATE SET gen = excluded.gen, owner = excluded.owner, \
                 cid = excluded.cid WHERE r.gen = 0 RETURNING r.gen) {lost_race_tail}"
            ),
            double_pin: format!(
                "WITH w AS (UPDATE {table} SET gen = $4, owner = $2, cid = $3 \
                 WHERE pk = $1 AND gen = $5 AND cid = $6 RETURNING gen) {lost_race_tail}"
            ),
            tombstone: format!(
                "WITH w AS (UPDATE {table} SET gen = $4, owner = $2, cid = $3 \
                 WHERE pk = $1 AND gen = $5 AND cid IS NULL RETURNING gen) {lost_race_tail}"
            ),
            release: format!(
                "UPDATE {table} SET owner = '', cid = NULL WHERE pk = $1 AND gen = $2"
            ),
            create: format!(
                "CREATE TABLE {table} (pk text PRIMARY KEY, gen bigint NOT NULL, owner text, cid text); \
                 COMMENT ON TABLE {table} IS '{SCHEMA_COMMENT}'"
            ),
            table,
        })
    }
}

/// `name` or `schema.name` as quoted identifiers. Only letters, digits, `_` and `-` (up to
/// PostgreSQL's 63 bytes a part), so the name needs no escaping and cannot inject SQL.
fn quote_table(table: &str) -> Result<String, Error> {
    let parts: Vec<&str> = table.split('.').collect();
    let valid = |part: &str| {
        (1..=63).contains(&part.len())
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if parts.len() > 2 || !parts.iter().all(|p| valid(p)) {
        return Err(Error::invalid(
            "postgres table name must be NAME or SCHEMA.NAME of letters, digits, '_' and '-' \
             (at most 63 bytes each)",
        ));
    }
    Ok(parts
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_quoted_or_refused() {
        assert_eq!(quote_table("unique_records").unwrap(), "\"unique_records\"");
        assert_eq!(
            quote_table("ops.Sessions-1").unwrap(),
            "\"ops\".\"Sessions-1\""
        );
        for bad in ["", "a.b.c", "x\"y", "a b", "t;drop", ".t", &"x".repeat(64)] {
            assert!(quote_table(bad).unwrap_err().is_invalid_params(), "{bad}");
        }
    }
}
