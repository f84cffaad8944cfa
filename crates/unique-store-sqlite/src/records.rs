//! The statements on the `records` table and how a row becomes an [`OwnerState`].
//!
//! Each write is ONE conditional statement whose condition is the fence of C3/C5.
//! A claim maps the core [`Fence`] to its statement and writes `gen`, `owner`,
//! `cid` and `won` together; the gen written is the fence's next gen, so a
//! statement that changed a row wrote exactly it (C4), and the `won` written is
//! the snapshot's recent claims followed by this one, which the row still holds
//! when the fence does (C9: only a claim changes the list, and every claim
//! changes the gen). A release keeps `won`. A failed condition is a statement that
//! changed no row, never an SQL error. (No `RETURNING`: SQLite buffers its rows
//! in a temporary B-tree opened and closed per statement, which was a third of
//! a claim's instructions on the writer.)

use rusqlite::types::ValueRef;
use std::collections::HashMap;
use std::sync::OnceLock;

use rusqlite::{Connection, OptionalExtension, Row, Statement, ToSql, params, params_from_iter};
use unique_core::{
    CasOutcome, Error, Fence, MAX_BATCH_KEYS, Owner, OwnerState, RecentClaims, StoredOwner, UserKey,
};

use crate::error::map_sqlite;

/// Strong read of one record (every read is a fresh WAL snapshot, C2).
pub(crate) const SELECT: &str = "SELECT gen, owner, cid, won FROM records WHERE pk = ?1";

/// Every record of one user (C10): `?1` its default slot's key, `[?2, ?3)` the byte range
/// of its other slots' keys (`UserKey::slot_range`). `pk` is `TEXT` with SQLite's default
/// `BINARY` collation, so `>=` and `<` compare bytes, as the range is defined, and both arms
/// are searches of the primary key (a `MULTI-INDEX OR`), never a scan of the table. `pk`
/// comes last so [`decode_row`] reads the same columns as [`SELECT`].
pub(crate) const SELECT_USER: &str = "SELECT gen, owner, cid, won, pk FROM records
     WHERE pk = ?1 OR (pk >= ?2 AND pk < ?3)";

// The claim statements bind a prefix of the same parameters: ?1 pk, ?2 owner,
// ?3 cid, ?4 the gen to write, ?5 won, ?6 the pinned gen, ?7 the pinned cid.

/// First login: the record must still not exist, or be stored at gen 0 (which
/// reads as absent). An upsert whose `WHERE` fails changes nothing.
const CLAIM_FIRST_LOGIN: &str = "INSERT INTO records (pk, gen, owner, cid, won)
     VALUES (?1, ?4, ?2, ?3, ?5)
     ON CONFLICT (pk) DO UPDATE SET gen = excluded.gen, owner = excluded.owner,
         cid = excluded.cid, won = excluded.won
     WHERE records.gen = 0";
/// Tombstone: same gen and no cid.
const CLAIM_TOMBSTONE: &str = "UPDATE records SET gen = ?4, owner = ?2, cid = ?3, won = ?5
     WHERE pk = ?1 AND gen = ?6 AND cid IS NULL";
/// Double pin: same gen and the same cid (`=` never matches a NULL cid, and
/// `''` is an ordinary value, so an empty cid is not mistaken for an absent one).
const CLAIM_DOUBLE_PIN: &str = "UPDATE records SET gen = ?4, owner = ?2, cid = ?3, won = ?5
     WHERE pk = ?1 AND gen = ?6 AND cid = ?7";
/// Fenced tombstone (C5): keeps gen and `won`, empties owner, removes cid.
const RELEASE: &str = "UPDATE records SET owner = '', cid = NULL WHERE pk = ?1 AND gen = ?2";

/// Which of the three claim statements checks a fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimForm {
    FirstLogin,
    Tombstone,
    DoublePin,
}

/// A claim's [`Fence`] as the statement that checks it and the values it pins,
/// owned so the write can cross to the writer thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FencedClaim {
    form: ClaimForm,
    /// `?4`: the fence's next gen.
    next_generation: i64,
    /// `?6`: the pinned gen (tombstone, double pin).
    pinned_generation: Option<i64>,
    /// `?7`: the pinned cid (double pin).
    pinned_claim_id: Option<String>,
}

