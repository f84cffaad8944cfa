//! The shared signed-kick test vector (`docs/kick-signature-vector.json`): the key, timestamp
//! and body it names sign to exactly its header, that header verifies, and the key's id is
//! its `key_id`. The Go client checks the same file (`clients/go/signature_test.go`), so
//! every implementation agrees byte for byte.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use unique_kick_signature::{DEFAULT_WINDOW, Rejection, SigningKeys};

const VECTOR: &str = include_str!("../../../docs/kick-signature-vector.json");

/// The value of `"name":` in the vector: a JSON string (with `\"` and `\\` escapes, all the
/// file uses) or an unsigned integer. A few lines here keep serde_json out of this crate,
/// which needs no JSON otherwise.
fn field(name: &str) -> String {
    let at = VECTOR
        .find(&format!("\"{name}\":"))
        .unwrap_or_else(|| panic!("the vector has no {name:?}"));
    let rest = VECTOR[at + name.len() + 3..].trim_start();
    if let Some(text) = rest.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return out,
                '\\' => match chars.next() {
                    Some(escaped @ ('"' | '\\' | '/')) => out.push(escaped),
                    other => panic!("escape {other:?} in {name:?} is not supported here"),
                },
                c => out.push(c),
            }
        }
        panic!("unterminated string in {name:?}");
    }
    rest.chars().take_while(char::is_ascii_digit).collect()
}

fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

#[test]
fn the_shared_vector_signs_to_its_header_and_verifies() {
    let keys = SigningKeys::new([field("key")]).unwrap();
    let timestamp: u64 = field("timestamp").parse().unwrap();
    let body = field("body");
    let header = field("header");
    assert_eq!(keys.sign(body.as_bytes(), at(timestamp)), header);
    assert_eq!(
        keys.verify(
            Some(&header),
            body.as_bytes(),
            at(timestamp),
            DEFAULT_WINDOW
        ),
        Ok(())
    );
    // One byte more and it is another body.
    let changed = format!("{body} ");
    assert_eq!(
        keys.verify(
            Some(&header),
            changed.as_bytes(),
            at(timestamp),
            DEFAULT_WINDOW
        ),
        Err(Rejection::BadSignature)
    );
    assert_eq!(keys.signing_id().to_string(), field("key_id"));
}
