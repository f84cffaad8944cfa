//! The statements, written once per table: one per operation, each a single statement that
//! runs in its own implicit transaction under READ COMMITTED.

use tokio_postgres::types::Type;
use unique_core::Error;

/// The schema version this build writes and understands. A schema change bumps it and
/// migrates tables carrying an older one ([`Statements::migrate_from_1`]).
///
/// - 1: `pk`, `gen`, `owner`, `cid`.
/// - 2: adds `won` (text, NULL = absent), the recent claims (C9).
pub(crate) const SCHEMA_VERSION: u32 = 2;

/// The comment that marks a table as this store's, with its schema version.
pub(crate) const SCHEMA_COMMENT: &str = "unique-store-postgres schema 2";

/// The prefix every version of [`SCHEMA_COMMENT`] shares.
pub(crate) const SCHEMA_COMMENT_PREFIX: &str = "unique-store-postgres schema ";

/// The columns of the current schema and the type each must have, as `format_type` names
/// it. Columns beyond these are left alone.
pub(crate) const COLUMNS: [(&str, &str); 5] = [
    ("pk", "text"),
    ("gen", "bigint"),
    ("owner", "text"),
    ("cid", "text"),
    ("won", "text"),
];

/// A claim statement's parameters by position (`$1` first): the column each is written to
/// or compared with, and the type this store sends. A prepared statement whose parameter
/// types differ is refused naming the column (the table was altered). The first login takes
/// the first five, the tombstone six, the double pin all seven.
pub(crate) const CLAIM_PARAMS: [(&str, Type); 7] = [
    ("pk", Type::TEXT),
    ("owner", Type::TEXT),
    ("cid", Type::TEXT),
    ("gen", Type::INT8),
    ("won", Type::TEXT),
    ("gen", Type::INT8),
    ("cid", Type::TEXT),
];

/// The vacant claim's parameters (`Statements::vacant`), as [`CLAIM_PARAMS`]: pk, owner,
/// cid, the `won` of a gen-1 write, the new win's prefix `["<cid as JSON>",` and the
/// pattern of one stored win.
pub(crate) const VACANT_PARAMS: [(&str, Type); 6] = [
    ("pk", Type::TEXT),
    ("owner", Type::TEXT),
    ("cid", Type::TEXT),
    ("won", Type::TEXT),
    ("won", Type::TEXT),
    ("won", Type::TEXT),
];

/// One win as `RecentClaims::encode` writes it, `["<claim_id>",<gen>]`, in PostgreSQL's
/// regular-expression syntax: the claim_id escaped exactly as serde_json escapes (`\"`,
/// `\\`, `\b\t\n\f\r`, other control characters as lower-case `\u00xx`, nothing
/// else), the gen an integer of at most 18 digits (always an `i64`). A stored list that is
/// not exactly these wins joined by `,` inside `[]` is not taken by the vacant write: its
/// meaning is left to the read path.
pub(crate) const WIN_PATTERN: &str = r#"(\["(?:[^"\\\u0001-\u001f]|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))*",(?:0|-?[1-9][0-9]{0,17})\])"#;

/// The release's parameters, as [`CLAIM_PARAMS`].
pub(crate) const RELEASE_PARAMS: [(&str, Type); 2] = [("pk", Type::TEXT), ("gen", Type::INT8)];

/// The read's parameter, as [`CLAIM_PARAMS`].
pub(crate) const READ_PARAMS: [(&str, Type); 1] = [("pk", Type::TEXT)];

/// The batch read's parameter (an array of pks), as [`CLAIM_PARAMS`].
pub(crate) const READ_MANY_PARAMS: [(&str, Type); 1] = [("pk", Type::TEXT_ARRAY)];

/// The listing's parameters (the user's default key, then its slots' range), as
/// [`CLAIM_PARAMS`].
pub(crate) const LIST_PARAMS: [(&str, Type); 3] =
    [("pk", Type::TEXT), ("pk", Type::TEXT), ("pk", Type::TEXT)];

/// The suffix of the listing index's name: `<table>_pk_c`.
const LISTING_INDEX_SUFFIX: &str = "_pk_c";

