//! The last winning claims of a key: what tells a retry whose login was already
//! replaced from a new login (I4, C9).
//!
//! A record's `cid` names only the latest winner, so a retry of an older winning
//! claim_id would look new once another claim won, and would kick the newer
//! session. Each record therefore keeps, in its `won` attribute, the last
//! [`RECENT_CLAIMS`] winning `(claim_id, gen)` pairs; the Arbiter answers a
//! claim_id found there, and no longer current, as [`Error::Superseded`](crate::Error::Superseded).

use std::sync::Arc;

/// How many winning claims a record remembers.
///
/// The reference client (`unique-client-http`'s `Claimer`) retries one login for
/// at most 25 s. A retry is recognised as superseded as long as fewer than this
/// many other logins of the same key won since it did: for eight, a user would
/// have to log in on eight more devices inside those 25 s. Past that, the retry
/// is treated as a new login, like any other. Each entry costs at most a
/// claim_id (128 bytes) and a gen, so a record stays far below DynamoDB's item limit.
pub const RECENT_CLAIMS: usize = 8;

/// The last winning claims of one key, oldest first, at most [`RECENT_CLAIMS`].
///
/// Stored as the `won` attribute, the JSON text [`encode`](Self::encode) returns
/// (`[["claim-id",1],["other",2]]`). A store never builds it itself: it reads
/// the attribute through [`OwnerState::from_record`](crate::OwnerState::from_record)
/// and writes what [`OwnerState::won_after`](crate::OwnerState::won_after) returns.
///
/// Cheap to clone (one `Arc`): a store that keeps records decoded hands the same list to
/// every snapshot it reads, and a claim's new list shares the claim_ids it keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RecentClaims {
    wins: Arc<[Win]>,
}

/// One winning claim: its claim_id and the gen it wrote.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Win {
    claim_id: Arc<str>,
    generation: i64,
}

impl RecentClaims {
    /// No wins remembered.
    pub fn new() -> Self {
        Self::default()
    }

    /// From `(claim_id, gen)` pairs, oldest first; only the last [`RECENT_CLAIMS`] are kept.
    pub fn from_wins<I, S>(wins: I) -> Self
    where
        I: IntoIterator<Item = (S, i64)>,
        S: AsRef<str>,
    {
        let mut wins: Vec<Win> = wins
            .into_iter()
            .map(|(claim_id, generation)| Win {
                // Copied once, straight into its `Arc` (a `String` first would copy twice).
                claim_id: Arc::from(claim_id.as_ref()),
                generation,
            })
            .collect();
        let excess = wins.len().saturating_sub(RECENT_CLAIMS);
        wins.drain(..excess);
        Self { wins: wins.into() }
    }

    /// Decodes a stored `won` attribute. An absent, empty or unreadable one is no
    /// wins: a corrupt list must never make a key unclaimable, and the next claim
    /// rewrites it (losing only the superseded check of the claims it held).
    pub fn decode(raw: Option<&str>) -> Self {
        match raw {
            None | Some("") => Self::new(),
            Some(raw) => serde_json::from_str::<Vec<(String, i64)>>(raw)
                .map(Self::from_wins)
                .unwrap_or_default(),
        }
    }

    /// The stored form: JSON text, `[]` for none.
    pub fn encode(&self) -> String {
        let pairs: Vec<(&str, i64)> = self.iter().collect();
        // A list of (string, integer) pairs always serialises.
        serde_json::to_string(&pairs).unwrap_or_else(|_| "[]".to_owned())
    }

    /// The gen `claim_id` won, when it is remembered (the latest, if it won twice).
    pub fn won(&self, claim_id: &str) -> Option<i64> {
        self.wins
            .iter()
            .rev()
            .find(|win| &*win.claim_id == claim_id)
            .map(|win| win.generation)
    }

    /// These wins followed by `claim_id` winning `generation`, the oldest dropped
    /// beyond [`RECENT_CLAIMS`].
    #[must_use]
    pub fn after_win(&self, claim_id: &str, generation: i64) -> Self {
        let keep = self.wins.len().min(RECENT_CLAIMS - 1);
        let new = Win {
            claim_id: claim_id.into(),
            generation,
        };
        // The kept wins share their claim_ids; one allocation for the list (the
        // iterator's exact length lets `Arc<[_]>` allocate once).
        let wins = self.wins[self.wins.len() - keep..]
            .iter()
            .cloned()
            .chain(std::iter::once(new))
            .collect();
        Self { wins }
    }

    /// The wins, oldest first, as `(claim_id, gen)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.wins.iter().map(|win| (&*win.claim_id, win.generation))
    }

    /// How many wins are remembered.
    pub fn len(&self) -> usize {
        self.wins.len()
    }

    /// No wins remembered.
    pub fn is_empty(&self) -> bool {
        self.wins.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_order() {
        let wins = RecentClaims::new().after_win("a", 1).after_win("b\"\\", 2);
        assert_eq!(wins.encode(), r#"[["a",1],["b\"\\",2]]"#);
        assert_eq!(RecentClaims::decode(Some(&wins.encode())), wins);
        assert_eq!(wins.won("a"), Some(1));
        assert_eq!(wins.won("b\"\\"), Some(2));
        assert_eq!(wins.won("c"), None);
        assert_eq!(RecentClaims::new().encode(), "[]");
    }

    #[test]
    fn keeps_the_last_ones() {
        let mut wins = RecentClaims::new();
        for generation in 1..=20 {
            wins = wins.after_win(&format!("c{generation}"), generation);
            assert!(wins.len() <= RECENT_CLAIMS);
        }
        let kept: Vec<_> = wins.iter().map(|(_, g)| g).collect();
        assert_eq!(kept, (13..=20).collect::<Vec<_>>());
        assert_eq!(wins.won("c12"), None);
        assert_eq!(
            RecentClaims::from_wins((1..=20).map(|g| (format!("c{g}"), g))),
            wins
        );
    }

    #[test]
    fn a_claim_id_that_won_twice_reports_its_latest_gen() {
        let wins = RecentClaims::from_wins([("a", 1), ("a", 2)]);
        assert_eq!(wins.won("a"), Some(2));
    }

    #[test]
    fn unreadable_lists_are_empty() {
        for raw in [
            None,
            Some(""),
            Some("{"),
            Some("[1]"),
            Some(r#"[["a"]]"#),
            Some("null"),
        ] {
            assert!(RecentClaims::decode(raw).is_empty(), "{raw:?}");
        }
        // An over-long stored list keeps its newest entries.
        let long = RecentClaims::from_wins((1..=3).map(|g| (format!("c{g}"), g))).encode();
        assert_eq!(RecentClaims::decode(Some(&long)).len(), 3);
    }
}