impl From<Fence<'_>> for FencedClaim {
    fn from(fence: Fence<'_>) -> Self {
        let next_generation = fence.next_generation();
        let (form, pinned_generation, pinned_claim_id) = match fence {
            Fence::FirstLogin => (ClaimForm::FirstLogin, None, None),
            Fence::Tombstone { generation } => (ClaimForm::Tombstone, Some(generation), None),
            Fence::DoublePin {
                generation,
                claim_id,
            } => (
                ClaimForm::DoublePin,
                Some(generation),
                Some(claim_id.to_owned()),
            ),
        };
        Self {
            form,
            next_generation,
            pinned_generation,
            pinned_claim_id,
        }
    }
}

/// The writer's statements, prepared once for the life of its connection.
/// (`prepare_cached` hashes the SQL text and moves the statement in and out of
/// an LRU on every use: about 1 300 instructions per statement, measured.)
pub(crate) struct Statements<'c> {
    first_login: Statement<'c>,
    tombstone: Statement<'c>,
    double_pin: Statement<'c>,
    release: Statement<'c>,
    select: Statement<'c>,
    pub(crate) begin: Statement<'c>,
    pub(crate) commit: Statement<'c>,
}

impl<'c> Statements<'c> {
    pub(crate) fn prepare(conn: &'c Connection) -> rusqlite::Result<Self> {
        Ok(Self {
            first_login: conn.prepare(CLAIM_FIRST_LOGIN)?,
            tombstone: conn.prepare(CLAIM_TOMBSTONE)?,
            double_pin: conn.prepare(CLAIM_DOUBLE_PIN)?,
            release: conn.prepare(RELEASE)?,
            select: conn.prepare(SELECT)?,
            begin: conn.prepare("BEGIN IMMEDIATE")?,
            commit: conn.prepare("COMMIT")?,
        })
    }

    fn claim(&mut self, form: ClaimForm) -> &mut Statement<'c> {
        match form {
            ClaimForm::FirstLogin => &mut self.first_login,
            ClaimForm::Tombstone => &mut self.tombstone,
            ClaimForm::DoublePin => &mut self.double_pin,
        }
    }
}

/// One write the writer thread applies inside a batch transaction.
// Most writes are claims, so boxing the large variant would only add an
// allocation to nearly every write; the size difference is a few hundred bytes
// moved through the writer's queue.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// A fenced claim with the owner already encoded (never empty, C8).
    Claim {
        pk: String,
        owner: String,
        /// The `won` attribute written: the snapshot's recent claims followed by
        /// this claim at the fence's next gen (what `OwnerState::won_after` returns).
        won: String,
        /// `owner` and `won` decoded, when the record cache is on: what a read of
        /// the written row returns (no JSON parse on the writer). `None` with the
        /// cache off, so a claim copies them only when they are used.
        decoded: Option<Decoded>,
        claim_id: String,
        fence: FencedClaim,
    },
    /// A fenced release at `generation` (> 0).
    Release { pk: String, generation: i64 },
}

/// What a claim writes, decoded: the record cache's copy of the written row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// The `owner` written.
    pub(crate) owner: Owner,
    /// The `won` written.
    pub(crate) recent_claims: RecentClaims,
}

impl Write {
    /// A fenced claim of `owner`, already encoded as `encoded` (the store encodes
    /// before its fence check, as C8 orders the refusals), from a snapshot whose
    /// recent claims are `recent`: it writes those followed by this claim at the
    /// fence's next gen, what `OwnerState::won_after` returns (C9). With
    /// `keep_decoded` (the record cache is on) the written owner and list are kept
    /// decoded too.
    pub(crate) fn fenced_claim(
        pk: String,
        owner: &Owner,
        encoded: String,
        claim_id: String,
        fence: FencedClaim,
        recent: &RecentClaims,
        keep_decoded: bool,
    ) -> Self {
        let recent_claims = recent.after_win(&claim_id, fence.next_generation);
        Self::Claim {
            pk,
            owner: encoded,
            won: recent_claims.encode(),
            decoded: keep_decoded.then(|| Decoded {
                owner: owner.clone(),
                recent_claims,
            }),
            claim_id,
            fence,
        }
    }