/// The statement texts for one table.
#[derive(Debug)]
pub(crate) struct Statements {
    /// The table name as a quoted identifier, for `to_regclass` and DDL.
    pub(crate) table: String,
    /// `$1` pk → `gen, owner, cid, won`.
    pub(crate) read: String,
    /// `$1` pks (text[]) → `pk, gen, owner, cid, won` of those that exist, one round trip
    /// for a batch.
    pub(crate) read_many: String,
    /// `$1` a user's default key, `[$2, $3)` the byte range of its slots' keys
    /// (`UserKey::slot_range`) → `pk, gen, owner, cid, won` of every record of the user
    /// (C10). The range compares in the "C" collation, bytewise as the range is defined:
    /// the column's own collation is the database's default, under which a locale such as
    /// `en_US` ignores `#` and `$` and the range would miss slots. The listing index
    /// serves it; `pk = $1` is the primary key's lookup.
    pub(crate) list: String,
    /// The records holding a session (C13): one `count(*)`, a scan of the table.
    pub(crate) count_online: String,
    /// The listing index's name as a quoted identifier (in the table's schema).
    pub(crate) listing_index: String,
    /// Creates the listing index on an existing table: a btree on `pk COLLATE "C"`.
    pub(crate) create_listing_index: String,
    /// Claim forms: `$1` pk, `$2` owner, `$3` cid, `$4` the gen and `$5` the `won` list
    /// written; the pinned forms add `$6` the snapshot's gen, the double pin `$7` its cid
    /// ([`CLAIM_PARAMS`]). Each returns one row `(gen, written, owner, cid, won)`: the
    /// written gen, or (lost race) the record as the statement's snapshot saw it, or no
    /// row when there was none.
    pub(crate) first_login: String,
    pub(crate) double_pin: String,
    pub(crate) tombstone: String,
    /// The write-first claim (C11), [`VACANT_PARAMS`]: claims an absent record, one at gen
    /// 0, or a tombstone whose list does not hold the claim_id, in one statement; answers as
    /// the claim forms do.
    pub(crate) vacant: String,
    /// `$1` pk, `$2` gen → rows affected.
    pub(crate) release: String,
    /// Creates the table with its listing index and marks it (one implicit transaction).
    pub(crate) create: String,
    /// Migrates a schema-1 table to schema 2 (run inside the migration's transaction).
    pub(crate) migrate_from_1: String,
}

impl Statements {
    /// The statements for `table` (`name` or `schema.name`, letters, digits, `_` and `-`).
    pub(crate) fn for_table(table: &str) -> Result<Self, Error> {
        let quoted = quote_table(table)?;
        // After the check: the name is valid, so ASCII.
        let listing_index = quote_part(&listing_index_name(table));
        let table = quoted;
        let create_listing_index =
            format!("CREATE INDEX IF NOT EXISTS {listing_index} ON {table} (pk COLLATE \"C\")");
        // A lost race answers in the same round trip: when the write matched no row, the
        // second branch returns the record from the statement's snapshot. The first
        // branch's NULLs are untyped, so the columns take the table's types: a table whose
        // columns were altered still prepares, and the parameter check names the column.
        let lost_race_tail = format!(
            "SELECT w.gen, true, NULL, NULL, NULL FROM w \
             UNION ALL \
             SELECT c.gen, false, c.owner, c.cid, c.won FROM {table} c \
             WHERE c.pk = $1 AND NOT EXISTS (SELECT 1 FROM w)"
        );
        Ok(Self {
            read: format!("SELECT gen, owner, cid, won FROM {table} WHERE pk = $1"),
            read_many: format!("SELECT pk, gen, owner, cid, won FROM {table} WHERE pk = ANY($1)"),
            list: format!(
                "SELECT pk, gen, owner, cid, won FROM {table} WHERE pk = $1 \
                 OR (pk COLLATE \"C\" >= $2 AND pk COLLATE \"C\" < $3)"
            ),
            count_online: format!("SELECT count(*) FROM {table} WHERE gen > 0 AND owner <> ''"),
            // A record at gen 0 reads as absent, so the first login takes it too (C3).
            first_login: format!(
                "WITH w AS (INSERT INTO {table} AS r (pk, gen, owner, cid, won) \
                 VALUES ($1, $4, $2, $3, $5) \
                 ON CONFLICT (pk) DO UPDATE SET gen = excluded.gen, owner = excluded.owner, \
                 cid = excluded.cid, won = excluded.won WHERE r.gen = 0 RETURNING r.gen) \
                 {lost_race_tail}"
            ),
            double_pin: format!(
                "WITH w AS (UPDATE {table} SET gen = $4, owner = $2, cid = $3, won = $5 \
                 WHERE pk = $1 AND gen = $6 AND cid = $7 RETURNING gen) {lost_race_tail}"
            ),
            tombstone: format!(
                "WITH w AS (UPDATE {table} SET gen = $4, owner = $2, cid = $3, won = $5 \
                 WHERE pk = $1 AND gen = $6 AND cid IS NULL RETURNING gen) {lost_race_tail}"
            ),
            vacant: vacant(&table, &lost_race_tail),
            // Keeps `won`: a release changes neither the gen nor the list (C9).
            release: format!(
                "UPDATE {table} SET owner = '', cid = NULL WHERE pk = $1 AND gen = $2"
            ),
            create: format!(
                "CREATE TABLE {table} (pk text PRIMARY KEY, gen bigint NOT NULL, owner text, \
                 cid text, won text); \
                 {create_listing_index}; \
                 COMMENT ON TABLE {table} IS '{SCHEMA_COMMENT}'"
            ),
            migrate_from_1: format!(
                "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS won text; \
                 COMMENT ON TABLE {table} IS '{SCHEMA_COMMENT}'"
            ),
            table,
            listing_index,
            create_listing_index,
        })
    }
}

