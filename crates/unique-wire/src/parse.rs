//! Reading a request body into one of the request types.

use serde::Deserialize;
use unique_core::Error;

use crate::ClaimBody;

/// Parses a request body; on failure, an `InvalidParams` error that names the offending field
/// (`owner.endpoint: invalid type: …`), or says `malformed json: …` for bodies that are not
/// JSON (including bodies that are not UTF-8, and trailing data).
///
/// Valid bodies take the plain serde_json path. Tracking the field path costs an allocation
/// per key and about a quarter of a claim's CPU on the server, so it runs only to explain a
/// body that already failed (same input, same deserializer, so it fails the same way).
pub fn parse<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Result<T, Error> {
    // One UTF-8 check of the whole body, then `from_str`, which trusts it: cheaper
    // than `from_slice` checking each of a claim's fourteen strings on its own.
    let parsed = match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text).ok(),
        Err(_) => None,
    };
    match parsed {
        Some(value) => Ok(value),
        None => parse_tracking_path(body),
    }
}

/// Parses a `POST /v1/claim` body: [`parse`] with a faster reader for the usual shape (plain
/// strings, integers, each field once; see `fast_claim.rs`), which leaves every other body to
/// serde. The result and the errors are [`parse`]'s.
pub fn parse_claim(body: &[u8]) -> Result<ClaimBody<'_>, Error> {
    let fast = std::str::from_utf8(body)
        .ok()
        .and_then(crate::fast_claim::claim_body);
    match fast {
        Some(claim) => Ok(claim),
        None => parse(body),
    }
}

fn parse_tracking_path<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Result<T, Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            Error::invalid(format!("malformed json: {inner}"))
        } else if path == "." {
            // Root-level problems (a missing field) already name the field.
            Error::invalid(inner.to_string())
        } else {
            Error::invalid(format!("{path}: {inner}"))
        }
    })?;
    de.end()
        .map_err(|e| Error::invalid(format!("malformed json: {e}")))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KeyBody, ReleaseBody};

    fn message<'de, T: Deserialize<'de> + std::fmt::Debug>(body: &'de [u8]) -> String {
        match parse::<T>(body).unwrap_err() {
            Error::InvalidParams(message) => message,
            other => panic!("not invalid_params: {other}"),
        }
    }

    #[test]
    fn errors_name_the_field() {
        let m = message::<ClaimBody>(
            br#"{"project":"p","env":"e","uid":1,"owner":{"endpoint":5},"claim_id":"c"}"#,
        );
        assert!(m.starts_with("owner.endpoint: invalid type"), "{m}");
        let m = message::<ClaimBody>(
            br#"{"project":"p","env":"e","uid":1,"owner":{"endpoint":"x","zone":1},"claim_id":"c"}"#,
        );
        assert!(m.starts_with("owner.zone: unknown field `zone`"), "{m}");
        let m = message::<KeyBody>(br#"{"project":"p","uid":1}"#);
        assert!(m.contains("missing field `env`"), "{m}");
        let m = message::<ReleaseBody>(br#"{"project":"p","env":"e","uid":1,"gen":"1"}"#);
        assert!(m.starts_with("gen: invalid type"), "{m}");
    }

    #[test]
    fn a_claim_reads_alike_on_both_paths_and_fails_alike() {
        let plain = br#"{"project":"p","env":"e","uid":1,"owner":{"endpoint":"x"},"claim_id":"c"}"#;
        let escaped =
            br#"{"project":"p","env":"e","uid":1,"owner":{"endpoint":"x"},"claim_id":"c"}"#;
        assert_eq!(
            parse_claim(plain).unwrap(),
            parse::<ClaimBody>(plain).unwrap()
        );
        assert_eq!(parse_claim(escaped).unwrap(), parse_claim(plain).unwrap());
        for broken in [
            &br#"{"project":"p","env":"e","uid":1,"owner":{"endpoint":5},"claim_id":"c"}"#[..],
            b"\xff",
            b"{",
        ] {
            assert_eq!(
                parse_claim(broken).unwrap_err().to_string(),
                parse::<ClaimBody>(broken).unwrap_err().to_string()
            );
        }
    }

    #[test]
    fn malformed_json_says_so() {
        for body in [
            &b"{"[..],
            b"",
            b"not json",
            b"{\"project\":\"p\",\"env\":\"e\",\"uid\":1} trailing",
            b"\xff\xfe",
        ] {
            let m = message::<KeyBody>(body);
            assert!(m.starts_with("malformed json"), "{body:?}: {m}");
        }
    }
}