    /// A claim of `owner` from a snapshot with no recent claims (tests).
    #[cfg(test)]
    pub(crate) fn claim(
        pk: String,
        owner: &Owner,
        claim_id: String,
        fence: FencedClaim,
    ) -> Result<Self, Error> {
        Self::claim_after(pk, owner, claim_id, fence, &RecentClaims::new())
    }

    /// A claim of `owner` from a snapshot whose recent claims are `recent`, the
    /// owner encoded here and kept decoded (tests).
    #[cfg(test)]
    pub(crate) fn claim_after(
        pk: String,
        owner: &Owner,
        claim_id: String,
        fence: FencedClaim,
        recent: &RecentClaims,
    ) -> Result<Self, Error> {
        let encoded = unique_core::encode_owner(owner)?;
        Ok(Self::fenced_claim(
            pk, owner, encoded, claim_id, fence, recent, true,
        ))
    }

    /// A release at `generation`.
    #[cfg(test)]
    pub(crate) fn release(pk: String, generation: i64) -> Self {
        Self::Release { pk, generation }
    }

    /// The partition key written.
    pub(crate) fn pk(&self) -> &str {
        match self {
            Self::Claim { pk, .. } | Self::Release { pk, .. } => pk,
        }
    }
}

/// The result of a write whose statement ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Written {
    /// What the claim's statement did.
    Claim(CasOutcome),
    /// Whether the release's condition held.
    Released(bool),
}

/// Applies one write on `conn` (inside the caller's transaction). A failed
/// claim condition is a lost race carrying the record as this transaction
/// sees it, so the Arbiter's next attempt needs no read.
pub(crate) fn apply(stmts: &mut Statements<'_>, write: &Write) -> Result<Written, Error> {
    match write {
        Write::Claim {
            pk,
            owner,
            won,
            claim_id,
            fence,
            ..
        } => {
            let pinned_claim_id = fence.pinned_claim_id.as_deref();
            let values: [&dyn ToSql; 7] = [
                pk,
                owner,
                claim_id,
                &fence.next_generation,
                won,
                &fence.pinned_generation,
                &pinned_claim_id,
            ];
            let changed = conditional(stmts.claim(fence.form), &values)
                .map_err(|e| map_sqlite("claim", e))?;
            Ok(Written::Claim(if changed {
                CasOutcome::Written {
                    generation: fence.next_generation,
                }
            } else {
                // Nothing was written either way; a record that cannot be read
                // back leaves the next attempt to read (and meet the fault) itself.
                CasOutcome::LostRace {
                    current: query_state(&mut stmts.select, pk).ok(),
                }
            }))
        }
        Write::Release { pk, generation } => {
            let changed = stmts
                .release
                .execute(rusqlite::params![pk, generation])
                .map_err(|e| map_sqlite("release", e))?;
            Ok(Written::Released(changed > 0))
        }
    }
}

/// Runs a conditional write with the prefix of `values` its statement binds;
/// whether its condition held (it changed the one row of its key).
fn conditional(stmt: &mut Statement<'_>, values: &[&dyn ToSql]) -> rusqlite::Result<bool> {
    let bound = stmt.parameter_count();
    Ok(stmt.execute(&values[..bound])? > 0)
}

/// The record of `pk` as `conn` sees it (C6, C7).
pub(crate) fn read_state(conn: &Connection, pk: &str) -> rusqlite::Result<OwnerState> {
    let mut select = conn.prepare_cached(SELECT)?;
    query_state(&mut select, pk)
}

/// The same through `SELECT`, already prepared.
fn query_state(select: &mut Statement<'_>, pk: &str) -> rusqlite::Result<OwnerState> {
    select
        .query_row([pk], decode_row)
        .optional()
        .map(Option::unwrap_or_default)
}

