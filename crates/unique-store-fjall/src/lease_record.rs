//! Lease rows, node rows and the epoch counter as bytes in their keyspaces.
//!
//! A lease row is a format byte (2), `epoch`, `expires_ms` and `ttl_ms` (0 when unknown)
//! as 8 bytes little-endian each, then the node id and the token, each a length (2 bytes
//! little-endian) and its UTF-8 bytes. Format 1 (older builds) is the same without
//! `ttl_ms`, and still reads (its ttl unknown, D11). A node row is format byte 1,
//! `updated_ms` and `expires_ms`, then the address the same way. The epoch counter is 8 bytes little-endian. A value this module
//! did not write fails to decode as [`LeaseError::Corrupt`]: no lease is granted over it.

use unique_lease::{LeaseError, LeaseRow, NodeRow};

/// The first byte of every node row, and of lease rows older builds wrote.
const FORMAT: u8 = 1;

/// The first byte of every lease row this version writes (with its ttl).
const LEASE_FORMAT: u8 = 2;

/// The key of the epoch counter in the meta keyspace.
pub(crate) const LAST_EPOCH: &[u8] = b"last_epoch";

pub(crate) fn encode_lease(row: &LeaseRow) -> Vec<u8> {
    let mut out = Vec::with_capacity(29 + row.node_id.len() + row.lease_token.len());
    out.push(LEASE_FORMAT);
    out.extend_from_slice(&row.epoch.to_le_bytes());
    out.extend_from_slice(&row.expires_ms.to_le_bytes());
    out.extend_from_slice(&row.ttl_ms.unwrap_or(0).to_le_bytes());
    put_text(&mut out, &row.node_id);
    put_text(&mut out, &row.lease_token);
    out
}

pub(crate) fn decode_lease(bytes: &[u8]) -> Result<LeaseRow, LeaseError> {
    let (format, mut reader) = Reader::versioned(bytes)?;
    let epoch = reader.u64()?;
    let expires_ms = reader.u64()?;
    let ttl_ms = match format {
        FORMAT => None,
        _ => Some(reader.u64()?).filter(|ttl| *ttl > 0),
    };
    let row = LeaseRow {
        epoch,
        expires_ms,
        ttl_ms,
        node_id: reader.text()?,
        lease_token: reader.text()?,
    };
    reader.end()?;
    Ok(row)
}

pub(crate) fn encode_node(row: &NodeRow) -> Vec<u8> {
    let mut out = Vec::with_capacity(19 + row.grpc_addr.len());
    out.push(FORMAT);
    out.extend_from_slice(&row.updated_ms.to_le_bytes());
    out.extend_from_slice(&row.expires_ms.to_le_bytes());
    put_text(&mut out, &row.grpc_addr);
    out
}

pub(crate) fn decode_node(bytes: &[u8]) -> Result<NodeRow, LeaseError> {
    let mut reader = Reader::new(bytes)?;
    let row = NodeRow {
        updated_ms: reader.u64()?,
        expires_ms: reader.u64()?,
        grpc_addr: reader.text()?,
    };
    reader.end()?;
    Ok(row)
}

pub(crate) fn decode_epoch(bytes: &[u8]) -> Result<u64, LeaseError> {
    <[u8; 8]>::try_from(bytes)
        .map(u64::from_le_bytes)
        .map_err(|_| corrupt("the epoch counter"))
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    // Ids and tokens are checked to at most MAX_ID_LEN / MAX_TOKEN_LEN characters, far
    // below 2^16 bytes; addresses likewise (MAX_ADDR_LEN).
    let len = u16::try_from(text.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&text.as_bytes()[..usize::from(len)]);
}

fn corrupt(what: &str) -> LeaseError {
    LeaseError::Corrupt(format!(
        "fjall lease store: {what} is not a value this build wrote"
    ))
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Result<Self, LeaseError> {
        match bytes.split_first() {
            Some((&FORMAT, rest)) => Ok(Self { rest }),
            _ => Err(corrupt("a row")),
        }
    }

    /// A lease row's reader and its format byte (1 or 2).
    fn versioned(bytes: &'a [u8]) -> Result<(u8, Self), LeaseError> {
        match bytes.split_first() {
            Some((&format, rest)) if format == FORMAT || format == LEASE_FORMAT => {
                Ok((format, Self { rest }))
            }
            _ => Err(corrupt("a row")),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], LeaseError> {
        if self.rest.len() < n {
            return Err(corrupt("a row"));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, LeaseError> {
        let bytes = self.take(8)?;
        Ok(u64::from_le_bytes(
            bytes.try_into().map_err(|_| corrupt("a row"))?,
        ))
    }

    fn text(&mut self) -> Result<String, LeaseError> {
        let len = self.take(2)?;
        let len = u16::from_le_bytes([len[0], len[1]]);
        let bytes = self.take(usize::from(len))?;
        String::from_utf8(bytes.to_vec()).map_err(|_| corrupt("a row"))
    }

    fn end(&self) -> Result<(), LeaseError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(corrupt("a row"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_foreign_bytes_are_corrupt() {
        let lease = LeaseRow {
            node_id: "node-é".into(),
            lease_token: "token".into(),
            epoch: u64::MAX - 1,
            expires_ms: 1 << 51,
            ttl_ms: Some(30_000),
        };
        let bytes = encode_lease(&lease);
        assert_eq!(decode_lease(&bytes).unwrap(), lease);
        // A row an older build wrote (format 1, no ttl) still reads, its ttl unknown.
        let mut old = vec![1];
        old.extend_from_slice(&bytes[1..17]);
        old.extend_from_slice(&bytes[25..]);
        let unknown = LeaseRow {
            ttl_ms: None,
            ..lease.clone()
        };
        assert_eq!(decode_lease(&old).unwrap(), unknown);
        assert_eq!(decode_lease(&encode_lease(&unknown)).unwrap(), unknown);
        let node = NodeRow {
            grpc_addr: "127.0.0.1:9".into(),
            updated_ms: 5,
            expires_ms: 9,
        };
        assert_eq!(decode_node(&encode_node(&node)).unwrap(), node);
        for bad in [&b""[..], b"\x03", &bytes[..bytes.len() - 1], b"\x01\x00"] {
            assert!(decode_lease(bad).unwrap_err().is_corrupt());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_lease(&longer).unwrap_err().is_corrupt());
        assert_eq!(decode_epoch(&7u64.to_le_bytes()).unwrap(), 7);
        assert!(decode_epoch(b"7").unwrap_err().is_corrupt());
    }
}
