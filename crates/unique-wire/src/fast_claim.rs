//! A claim body read without serde, for the shape every client sends.
//!
//! `serde_json` reading a [`ClaimBody`] was about 3 800 instructions of a claim's 27 000 on the
//! memory store (callgrind); this scanner reads the same bodies in a fraction of that. It
//! accepts only what it can read exactly as serde would (strings without escapes or control
//! characters, integers without fraction or exponent that fit an `i64`, each field at most
//! once, no unknown field) and gives up on anything else, so [`parse_claim`] hands that body to
//! serde, which reads it or explains what is wrong. It never decides that a body is invalid.
//! An integral float (`"uid": 2.0`, `2e0`) is one of those bodies: serde reads it as the
//! integer (see `integer.rs`), and clients that send one are rare enough to take that path.
//! A property test holds it to serde's answer on valid, odd and broken bodies.
//!
//! [`parse_claim`]: crate::parse_claim

use std::borrow::Cow;

use crate::{ClaimBody, OwnerBody};

/// `text` as a claim body, or `None` when only serde can tell.
pub(crate) fn claim_body(text: &str) -> Option<ClaimBody<'_>> {
    let mut scan = Scan { text, at: 0 };
    let body = scan.claim()?;
    scan.skip_whitespace();
    (scan.at == text.len()).then_some(body)
}

