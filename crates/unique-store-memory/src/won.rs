//! A record's `won` list (C9) as the store keeps it: one small allocation of bytes.
//!
//! [`RecentClaims`] is the list the Arbiter reads and hands back, an `Arc` of wins each
//! holding an `Arc<str>`: for one win, two allocations (about 80 bytes with the allocator's
//! rounding) that would stay with the record for as long as the session is online. The store
//! keeps the same wins encoded instead, oldest first, each as its gen (a varint of the
//! `i64`'s bits), the claim_id's length (a varint) and the claim_id: 13 bytes for one win of
//! an 11-byte claim_id. A read builds the [`RecentClaims`] of its snapshot from them (none
//! for an absent record, so a first login's read allocates nothing), and a claim encodes its
//! new list straight from the snapshot's, without building one.
//!
//! The varints carry six bits a byte, `0x40` marking that more follow, so every byte of
//! theirs is ASCII and the whole encoding is one `str`: a claim_id reads back as a slice of
//! it (a boundary check) instead of a UTF-8 validation of its bytes, which a read of a full
//! list would otherwise make for every win, several times per claim.

use unique_core::{RECENT_CLAIMS, RecentClaims};

/// The encoded wins; empty (no allocation) for none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Won(Box<str>);

impl Won {
    /// The wins of `recent`, as they are.
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn from_recent(recent: &RecentClaims) -> Self {
        Self::encode(|| recent.iter(), recent.len())
    }

    /// `previous` followed by `claim_id` winning `generation`, the oldest dropped beyond
    /// [`RECENT_CLAIMS`]: the list [`RecentClaims::after_win`] gives, encoded.
    pub(crate) fn after_win(previous: &RecentClaims, claim_id: &str, generation: i64) -> Self {
        let keep = previous.len().min(RECENT_CLAIMS - 1);
        let wins = || {
            previous
                .iter()
                .skip(previous.len() - keep)
                .chain(std::iter::once((claim_id, generation)))
        };
        Self::encode(wins, keep + 1)
    }

    /// Encodes the `count` wins `wins` yields (each time it is called) into one allocation
    /// of exactly their size.
    fn encode<'a, I>(wins: impl Fn() -> I, count: usize) -> Self
    where
        I: Iterator<Item = (&'a str, i64)>,
    {
        if count == 0 {
            return Self::default();
        }
        let size: usize = wins()
            .map(|(claim_id, generation)| {
                varint_len(generation.cast_unsigned())
                    + varint_len(claim_id.len() as u64)
                    + claim_id.len()
            })
            .sum();
        let mut text = String::with_capacity(size);
        for (claim_id, generation) in wins() {
            push_varint(&mut text, generation.cast_unsigned());
            push_varint(&mut text, claim_id.len() as u64);
            text.push_str(claim_id);
        }
        debug_assert_eq!(text.len(), size);
        Self(text.into_boxed_str())
    }

    /// The wins, oldest first, as `(claim_id, gen)`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        let mut rest = &self.0[..];
        std::iter::from_fn(move || {
            let generation = take_varint(&mut rest)?.cast_signed();
            let length = usize::try_from(take_varint(&mut rest)?).ok()?;
            // A whole claim_id, so the split falls between two characters.
            let (claim_id, after) = rest.split_at_checked(length)?;
            rest = after;
            Some((claim_id, generation))
        })
    }

    /// The claim_id of the last win: a session's cid.
    pub(crate) fn last_claim_id(&self) -> Option<&str> {
        self.iter().last().map(|(claim_id, _)| claim_id)
    }

    /// The list a snapshot carries.
    pub(crate) fn to_recent(&self) -> RecentClaims {
        if self.0.is_empty() {
            return RecentClaims::new();
        }
        let mut wins = self.iter();
        match (wins.next(), wins.next()) {
            // The common case, a key won once since it was created: two allocations.
            (Some((claim_id, generation)), None) => {
                RecentClaims::new().after_win(claim_id, generation)
            }
            _ => RecentClaims::from_wins(self.iter()),
        }
    }
}

