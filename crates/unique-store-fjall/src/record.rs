//! One record's attributes and their bytes in the tree.
//!
//! A value is a format byte (1), `gen` as 8 bytes little-endian, then `owner`, `cid` and
//! `won`, each a presence byte (0 absent, 1 present) followed, when present, by its length
//! (4 bytes little-endian) and its UTF-8 bytes. A value this module did not write fails to
//! decode and reads as [`Error::Unavailable`], never as another record.

use unique_core::{Error, OwnerState, Pins, StoredOwner};

/// The first byte of every value this version writes.
const FORMAT: u8 = 1;

/// One record as stored; `None` is an absent attribute.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Record {
    pub generation: i64,
    pub owner: Option<String>,
    pub claim_id: Option<String>,
    pub won: Option<String>,
}

impl Record {
    /// What the record means (C6, C7, C9), through the core's one reading of a record.
    pub(crate) fn state(&self) -> OwnerState {
        OwnerState::from_record(
            self.generation,
            StoredOwner::from(self.owner.as_deref()),
            self.claim_id.clone(),
            self.won.as_deref(),
        )
    }

    /// Whether the record counts as a session (C13): a gen above 0 and an owner that is not
    /// empty (not decoded: a corrupt owner counts).
    pub(crate) fn holds_session(&self) -> bool {
        self.generation > 0 && self.owner.as_deref().is_some_and(|owner| !owner.is_empty())
    }

    /// The record a claim writes.
    pub(crate) fn claimed(owner: String, claim_id: String, generation: i64, won: String) -> Self {
        Self {
            generation,
            owner: Some(owner),
            claim_id: Some(claim_id),
            won: Some(won),
        }
    }

    /// What a fence compares.
    pub(crate) fn pins(&self) -> Pins<'_> {
        Pins {
            generation: self.generation,
            claim_id: self.claim_id.as_deref(),
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let text_len = |text: &Option<String>| text.as_ref().map_or(1, |t| 5 + t.len());
        let mut out = Vec::with_capacity(
            9 + text_len(&self.owner) + text_len(&self.claim_id) + text_len(&self.won),
        );
        out.push(FORMAT);
        out.extend_from_slice(&self.generation.to_le_bytes());
        for text in [&self.owner, &self.claim_id, &self.won] {
            match text {
                None => out.push(0),
                Some(text) => {
                    out.push(1);
                    // Owners, cids and recent-claim lists are bounded far below 4 GiB.
                    let len = u32::try_from(text.len()).unwrap_or(u32::MAX);
                    out.extend_from_slice(&len.to_le_bytes());
                    out.extend_from_slice(text.as_bytes());
                }
            }
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, Error> {
        let mut rest = bytes;
        let format = take(&mut rest, 1)?;
        if format != [FORMAT] {
            return Err(corrupt("an unknown format byte"));
        }
        let generation = take(&mut rest, 8)?;
        let generation = i64::from_le_bytes(generation.try_into().map_err(|_| corrupt("gen"))?);
        let mut text = || -> Result<Option<String>, Error> {
            match take(&mut rest, 1)? {
                [0] => Ok(None),
                [1] => {
                    let len = take(&mut rest, 4)?;
                    let len = u32::from_le_bytes(len.try_into().map_err(|_| corrupt("length"))?);
                    let len = usize::try_from(len).map_err(|_| corrupt("length"))?;
                    let raw = take(&mut rest, len)?;
                    String::from_utf8(raw.to_vec())
                        .map(Some)
                        .map_err(|_| corrupt("text that is not UTF-8"))
                }
                _ => Err(corrupt("a bad presence byte")),
            }
        };
        let record = Self {
            generation,
            owner: text()?,
            claim_id: text()?,
            won: text()?,
        };
        if !rest.is_empty() {
            return Err(corrupt("trailing bytes"));
        }
        Ok(record)
    }
}

/// The next `n` bytes of `rest`, or a decoding error when it is shorter.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], Error> {
    if rest.len() < n {
        return Err(corrupt("a value cut short"));
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn corrupt(what: &str) -> Error {
    Error::unavailable(format!("fjall store: a stored record has {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attribute_survives_encoding_absent_empty_or_set() {
        let records = [
            Record::default(),
            Record {
                generation: i64::MAX - 1,
                owner: Some(String::new()),
                claim_id: Some(String::new()),
                won: None,
            },
            Record {
                generation: 7,
                owner: Some(r#"{"routing":"é"}"#.into()),
                claim_id: Some("c-1".into()),
                won: Some("c-0 c-1".into()),
            },
        ];
        for record in records {
            assert_eq!(Record::decode(&record.encode()).unwrap(), record);
        }
    }

    #[test]
    fn bytes_it_did_not_write_are_unavailable_not_another_record() {
        let good = Record {
            generation: 3,
            owner: Some("x".into()),
            claim_id: None,
            won: None,
        }
        .encode();
        let mut trailing = good.clone();
        trailing.push(0);
        let mut not_utf8 = good.clone();
        let last = not_utf8.len() - 3;
        not_utf8[last] = 0xff;
        let mut bad_presence = good.clone();
        bad_presence[9] = 2;
        for bytes in [
            &[][..],
            &[2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..],
            &good[..good.len() - 1],
            &trailing,
            &not_utf8,
            &bad_presence,
        ] {
            assert!(
                matches!(Record::decode(bytes), Err(Error::Unavailable { .. })),
                "{bytes:?} decoded"
            );
        }
    }
}