struct Scan<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scan<'a> {
    fn claim(&mut self) -> Option<ClaimBody<'a>> {
        let (mut project, mut env, mut uid, mut slot, mut owner, mut claim_id) =
            (None, None, None, None, None, None);
        self.object(|scan, field| match field {
            "project" => set(&mut project, scan.string()?),
            "env" => set(&mut env, scan.string()?),
            "uid" => set(&mut uid, scan.integer()?),
            "slot" => set(&mut slot, scan.string()?),
            "owner" => set(&mut owner, scan.owner()?),
            "claim_id" => set(&mut claim_id, scan.string()?),
            _ => None,
        })?;
        Some(ClaimBody {
            project: Cow::Borrowed(project?),
            env: Cow::Borrowed(env?),
            uid: uid?,
            slot: Cow::Borrowed(slot.unwrap_or_default()),
            owner: owner?,
            claim_id: Cow::Borrowed(claim_id?),
            pool: None,
        })
    }

    fn owner(&mut self) -> Option<OwnerBody<'a>> {
        let (mut region, mut cluster, mut endpoint, mut node) = (None, None, None, None);
        self.object(|scan, field| match field {
            "region" => set(&mut region, scan.string()?),
            "cluster" => set(&mut cluster, scan.string()?),
            "endpoint" => set(&mut endpoint, scan.string()?),
            "node" => set(&mut node, scan.string()?),
            _ => None,
        })?;
        Some(OwnerBody {
            region: Cow::Borrowed(region.unwrap_or_default()),
            cluster: Cow::Borrowed(cluster.unwrap_or_default()),
            endpoint: Cow::Borrowed(endpoint.unwrap_or_default()),
            node: Cow::Borrowed(node.unwrap_or_default()),
        })
    }

    /// A non-empty object, each value read by `value` after its key and colon.
    fn object(&mut self, mut value: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        loop {
            let field = self.string()?;
            self.expect(b':')?;
            value(self, field)?;
            self.skip_whitespace();
            match self.next()? {
                b',' => {}
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// A string with no escape and no control character, borrowed from the body.
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let start = self.at;
        let rest = &self.text.as_bytes()[start..];
        let len = string_end(rest)?;
        if rest[len] != b'"' {
            return None;
        }
        self.at = start + len + 1;
        // Both ends are ASCII quotes of a valid UTF-8 text: char boundaries.
        self.text.get(start..start + len)
    }

    /// An integer as JSON writes it (no leading zero, no fraction or exponent, not `-0`) within
    /// `i64`.
    fn integer(&mut self) -> Option<i64> {
        self.skip_whitespace();
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let start = self.at;
        let mut magnitude: u64 = 0;
        while let Some(digit @ b'0'..=b'9') = self.peek() {
            magnitude = magnitude
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        let leading_zero = digits > 1 && self.text.as_bytes()[start] == b'0';
        if digits == 0 || leading_zero || matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        if negative {
            // serde_json reads `-0` as the float -0.0, which no `i64` field takes.
            if magnitude == 0 {
                return None;
            }
            0i64.checked_sub_unsigned(magnitude)
        } else {
            i64::try_from(magnitude).ok()
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_whitespace();
        (self.next()? == byte).then_some(())
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }
}

/// The index of the first byte of `bytes` that ends a plain string: a quote, a backslash or a
/// control character (below 0x20); `None` when there is none.
///
/// Eight bytes at a time (a claim body is mostly string bytes, and this scan was most of its
/// reading cost), then byte by byte for the last few.
fn string_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    /// A high bit set in each byte of the word that is zero, and perhaps in bytes after the
    /// first such one (a borrow), never before it: the lowest flag is exact.
    fn zero_bytes(word: u64) -> u64 {
        word.wrapping_sub(ONES) & !word & HIGHS
    }
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks of eight"));
        // Bytes below 0x20, equal to '"', equal to '\\', each with the same lowest-flag rule.
        let stops = (word.wrapping_sub(ONES * 0x20) & !word & HIGHS)
            | zero_bytes(word ^ (ONES * u64::from(b'"')))
            | zero_bytes(word ^ (ONES * u64::from(b'\\')));
        if stops != 0 {
            return Some(at + (stops.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = chunks.remainder();
    tail.iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|i| at + i)
}

/// Fills a field seen for the first time; a second sight is left to serde.
fn set<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn serde(text: &str) -> Option<ClaimBody<'_>> {
        serde_json::from_str(text).ok()
    }

    const TYPICAL: &str = r#"{"project":"bench","env":"prod","uid":42,"owner":{"region":"eu","cluster":"c1","endpoint":"http://127.0.0.1:9/kick"},"claim_id":"c-1"}"#;

    #[test]
    fn a_typical_body_is_read_here_as_serde_reads_it() {
        let fast = claim_body(TYPICAL).expect("the fast path reads the usual shape");
        assert_eq!(Some(fast), serde(TYPICAL));
    }

    #[test]
    fn what_it_cannot_read_exactly_is_left_to_serde() {
        for text in [
            // escapes, control characters
            r#"{"project":"a\"b","env":"e","uid":1,"owner":{"endpoint":"x"},"claim_id":"c"}"#,
            "{\"project\":\"a\tb\",\"env\":\"e\",\"uid\":1,\"owner\":{\"endpoint\":\"x\"},\"claim_id\":\"c\"}",
            // numbers serde refuses or reads otherwise
            r#"{"project":"p","env":"e","uid":01,"owner":{"endpoint":"x"},"claim_id":"c"}"#,
            r#"{"project":"p","env":"e","uid":1.0,"owner":{"endpoint":"x"},"claim_id":"c"}"#,
            r#"{"project":"p","env":"e","uid":1e3,"owner":{"endpoint":"x"},"claim_id":"c"}"#,
            r#"{"project":"p","env":"e","uid":9223372036854775808,"owner":{"endpoint":"x"},"claim_id":"c"}"#,
            r#"{"project":"p","env":"e","uid":-0,"owner":{"endpoint":"x"},"claim_id":"c"}"#,
            r#"{"project":"p","env":"e","uid":-,"owner":{"endpoint":"x"},"claim_id":"c"}"#,
            // duplicate, unknown, missing fields, wrong types, trailing data
            r#"{"project":"p","project":"q","env":"e","uid":1,"owner":{"endpoint":"x"},"claim_id":"c"}"#,
            r#"{"project":"p","env":"e","uid":1,"owner":{"endpoint":"x","zone":"z"},"claim_id":"c"}"#,
            r#"{"project":"p","env":"e","uid":"1","owner":{"endpoint":"x"},"claim_id":"c"}"#,
            r#"{"project":"p","env":"e","uid":1,"owner":{"endpoint":"x"},"claim_id":"c"} x"#,
            r#"{"project":"p","env":"e","uid":1,"owner":{"endpoint":"x"},"claim_id":"c",}"#,
            "{}",
            "",
        ] {
            assert_eq!(claim_body(text), None, "{text}");
        }
    }

    #[test]
    fn integral_floats_are_left_to_serde_which_reads_them_as_integers() {
        for (number, uid) in [("2.0", 2), ("4.2e1", 42), ("1E2", 100), ("7.000", 7)] {
            let text = format!(
                r#"{{"project":"p","env":"e","uid":{number},"owner":{{"endpoint":"x"}},"claim_id":"c"}}"#
            );
            assert_eq!(claim_body(&text), None, "{text}");
            let read =
                crate::parse_claim(text.as_bytes()).expect("an integral float is an integer");
            assert_eq!(read.uid, uid, "{text}");
            assert_eq!(Some(read), serde(&text));
        }
        let fraction =
            r#"{"project":"p","env":"e","uid":2.5,"owner":{"endpoint":"x"},"claim_id":"c"}"#;
        assert!(
            crate::parse_claim(fraction.as_bytes())
                .unwrap_err()
                .is_invalid_params()
        );
    }

    #[test]
    fn extremes_and_whitespace_read_as_serde_reads_them() {
        for text in [
            r#"{"project":"p","env":"e","uid":-9223372036854775808,"owner":{"endpoint":"x"},"claim_id":"c"}"#,
            r#"{"project":"p","env":"e","uid":9223372036854775807,"owner":{"endpoint":"x"},"claim_id":"c"}"#,
            r#"{"project":"p","env":"e","uid":0,"owner":{"endpoint":"x"},"claim_id":""}"#,
            " {\n\"claim_id\" : \"c\" ,\t\"owner\":{ \"endpoint\":\"é\" , \"cluster\":\"\" },\r\"uid\":0,\"env\":\"e\",\"project\":\"p\"} \n",
        ] {
            let fast = claim_body(text);
            assert!(fast.is_some(), "{text}");
            assert_eq!(fast, serde(text), "{text}");
        }
    }

    /// Bodies near the usual shape: every field present, in any order, now and then one doubled
    /// or unknown, strings with escapes or odd characters, numbers of every form, whitespace
    /// anywhere, something after the object.
    fn near_claims() -> impl Strategy<Value = String> {
        let ws = prop::sample::select(vec!["", " ", "\n", "\t ", "\r\n"]);
        let string = prop_oneof![
            8 => "[a-z0-9:/._-]{0,12}".prop_map(|s| format!("\"{s}\"")),
            1 => ".{0,6}".prop_map(|s| serde_json::to_string(&s).expect("a string")),
            1 => Just("\"a\\u0041\"".to_owned()),
            1 => Just("null".to_owned()),
            1 => Just("7".to_owned()),
        ];
        let number = prop_oneof![
            6 => any::<i64>().prop_map(|n| n.to_string()),
            1 => prop::sample::select(vec![
                "0", "-0", "01", "1.5", "2e3", "-", "9223372036854775808",
                "-9223372036854775809", "\"1\"", "18446744073709551616",
                "2.0", "-0.0", "4.2e1", "1E2", "7.000", "9.3e18", "-2.5", "1e400",
            ])
            .prop_map(str::to_owned),
        ];
        let object = |fields: Vec<(&str, String)>, ws: &str| {
            let inner: Vec<String> = fields
                .into_iter()
                .map(|(k, v)| format!("{ws}\"{k}\"{ws}:{ws}{v}{ws}"))
                .collect();
            format!("{{{}}}", inner.join(","))
        };
        let owner_field = (
            prop::sample::select(vec!["region", "cluster", "endpoint", "node", "zone"]),
            string.clone(),
        );
        let owner = (
            string.clone(),
            prop::collection::vec(owner_field, 0..3),
            ws.clone(),
        )
            .prop_flat_map(|(endpoint, mut others, ws)| {
                others.push(("endpoint", endpoint));
                (Just(others).prop_shuffle(), Just(ws))
            })
            .prop_map(move |(fields, ws)| object(fields, ws));
        let extra = (
            prop::sample::select(vec!["project", "uid", "claim_id", "slot", "slot", "other"]),
            string.clone(),
        );
        (
            (string.clone(), string.clone(), number, owner, string),
            prop::collection::vec(extra, 0..2),
            ws,
            prop::sample::select(vec!["", "", "", " ", "x", ","]),
        )
            .prop_flat_map(|((project, env, uid, owner, claim_id), extras, ws, tail)| {
                let mut fields = vec![
                    ("project", project),
                    ("env", env),
                    ("uid", uid),
                    ("owner", owner),
                    ("claim_id", claim_id),
                ];
                fields.extend(extras);
                (Just(fields).prop_shuffle(), Just(ws), Just(tail))
            })
            .prop_map(move |(fields, ws, tail)| format!("{ws}{}{tail}", object(fields, ws)))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn never_answers_otherwise_than_serde(text in near_claims()) {
            if let Some(fast) = claim_body(&text) {
                prop_assert_eq!(Some(fast), serde(&text), "{}", text);
            }
        }

        #[test]
        fn parse_claim_answers_as_serde_alone_does(text in near_claims()) {
            let both = crate::parse_claim(text.as_bytes()).map_err(|e| e.to_string());
            let serde_alone = crate::parse::<ClaimBody>(text.as_bytes()).map_err(|e| e.to_string());
            prop_assert_eq!(both, serde_alone, "{}", text);
        }

        #[test]
        fn reads_every_plain_claim_serde_reads(
            project in "[a-zA-Z0-9_-]{0,10}", env in "[a-z]{0,5}", uid in any::<i64>(),
            region in "[a-z0-9-]{0,6}", endpoint in "[a-z0-9:/.]{0,20}", claim_id in ".{0,8}",
            slot in "[a-z]{0,3}",
        ) {
            let body = ClaimBody {
                project: project.into(), env: env.into(), uid, slot: slot.into(),
                owner: OwnerBody { region: region.into(), cluster: Cow::Borrowed(""), endpoint: endpoint.into(), node: Cow::Borrowed("") },
                claim_id: claim_id.into(), pool: None,
            };
            let text = serde_json::to_string(&body).expect("serialises");
            let plain = !text.contains('\\');
            prop_assert_eq!(claim_body(&text).is_some(), plain, "{}", text);
            if plain {
                prop_assert_eq!(claim_body(&text), Some(body));
            }
        }

        #[test]
        fn string_end_finds_the_first_stop_byte_by_byte_would(
            bytes in proptest::collection::vec(
                prop_oneof![Just(b'"'), Just(b'\\'), 0_u8..0x20, 0x20_u8..=0xff, 0x20_u8..0x7f],
                0..40,
            ),
            skip in 0_usize..8,
        ) {
            let bytes = &bytes[skip.min(bytes.len())..];
            let by_byte = bytes.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
            prop_assert_eq!(string_end(bytes), by_byte, "{:?}", bytes);
        }

        #[test]
        fn arbitrary_text_never_gets_an_answer_serde_would_not_give(text in ".{0,80}") {
            if let Some(fast) = claim_body(&text) {
                prop_assert_eq!(Some(fast), serde(&text));
            }
        }
    }
}
