//! The `Unique-Signature` header: `t=<unix seconds>,v1=<hex>[,v1=<hex>…]`.

use crate::{MAX_SIGNATURES, Rejection};

/// Bytes of an HMAC-SHA256 tag.
pub(crate) const TAG_BYTES: usize = 32;

/// A parsed header.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parsed<'a> {
    /// The timestamp exactly as sent: it is what the signed message holds.
    pub(crate) timestamp: &'a str,
    /// The timestamp's value.
    pub(crate) seconds: u64,
    /// Every `v1` tag, in order.
    pub(crate) tags: Vec<[u8; TAG_BYTES]>,
}

/// Parses a header. Entries of another scheme (`v0=`, a later `v2=`) are ignored so a
/// sender can add one without breaking this receiver; everything else that does not fit
/// the shape is [`Rejection::Malformed`].
pub(crate) fn parse(header: &str) -> Result<Parsed<'_>, Rejection> {
    let mut timestamp = None;
    let mut tags = Vec::new();
    for entry in header.split(',') {
        let (name, value) = entry.trim().split_once('=').ok_or(Rejection::Malformed)?;
        match name {
            "t" => {
                if timestamp.is_some() {
                    return Err(Rejection::Malformed);
                }
                timestamp = Some((value, seconds(value)?));
            }
            "v1" => {
                if tags.len() == MAX_SIGNATURES {
                    return Err(Rejection::Malformed);
                }
                tags.push(decode_tag(value)?);
            }
            _ => {}
        }
    }
    let (timestamp, seconds) = timestamp.ok_or(Rejection::Malformed)?;
    if tags.is_empty() {
        return Err(Rejection::Malformed);
    }
    Ok(Parsed {
        timestamp,
        seconds,
        tags,
    })
}

/// The header for one tag.
pub(crate) fn format(timestamp: &str, tag: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(timestamp.len() + 6 + 2 * tag.len());
    out.push_str("t=");
    out.push_str(timestamp);
    out.push_str(",v1=");
    for byte in tag {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

/// Decimal digits only (no sign, no spaces), at most 20 of them, fitting a `u64`.
fn seconds(value: &str) -> Result<u64, Rejection> {
    if value.is_empty() || value.len() > 20 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Rejection::Malformed);
    }
    value.parse().map_err(|_| Rejection::Malformed)
}

/// Exactly 64 hex digits, either case.
fn decode_tag(value: &str) -> Result<[u8; TAG_BYTES], Rejection> {
    fn nibble(digit: u8) -> Result<u8, Rejection> {
        match digit {
            b'0'..=b'9' => Ok(digit - b'0'),
            b'a'..=b'f' => Ok(digit - b'a' + 10),
            b'A'..=b'F' => Ok(digit - b'A' + 10),
            _ => Err(Rejection::Malformed),
        }
    }
    let digits = value.as_bytes();
    if digits.len() != 2 * TAG_BYTES {
        return Err(Rejection::Malformed);
    }
    let mut tag = [0u8; TAG_BYTES];
    for (byte, pair) in tag.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Ok(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    fn tag_a() -> [u8; TAG_BYTES] {
        decode_tag(A).unwrap()
    }

    #[test]
    fn format_and_parse_round_trip() {
        let header = format("1700000000", &tag_a());
        assert_eq!(header, format!("t=1700000000,v1={A}"));
        assert_eq!(
            parse(&header),
            Ok(Parsed {
                timestamp: "1700000000",
                seconds: 1_700_000_000,
                tags: vec![tag_a()],
            })
        );
    }

    #[test]
    fn several_v1_entries_in_any_order_and_case_with_other_schemes_ignored() {
        let upper = A.to_ascii_uppercase();
        let other = "f".repeat(64);
        let header = format!("v1={upper}, v0=whatever ,t=5,v1={other},v2=later");
        let parsed = parse(&header).unwrap();
        assert_eq!(parsed.timestamp, "5");
        assert_eq!(parsed.tags, vec![tag_a(), [0xff; TAG_BYTES]]);
    }

    #[test]
    fn up_to_max_signatures_entries_parse_and_one_more_is_malformed() {
        let entries = |n: usize| {
            let mut header = "t=1".to_owned();
            for _ in 0..n {
                header.push_str(",v1=");
                header.push_str(A);
            }
            header
        };
        assert_eq!(parse(&entries(MAX_SIGNATURES)).unwrap().tags.len(), 8);
        assert_eq!(
            parse(&entries(MAX_SIGNATURES + 1)),
            Err(Rejection::Malformed)
        );
    }

    #[test]
    fn every_malformed_shape_is_refused() {
        let short = &A[..62];
        let odd = format!("{A}0");
        let not_hex = format!("{}zz", &A[..62]);
        let cases = [
            String::new(),
            "garbage".into(),
            format!("v1={A}"),                        // no t
            "t=1".into(),                             // no v1
            format!("t=1,t=2,v1={A}"),                // t twice
            format!("t=,v1={A}"),                     // empty t
            format!("t=-1,v1={A}"),                   // signed t
            format!("t=+1,v1={A}"),                   // signed t
            format!("t=1.5,v1={A}"),                  // fractional t
            format!("t= 1,v1={A}"),                   // space inside t
            format!("t=99999999999999999999,v1={A}"), // over u64
            format!("t=1,v1={short}"),                // short tag
            format!("t=1,v1={odd}"),                  // long tag
            format!("t=1,v1={not_hex}"),              // not hex
            format!("t=1,v1={A},v1="),                // one empty tag among good ones
            format!("t=1,v1={A},junk"),               // entry without '='
            format!("t=1;v1={A}"),                    // wrong separator
        ];
        for header in cases {
            assert_eq!(parse(&header), Err(Rejection::Malformed), "{header:?}");
        }
    }
}