/// `SELECT` of up to [`MAX_BATCH_KEYS`] records: always that many placeholders, so it is one
/// cached statement whatever the batch size (unused ones repeat a key; `IN` ignores repeats).
/// `pk` comes last so [`decode_row`] reads the same columns as [`SELECT`].
fn select_many() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let placeholders: Vec<String> = (1..=MAX_BATCH_KEYS).map(|i| format!("?{i}")).collect();
        format!(
            "SELECT gen, owner, cid, won, pk FROM records WHERE pk IN ({})",
            placeholders.join(", ")
        )
    })
}

/// The records of `pks` as `conn` sees them, in the order of `pks` (one statement per
/// [`MAX_BATCH_KEYS`] keys; each record is read from the latest commit, C2).
pub(crate) fn read_states(conn: &Connection, pks: &[String]) -> rusqlite::Result<Vec<OwnerState>> {
    let mut found: HashMap<String, OwnerState> = HashMap::with_capacity(pks.len());
    let mut stmt = conn.prepare_cached(select_many())?;
    for chunk in pks.chunks(MAX_BATCH_KEYS) {
        let padded = (0..MAX_BATCH_KEYS).map(|i| chunk.get(i).unwrap_or(&chunk[0]));
        let mut rows = stmt.query(params_from_iter(padded))?;
        while let Some(row) = rows.next()? {
            found.insert(row.get(4)?, decode_row(row)?);
        }
    }
    Ok(pks
        .iter()
        .map(|pk| found.get(pk).cloned().unwrap_or_default())
        .collect())
}

/// Every record of `user` as `conn` sees it, with its partition key, in one statement
/// (one read transaction: every record from the same latest commit, C2).
pub(crate) fn read_user(
    conn: &Connection,
    user: &UserKey,
) -> rusqlite::Result<Vec<(String, OwnerState)>> {
    let (start, end) = user.slot_range();
    let mut stmt = conn.prepare_cached(SELECT_USER)?;
    let rows = stmt.query_map(params![user.to_string(), start, end], |row| {
        Ok((row.get(4)?, decode_row(row)?))
    })?;
    rows.collect()
}

