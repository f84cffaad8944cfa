//! The claim answer, written straight into bytes.
//!
//! A claim's answer is the one body on the hot path, and serde_json spent about
//! 1 800 instructions per claim on it (most in its string escaper). The shape stays
//! declared once, by `ClaimOutcome`'s serde derive: this writer produces exactly
//! serde_json's compact output for it, which the tests check against serde_json
//! itself, and strings that need escaping still go through serde_json.

use unique_core::{ClaimOutcome, Owner};

/// Appends `outcome` as serde_json's compact JSON would write it.
pub(crate) fn write_claim_outcome(out: &mut Vec<u8>, outcome: &ClaimOutcome) {
    out.extend_from_slice(b"{\"gen\":");
    write_i64(out, outcome.generation);
    out.extend_from_slice(b",\"prev_gen\":");
    write_i64(out, outcome.prev_generation);
    out.extend_from_slice(b",\"has_prev\":");
    write_bool(out, outcome.has_prev);
    out.extend_from_slice(b",\"prev_owner\":");
    match &outcome.prev_owner {
        Some(owner) => write_owner(out, owner),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"kicked\":");
    write_bool(out, outcome.kicked);
    out.extend_from_slice(b",\"kick_detail\":");
    match outcome.kick_detail {
        Some(detail) => {
            // The names are fixed lower-case ASCII: nothing to escape.
            out.push(b'"');
            out.extend_from_slice(detail.as_str().as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"replayed\":");
    write_bool(out, outcome.replayed);
    out.push(b'}');
}

/// `Owner` skips its empty fields when serialised.
fn write_owner(out: &mut Vec<u8>, owner: &Owner) {
    out.push(b'{');
    let mut first = true;
    for (name, value) in [
        ("region", &owner.region),
        ("cluster", &owner.cluster),
        ("endpoint", &owner.endpoint),
    ] {
        if value.is_empty() {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        write_str(out, value);
    }
    out.push(b'}');
}

fn write_str(out: &mut Vec<u8>, value: &str) {
    // serde_json escapes exactly these bytes; anything else is copied as is.
    let plain = value.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\');
    if plain {
        out.push(b'"');
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a Vec cannot fail.
        serde_json::to_writer(&mut *out, value).expect("a string serialises");
    }
}

fn write_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn write_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use unique_core::KickDetail;

    fn written(outcome: &ClaimOutcome) -> String {
        let mut out = Vec::new();
        write_claim_outcome(&mut out, outcome);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn a_first_login_reads_as_documented() {
        let outcome = ClaimOutcome {
            generation: 1,
            prev_generation: 0,
            has_prev: false,
            prev_owner: None,
            kicked: false,
            kick_detail: None,
            replayed: false,
        };
        assert_eq!(
            written(&outcome),
            r#"{"gen":1,"prev_gen":0,"has_prev":false,"prev_owner":null,"kicked":false,"kick_detail":null,"replayed":false}"#
        );
    }

    fn any_string() -> impl Strategy<Value = String> {
        // Plain text, the characters JSON escapes, and non-ASCII.
        prop_oneof![
            Just(String::new()),
            "[a-z0-9:/._-]{1,12}",
            "[\\x00-\\x1f\"\\\\a\u{7f}é\u{2028}😀]{1,6}",
        ]
    }

    fn any_outcome() -> impl Strategy<Value = ClaimOutcome> {
        let owner = proptest::option::of(
            (any_string(), any_string(), any_string())
                .prop_map(|(region, cluster, endpoint)| Owner::new(region, cluster, endpoint)),
        );
        let detail = proptest::option::of(proptest::sample::select(KickDetail::ALL.to_vec()));
        (
            any::<i64>(),
            any::<i64>(),
            any::<bool>(),
            owner,
            any::<bool>(),
            detail,
            any::<bool>(),
        )
            .prop_map(
                |(
                    generation,
                    prev_generation,
                    has_prev,
                    prev_owner,
                    kicked,
                    kick_detail,
                    replayed,
                )| {
                    ClaimOutcome {
                        generation,
                        prev_generation,
                        has_prev,
                        prev_owner,
                        kicked,
                        kick_detail,
                        replayed,
                    }
                },
            )
    }

    proptest! {
        /// The wire shape is the serde derive's: byte for byte what serde_json writes.
        #[test]
        fn identical_to_serde_json(outcome in any_outcome()) {
            let expected = serde_json::to_string(&outcome).expect("serialises");
            prop_assert_eq!(written(&outcome), expected);
        }
    }
}