/// The write-first claim of `table` (C11). The `ON CONFLICT` branch sees the latest
/// committed row, locked, so the check and the write are one atomic step (C1, C4); its
/// condition is `VacantClaim::is_vacant` of that row and its write what `claim_cas` from it
/// writes. The row's `won` (`r.won`) is split into its wins by [`WIN_PATTERN`] and taken
/// only when the wins joined again are exactly the stored text, so the list the statement
/// reads is the list `RecentClaims::decode` reads: the last eight wins say whether the
/// claim_id is superseded, the last seven are kept before the new one.
fn vacant(table: &str, lost_race_tail: &str) -> String {
    // The row's wins, oldest first: one text per match of `$6`.
    let wins = "ARRAY(SELECT m.w[1] FROM regexp_matches(COALESCE(r.won, ''), $6, 'g') \
                WITH ORDINALITY AS m(w, n) ORDER BY m.n)";
    format!(
        "WITH w AS (INSERT INTO {table} AS r (pk, gen, owner, cid, won) \
         VALUES ($1, 1, $2, $3, $4) \
         ON CONFLICT (pk) DO UPDATE SET \
         gen = CASE WHEN r.gen = 0 THEN 1 ELSE r.gen + 1 END, \
         owner = excluded.owner, cid = excluded.cid, \
         won = CASE WHEN r.gen = 0 THEN excluded.won ELSE '[' || array_to_string(\
         ({wins})[greatest(cardinality({wins}) - 6, 1):] || ($5 || (r.gen + 1)::text || ']'), \
         ',') || ']' END \
         WHERE r.gen = 0 OR (r.gen > 0 AND r.gen < 9223372036854775806 \
         AND COALESCE(r.owner, '') = '' AND r.cid IS NULL \
         AND (COALESCE(r.won, '') = '' OR '[' || array_to_string({wins}, ',') || ']' = r.won) \
         AND NOT EXISTS (SELECT 1 FROM unnest(({wins})[greatest(cardinality({wins}) - 7, 1):]) e \
         WHERE left(e, length($5)) = $5)) \
         RETURNING r.gen) {lost_race_tail}"
    )
}

/// The listing index's name: the table's name (without its schema) and `_pk_c`, the name
/// cut so the whole stays within PostgreSQL's 63 bytes (it would cut it itself, silently).
/// `table` is a valid table name (ASCII), checked by [`quote_table`].
fn listing_index_name(table: &str) -> String {
    let name = table.rsplit('.').next().unwrap_or(table);
    let room = 63 - LISTING_INDEX_SUFFIX.len();
    format!("{}{LISTING_INDEX_SUFFIX}", &name[..name.len().min(room)])
}

fn quote_part(part: &str) -> String {
    format!("\"{part}\"")
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
        .map(|p| quote_part(p))
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

    #[test]
    fn the_listing_index_is_named_after_the_table_within_63_bytes() {
        let sql = Statements::for_table("ops.Sessions-1").unwrap();
        assert_eq!(sql.listing_index, "\"Sessions-1_pk_c\"");
        assert_eq!(
            sql.create_listing_index,
            "CREATE INDEX IF NOT EXISTS \"Sessions-1_pk_c\" ON \"ops\".\"Sessions-1\" \
             (pk COLLATE \"C\")"
        );
        let long = "t".repeat(63);
        let name = listing_index_name(&long);
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("_pk_c"), "{name}");
    }
}