/// Data bits in each byte of a varint; the next bit marks that more bytes follow, and the
/// top bit stays clear, so every byte is ASCII.
const VARINT_BITS: u32 = 6;
const VARINT_MORE: u8 = 1 << VARINT_BITS;
const VARINT_DATA: u64 = (1 << VARINT_BITS) - 1;

/// Bytes of `value` as a varint.
fn varint_len(value: u64) -> usize {
    // Zero takes one byte.
    (64 - (value | 1).leading_zeros()).div_ceil(VARINT_BITS) as usize
}

fn push_varint(out: &mut String, mut value: u64) {
    loop {
        // The low data bits: the cast keeps exactly them.
        #[allow(clippy::cast_possible_truncation)]
        let low = (value & VARINT_DATA) as u8;
        value >>= VARINT_BITS;
        if value == 0 {
            out.push(char::from(low));
            return;
        }
        out.push(char::from(low | VARINT_MORE));
    }
}

/// Reads one varint off the front of `input`; `None` at the end (or if malformed, which
/// this module never writes).
fn take_varint(input: &mut &str) -> Option<u64> {
    let mut value = 0_u64;
    let most = 64_u32.div_ceil(VARINT_BITS) as usize;
    for (i, &byte) in input.as_bytes().iter().enumerate().take(most) {
        value |= (u64::from(byte) & VARINT_DATA) << (VARINT_BITS as usize * i);
        if byte & VARINT_MORE == 0 {
            // The byte is ASCII, so the rest starts on a character.
            *input = input.get(i + 1..)?;
            return Some(value);
        }
    }
    None
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn wins(won: &Won) -> Vec<(String, i64)> {
        won.iter().map(|(c, g)| (c.to_owned(), g)).collect()
    }

    #[test]
    fn varints_round_trip_at_every_length() {
        for value in [
            0,
            1,
            63,
            64,
            127,
            128,
            4_095,
            4_096,
            16_383,
            16_384,
            u64::from(u32::MAX),
            1 << 63,
            u64::MAX,
        ] {
            let mut text = String::new();
            push_varint(&mut text, value);
            assert_eq!(text.len(), varint_len(value), "{value}");
            assert!(text.is_ascii(), "{value}");
            let mut input = &text[..];
            assert_eq!(take_varint(&mut input), Some(value));
            assert!(input.is_empty());
        }
        assert_eq!(
            take_varint(&mut "\u{40}"),
            None,
            "more bytes promised, none follow"
        );
        assert_eq!(take_varint(&mut ""), None);
    }

    #[test]
    fn one_win_is_a_few_bytes() {
        let won = Won::after_win(&RecentClaims::new(), "r1c12-15625", 1);
        assert_eq!(won.0.len(), 13);
        assert_eq!(wins(&won), [("r1c12-15625".to_owned(), 1)]);
        assert_eq!(won.last_claim_id(), Some("r1c12-15625"));
        assert_eq!(
            won.to_recent(),
            RecentClaims::new().after_win("r1c12-15625", 1)
        );
        assert_eq!(Won::default().to_recent(), RecentClaims::new());
        assert_eq!(Won::default().last_claim_id(), None);
    }

    /// Encoded after each win, the list is the one `RecentClaims::after_win` gives,
    /// whatever the claim_ids and gens (empty, non-ASCII, negative, extreme).
    #[test]
    fn lists_read_back_as_recent_claims_make_them() {
        let claim_ids = ["", "a", "ünïcødé-☃", &"x".repeat(200), "b\"\\", "c"];
        let gens = [1, 0, -1, i64::MAX, i64::MIN, 300, 2, 3, 4, 5, 6, 7];
        let mut recent = RecentClaims::new();
        for (n, &generation) in gens.iter().enumerate() {
            let claim_id = claim_ids[n % claim_ids.len()];
            let won = Won::after_win(&recent, claim_id, generation);
            recent = recent.after_win(claim_id, generation);
            assert_eq!(won.to_recent(), recent, "after win {n}");
            assert_eq!(won, Won::from_recent(&recent));
            assert_eq!(won.last_claim_id(), Some(claim_id));
            assert!(won.iter().count() <= RECENT_CLAIMS);
        }
        assert_eq!(recent.len(), RECENT_CLAIMS);
    }
}
