//! The statements on the `records` table and how a row becomes an [`OwnerState`].
//!
//! Each write is ONE conditional statement whose condition is the fence of C3/C5.
//! A claim writes `gen`, `owner` and `cid` together and returns the written gen
//! with `RETURNING` (C4); a failed condition is a statement that matched no row,
//! never an SQL error.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row, params};
use unique_core::{Error, OwnerState, decode_owner};

use crate::error::map_sqlite;

/// Strong read of one record (every read is a fresh WAL snapshot, C2).
pub(crate) const SELECT: &str = "SELECT gen, owner, cid FROM records WHERE pk = ?1";

/// First login: the record must still not exist.
const CLAIM_FIRST_LOGIN: &str = "INSERT INTO records (pk, gen, owner, cid) VALUES (?1, 1, ?2, ?3)
     ON CONFLICT (pk) DO NOTHING RETURNING gen";
/// Double pin: same gen and the same cid (`=` never matches a NULL cid, and
/// `''` is an ordinary value, so an empty cid is not mistaken for an absent one).
const CLAIM_DOUBLE_PIN: &str = "UPDATE records SET gen = gen + 1, owner = ?2, cid = ?3
     WHERE pk = ?1 AND gen = ?4 AND cid = ?5 RETURNING gen";
/// Tombstone: same gen and no cid.
const CLAIM_TOMBSTONE: &str = "UPDATE records SET gen = gen + 1, owner = ?2, cid = ?3
     WHERE pk = ?1 AND gen = ?4 AND cid IS NULL RETURNING gen";
/// Fenced tombstone (C5): keeps gen, empties owner, removes cid.
const RELEASE: &str = "UPDATE records SET owner = '', cid = NULL WHERE pk = ?1 AND gen = ?2";

/// The fence of a claim, chosen from the snapshot's claim_id, never its owner (C3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fence {
    /// The record must not exist.
    FirstLogin,
    /// `gen` and `cid` must equal the snapshot's.
    DoublePin { generation: i64, claim_id: String },
    /// `gen` must equal the snapshot's and `cid` must be absent.
    Tombstone { generation: i64 },
}

impl Fence {
    pub(crate) fn from_snapshot(snap: &OwnerState) -> Self {
        match (&snap.claim_id, snap.exists) {
            (_, false) => Self::FirstLogin,
            (Some(claim_id), true) => Self::DoublePin {
                generation: snap.generation,
                claim_id: claim_id.clone(),
            },
            (None, true) => Self::Tombstone {
                generation: snap.generation,
            },
        }
    }
}

/// One write the writer thread applies inside a batch transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// A fenced claim with the owner already encoded (never empty, C8).
    Claim {
        pk: String,
        owner: String,
        claim_id: String,
        fence: Fence,
    },
    /// A fenced release at `generation` (> 0).
    Release { pk: String, generation: i64 },
}

/// The result of a write whose statement ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// The claim's condition held; the gen it wrote.
    Claimed(i64),
    /// Whether the release's condition held.
    Released(bool),
}

/// Applies one write on `conn` (inside the caller's transaction). A failed
/// claim condition is `CasFailed` carrying the record as this transaction sees
/// it, so the Arbiter's next attempt needs no read.
pub(crate) fn apply(conn: &Connection, write: &Write) -> Result<Written, Error> {
    match write {
        Write::Claim {
            pk,
            owner,
            claim_id,
            fence,
        } => {
            let written = match fence {
                Fence::FirstLogin => {
                    returning_gen(conn, CLAIM_FIRST_LOGIN, params![pk, owner, claim_id])
                }
                Fence::DoublePin {
                    generation,
                    claim_id: pinned,
                } => returning_gen(
                    conn,
                    CLAIM_DOUBLE_PIN,
                    params![pk, owner, claim_id, generation, pinned],
                ),
                Fence::Tombstone { generation } => returning_gen(
                    conn,
                    CLAIM_TOMBSTONE,
                    params![pk, owner, claim_id, generation],
                ),
            }
            .map_err(|e| map_sqlite("claim", e))?;
            if let Some(generation) = written {
                return Ok(Written::Claimed(generation));
            }
            let current = read_state(conn, pk).map_err(|e| map_sqlite("read", e))?;
            Err(Error::cas_failed_with(current))
        }
        Write::Release { pk, generation } => {
            let changed = conn
                .prepare_cached(RELEASE)
                .and_then(|mut stmt| stmt.execute(params![pk, generation]))
                .map_err(|e| map_sqlite("release", e))?;
            Ok(Written::Released(changed > 0))
        }
    }
}

/// Runs a conditional write; `None` when its condition matched no row. All the
/// changes of a `RETURNING` statement happen on its first step.
fn returning_gen(
    conn: &Connection,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached(sql)?
        .query_row(params, |row| row.get(0))
        .optional()
}

/// The record of `pk` as `conn` sees it (C6, C7).
pub(crate) fn read_state(conn: &Connection, pk: &str) -> rusqlite::Result<OwnerState> {
    conn.prepare_cached(SELECT)?
        .query_row([pk], decode_row)
        .optional()
        .map(Option::unwrap_or_default)
}

fn decode_row(row: &Row<'_>) -> rusqlite::Result<OwnerState> {
    let generation: i64 = row.get(0)?;
    // A tombstone has an empty or NULL owner; anything that is not a JSON
    // object parseable as an Owner (including a non-text value) is corrupt.
    let (owner, owner_corrupt) = match row.get_ref(1)? {
        ValueRef::Null => (None, false),
        ValueRef::Text(raw) => match std::str::from_utf8(raw).map(decode_owner) {
            Ok(Ok(owner)) => (owner, false),
            _ => (None, true),
        },
        _ => (None, true),
    };
    let claim_id: Option<String> = row.get(2)?;
    Ok(OwnerState {
        exists: true,
        generation,
        owner,
        owner_corrupt,
        claim_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_is_chosen_by_claim_id_not_owner() {
        assert_eq!(
            Fence::from_snapshot(&OwnerState::absent()),
            Fence::FirstLogin
        );
        let corrupt = OwnerState {
            exists: true,
            generation: 4,
            owner: None,
            owner_corrupt: true,
            claim_id: Some("c".into()),
        };
        assert_eq!(
            Fence::from_snapshot(&corrupt),
            Fence::DoublePin {
                generation: 4,
                claim_id: "c".into()
            }
        );
        let empty_cid = OwnerState {
            claim_id: Some(String::new()),
            ..corrupt.clone()
        };
        assert_eq!(
            Fence::from_snapshot(&empty_cid),
            Fence::DoublePin {
                generation: 4,
                claim_id: String::new()
            }
        );
        let tombstone = OwnerState {
            exists: true,
            generation: 9,
            ..OwnerState::absent()
        };
        assert_eq!(
            Fence::from_snapshot(&tombstone),
            Fence::Tombstone { generation: 9 }
        );
    }
}