fn decode_row(row: &Row<'_>) -> rusqlite::Result<OwnerState> {
    let generation: i64 = row.get(0)?;
    // A tombstone has an empty or NULL owner; anything that is not a JSON
    // object parseable as an Owner (including a non-text value) is corrupt.
    let owner = match row.get_ref(1)? {
        ValueRef::Null => StoredOwner::Absent,
        ValueRef::Text(raw) => {
            std::str::from_utf8(raw).map_or(StoredOwner::NotText, StoredOwner::Text)
        }
        _ => StoredOwner::NotText,
    };
    let claim_id: Option<String> = row.get(2)?;
    // An absent (NULL, or a row from before schema version 2), empty or
    // unreadable list is no recent claims, never an error (C9): a value of
    // another type or invalid UTF-8 reads as unreadable.
    let won = match row.get_ref(3)? {
        ValueRef::Text(raw) => std::str::from_utf8(raw).ok(),
        _ => None,
    };
    Ok(OwnerState::from_record(generation, owner, claim_id, won))
}

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::*;
    use crate::options::SqliteStoreBuilder;
    use crate::schema::open_writer;

    const OWNER: &str = r#"{"endpoint":"http://h/k"}"#;
    /// The `won` of every record `put` stores.
    const WON: &str = r#"[["old",1]]"#;

    fn stored_wins() -> RecentClaims {
        RecentClaims::decode(Some(WON))
    }

    fn conn(dir: &tempfile::TempDir) -> Connection {
        open_writer(&SqliteStoreBuilder::new(&dir.path().join("r.db"))).expect("open")
    }

    /// Stores `pk` as given, with [`WON`], unconditionally (`None` deletes it).
    fn put(conn: &Connection, pk: &str, record: Option<(i64, Option<&str>)>) {
        conn.execute("DELETE FROM records WHERE pk = ?1", [pk])
            .expect("delete");
        if let Some((generation, cid)) = record {
            conn.execute(
                "INSERT INTO records VALUES (?1, ?2, ?3, ?4, ?5)",
                params![pk, generation, OWNER, cid, WON],
            )
            .expect("insert");
        }
    }

    /// A claim from a snapshot whose recent claims are those `put` stores.
    fn claim(conn: &Connection, pk: &str, claim_id: &str, fence: Fence<'_>) -> CasOutcome {
        let owner = unique_core::decode_owner(OWNER).unwrap().unwrap();
        let write = Write::claim_after(
            pk.into(),
            &owner,
            claim_id.into(),
            fence.into(),
            &stored_wins(),
        )
        .unwrap();
        assert!(matches!(&write, Write::Claim { owner, .. } if owner == OWNER));
        let mut stmts = Statements::prepare(conn).expect("prepare");
        match apply(&mut stmts, &write).expect("the statement runs") {
            Written::Claim(outcome) => outcome,
            other @ Written::Released(_) => panic!("a claim answered {other:?}"),
        }
    }

    fn release(conn: &Connection, pk: &str, generation: i64) -> bool {
        let mut stmts = Statements::prepare(conn).expect("prepare");
        match apply(&mut stmts, &Write::release(pk.into(), generation)).expect("runs") {
            Written::Released(released) => released,
            other @ Written::Claim(_) => panic!("a release answered {other:?}"),
        }
    }

    /// A stored record: its gen and cid (`None`: no record).
    type Stored<'a> = Option<(i64, Option<&'a str>)>;

    /// Runs `fence`'s statement over each `losing` record, which must lose the
    /// race to it as stored (naming `why` when it does not), then over
    /// `holding`, which it must replace with its next gen and the new cid.
    fn check_statement(fence: Fence<'_>, losing: &[(Stored<'_>, &str)], holding: Stored<'_>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = conn(&dir);
        for &(stored, why) in losing {
            put(&conn, "k", stored);
            let current = stored.map_or_else(OwnerState::absent, |(generation, cid)| OwnerState {
                exists: true,
                generation,
                owner: unique_core::decode_owner(OWNER).expect("owner"),
                owner_corrupt: false,
                claim_id: cid.map(str::to_owned),
                recent_claims: stored_wins(),
            });
            assert_eq!(
                claim(&conn, "k", "n", fence),
                CasOutcome::LostRace {
                    current: Some(current.clone())
                },
                "{why}"
            );
            assert_eq!(
                read_state(&conn, "k").expect("read"),
                current,
                "{why}: unchanged"
            );
        }
        put(&conn, "k", holding);
        let generation = fence.next_generation();
        assert_eq!(
            claim(&conn, "k", "n", fence),
            CasOutcome::Written { generation }
        );
        let stored = read_state(&conn, "k").expect("read");
        assert_eq!(
            (stored.generation, stored.claim_id.as_deref()),
            (generation, Some("n"))
        );
        assert_eq!(
            stored.recent_claims,
            stored_wins().after_win("n", generation),
            "the claim wrote the snapshot's recent claims followed by its own"
        );
    }

    /// C9: a release keeps `won`; a claim appends to it; a row without one
    /// (NULL, or a value of another type) reads as no recent claims.
    #[test]
    fn a_release_keeps_the_recent_claims_and_odd_lists_read_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = conn(&dir);
        put(&conn, "k", Some((1, Some("old"))));
        assert!(release(&conn, "k", 1));
        let released = read_state(&conn, "k").expect("read");
        assert_eq!(
            (released.owner.as_ref(), released.claim_id.as_deref()),
            (None, None)
        );
        assert_eq!(released.recent_claims, stored_wins(), "kept by the release");
        assert_eq!(
            claim(&conn, "k", "n", Fence::Tombstone { generation: 1 }),
            CasOutcome::Written { generation: 2 }
        );
        assert_eq!(
            read_state(&conn, "k").expect("read").recent_claims,
            RecentClaims::from_wins([("old", 1), ("n", 2)])
        );
        for odd in ["NULL", "''", "'{'", "x'5b5d'", "7"] {
            conn.execute_batch(&format!("UPDATE records SET won = {odd} WHERE pk = 'k'"))
                .expect("update");
            let state = read_state(&conn, "k").expect("an odd list is not an error");
            assert!(state.recent_claims.is_empty(), "{odd}");
            assert_eq!(state.generation, 2, "{odd}");
            let batch = read_states(&conn, &["k".to_owned()]).expect("batch read");
            assert_eq!(batch, vec![state], "{odd}");
        }
    }

    #[test]
    fn first_login_inserts_only_when_no_record_exists() {
        check_statement(
            Fence::FirstLogin,
            &[
                (Some((3, None)), "a tombstone is a record"),
                (Some((1, Some("c"))), "a live record"),
            ],
            None,
        );
    }

    #[test]
    fn first_login_overwrites_a_gen_0_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = conn(&dir);
        put(&conn, "k", Some((0, Some("c"))));
        assert_eq!(read_state(&conn, "k").expect("read"), OwnerState::absent());
        assert_eq!(
            claim(&conn, "k", "n", Fence::FirstLogin),
            CasOutcome::Written { generation: 1 }
        );
        let stored = read_state(&conn, "k").expect("read");
        assert_eq!(
            (stored.generation, stored.claim_id.as_deref()),
            (1, Some("n"))
        );
    }

    #[test]
    fn tombstone_pins_gen_and_an_absent_cid() {
        check_statement(
            Fence::Tombstone { generation: 4 },
            &[
                (Some((4, Some(""))), "an empty cid is not an absent one"),
                (Some((5, None)), "another gen"),
                (None, "no record"),
            ],
            Some((4, None)),
        );
    }

    #[test]
    fn double_pin_pins_gen_and_the_same_cid() {
        check_statement(
            Fence::DoublePin {
                generation: 4,
                claim_id: "",
            },
            &[
                (Some((4, None)), "an absent cid is not an empty one"),
                (Some((4, Some("x"))), "another cid"),
                (Some((3, Some(""))), "another gen"),
                (None, "no record"),
            ],
            Some((4, Some(""))),
        );
    }

    #[test]
    fn the_written_gen_is_the_fences_up_to_the_last_one() {
        let last = i64::MAX - 2;
        let fence = Fence::DoublePin {
            generation: last,
            claim_id: "c",
        };
        assert_eq!(fence.next_generation(), i64::MAX - 1);
        check_statement(fence, &[], Some((last, Some("c"))));
    }

    /// C10: one statement reads the user's default key and every key of its slots' range,
    /// and no other user's key however close it sorts (a longer uid, another project or
    /// env, the user's own prefix without a slot).
    #[test]
    fn a_users_records_are_its_default_key_and_its_slots_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = conn(&dir);
        let user = UserKey::new("p", "e", 4);
        let mine = [
            "p#e#4",
            "p#e#4#a",
            "p#e#4#mobile",
            "p#e#4#$",
            "p#e#4#~~",
            "p#e#4#\u{10ffff}",
        ];
        let others = [
            "p#e#40", "p#e#41#a", "p#e#3#a", "p#e#-4", "p#ex#4#a", "px#e#4#a", "p#e", "p#e#4$",
        ];
        for (generation, pk) in (1..).zip(mine.iter().chain(&others)) {
            put(&conn, pk, Some((generation, Some("c"))));
        }
        let mut read: Vec<(String, i64)> = read_user(&conn, &user)
            .expect("read")
            .into_iter()
            .map(|(pk, state)| (pk, state.generation))
            .collect();
        read.sort();
        let mut expected: Vec<(String, i64)> = (1..)
            .zip(mine)
            .map(|(generation, pk)| (pk.to_owned(), generation))
            .collect();
        expected.sort();
        assert_eq!(read, expected);
    }

    /// C10 stays cheap on a file of any size: both arms of the listing are searches of
    /// the primary key, never a scan of the table.
    #[test]
    fn the_listing_searches_the_primary_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = conn(&dir);
        let mut stmt = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {SELECT_USER}"))
            .expect("explain");
        let plan: Vec<String> = stmt
            .query_map(params!["p#e#4", "p#e#4#", "p#e#4$"], |row| row.get(3))
            .expect("plan")
            .collect::<rusqlite::Result<_>>()
            .expect("plan rows");
        let searches = plan
            .iter()
            .filter(|step| step.starts_with("SEARCH records USING PRIMARY KEY"))
            .count();
        assert_eq!(searches, 2, "{plan:?}");
        assert!(
            !plan.iter().any(|step| step.starts_with("SCAN")),
            "{plan:?}"
        );
    }
}
