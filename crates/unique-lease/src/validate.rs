//! Input validation shared by every backend, so they all refuse the same inputs
//! with the same messages before touching storage.
//!
//! Lengths count characters (Unicode scalar values), as the HTTP routes' schema does. A
//! character is at most 4 bytes of UTF-8, so an id is at most 1 KiB: within every backend's
//! key limit (DynamoDB's 2 KiB partition key with its `lease#` prefix, PostgreSQL's btree
//! entry of about 2.7 KiB; SQLite and Redis have none that low).

use crate::error::LeaseError;

/// Longest accepted `room_id` / `node_id`, in characters (at most 4 × as many bytes).
pub const MAX_ID_LEN: usize = 256;

/// Longest accepted lease token, in characters (tokens this crate issues are 36 ASCII).
pub const MAX_TOKEN_LEN: usize = 128;

/// Longest accepted node address, in characters.
pub const MAX_ADDR_LEN: usize = 1024;

/// An id: 1..=`max` characters (at most `MAX_ID_LEN`), no control characters.
pub(crate) fn id(value: &str, what: &str, max: usize) -> Result<(), LeaseError> {
    text(value, what, max.min(MAX_ID_LEN))
}

/// A lease token: 1..=`MAX_TOKEN_LEN` characters, no control characters.
pub(crate) fn token(value: &str) -> Result<(), LeaseError> {
    text(value, "lease_token", MAX_TOKEN_LEN)
}

/// A node address: 1..=`MAX_ADDR_LEN` characters, no control characters or whitespace.
pub(crate) fn addr(value: &str) -> Result<(), LeaseError> {
    text(value, "grpc_addr", MAX_ADDR_LEN)?;
    if value.chars().any(char::is_whitespace) {
        return Err(LeaseError::invalid("grpc_addr must not contain whitespace"));
    }
    Ok(())
}

fn text(value: &str, what: &str, max: usize) -> Result<(), LeaseError> {
    if value.is_empty() {
        return Err(LeaseError::invalid(format!("{what} must not be empty")));
    }
    // A text has at most as many characters as bytes: only a long one needs counting.
    if value.len() > max && value.chars().count() > max {
        return Err(LeaseError::invalid(format!(
            "{what} is longer than {max} characters"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(LeaseError::invalid(format!(
            "{what} must not contain control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_default(value: &str, what: &str) -> Result<(), LeaseError> {
        id(value, what, MAX_ID_LEN)
    }

    #[test]
    fn ids_at_and_past_each_boundary() {
        assert!(id_default("r", "room_id").is_ok());
        assert!(id_default(&"x".repeat(MAX_ID_LEN), "room_id").is_ok());
        let long = id_default(&"x".repeat(MAX_ID_LEN + 1), "room_id").unwrap_err();
        assert_eq!(
            long.to_string(),
            "invalid params: room_id is longer than 256 characters"
        );
        // Characters, not bytes: the longest id of four-byte characters passes.
        assert!(id_default(&"\u{1F600}".repeat(MAX_ID_LEN), "room_id").is_ok());
        assert!(
            id_default(&"é".repeat(MAX_ID_LEN + 1), "room_id")
                .unwrap_err()
                .is_invalid_params()
        );
        let empty = id_default("", "node_id").unwrap_err();
        assert_eq!(
            empty.to_string(),
            "invalid params: node_id must not be empty"
        );
        for bad in ["a\nb", "a\0", "\u{7f}", "a\u{85}b"] {
            assert!(
                id_default(bad, "room_id").unwrap_err().is_invalid_params(),
                "{bad:?}"
            );
        }
        assert!(
            id_default("room:42/é", "room_id").is_ok(),
            "separators and non-ascii are fine"
        );
    }

    #[test]
    fn tokens_and_addresses() {
        assert!(token("").unwrap_err().is_invalid_params());
        assert!(
            token(&"t".repeat(MAX_TOKEN_LEN + 1))
                .unwrap_err()
                .is_invalid_params()
        );
        assert!(token(&"t".repeat(MAX_TOKEN_LEN)).is_ok());
        assert!(addr("10.0.0.7:7000").is_ok());
        assert!(addr("").unwrap_err().is_invalid_params());
        assert!(addr("10.0.0.7 :7000").unwrap_err().is_invalid_params());
        assert!(
            addr(&"a".repeat(MAX_ADDR_LEN + 1))
                .unwrap_err()
                .is_invalid_params()
        );
    }
}
