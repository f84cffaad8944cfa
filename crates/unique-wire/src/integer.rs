//! Integer fields of request bodies, read as JSON Schema reads an `integer`.
//!
//! JSON has one number type, and JSON Schema calls any number with a zero fraction an
//! integer: `2`, `2.0` and `2e0` are all the integer 2 to a client that checks its request
//! against `docs/openapi.yaml`. So the server reads them alike (`#[serde(deserialize_with)]`
//! on every integer field of a request); a number with a fraction (`2.5`), or one outside the
//! field's type, is `invalid_params` as before. Answers are written as plain integers.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserializer;
use serde::de::{self, Unexpected, Visitor};

/// An integer type a request field holds.
trait Whole: Sized + TryFrom<i64> + TryFrom<u64> {
    /// What the field expects, for error messages.
    const EXPECTING: &'static str;
}

impl Whole for i64 {
    const EXPECTING: &'static str = "an integer in i64 range";
}

impl Whole for u64 {
    const EXPECTING: &'static str = "an integer in u64 range";
}

/// Reads an `i64` field from a JSON integer or an integral float (`2.0`, `-3e2`).
pub(crate) fn i64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    deserializer.deserialize_i64(WholeVisitor(PhantomData))
}

/// Reads a `u64` field from a JSON integer or an integral float (`2.0`, `15e3`).
pub(crate) fn u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    deserializer.deserialize_u64(WholeVisitor(PhantomData))
}

/// Reads an optional `u64` field (absent with `#[serde(default)]`; `null` is refused) as
/// [`u64`] reads it.
pub(crate) fn option_u64<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    u64(deserializer).map(Some)
}

struct WholeVisitor<T>(PhantomData<T>);

impl<T: Whole> Visitor<'_> for WholeVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        T::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        T::try_from(v).map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        // 2^63 and 2^64 are exact in f64; every integral float between them converts
        // exactly. Any fraction (and NaN, which JSON cannot carry) is not an integer.
        const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
        if v.fract() != 0.0 || !v.is_finite() {
            return Err(E::invalid_type(Unexpected::Float(v), &self));
        }
        // serde_json hands over an integer literal beyond i64 and u64 as the nearest float:
        // `-9223372036854775809` arrives as -2^63. So -2^63 itself is refused as a float
        // (it is taken written as an integer); every other float an overflowing literal can
        // become is out of range already.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        // Range-checked just before each cast.
        let whole = if v > -TWO_POW_63 && v < TWO_POW_63 {
            T::try_from(v as i64).ok()
        } else if (0.0..2.0 * TWO_POW_63).contains(&v) {
            T::try_from(v as u64).ok()
        } else {
            None
        };
        whole.ok_or_else(|| E::invalid_value(Unexpected::Float(v), &self))
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Both {
        #[serde(deserialize_with = "super::i64")]
        signed: i64,
        #[serde(deserialize_with = "super::u64")]
        unsigned: u64,
    }

    fn read(signed: &str, unsigned: &str) -> Result<(i64, u64), String> {
        let text = format!(r#"{{"signed":{signed},"unsigned":{unsigned}}}"#);
        serde_json::from_str::<Both>(&text)
            .map(|b| (b.signed, b.unsigned))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn integral_floats_read_as_integers() {
        assert_eq!(read("2", "2"), Ok((2, 2)));
        assert_eq!(read("2.0", "2.0"), Ok((2, 2)));
        assert_eq!(read("-3e2", "15e3"), Ok((-300, 15_000)));
        assert_eq!(read("-0", "-0.0"), Ok((0, 0)));
        assert_eq!(read("-0.0", "0e5"), Ok((0, 0)));
        assert_eq!(
            read("-9223372036854775808", "18446744073709551615"),
            Ok((i64::MIN, u64::MAX))
        );
        assert_eq!(
            read("-9.223372036854774784e18", "9.223372036854775808e18"),
            Ok((-9_223_372_036_854_774_784, 1 << 63))
        );
        assert_eq!(
            read("9223372036854774784.0", "1.8446744073709549568e19"),
            Ok((9_223_372_036_854_774_784, 18_446_744_073_709_549_568))
        ); // Read exactly (serde_json's float_roundtrip): its fast path reads this one as
        // 2166961282500504.75, a fraction (schemathesis drew it).
        assert_eq!(
            read("2166961282500505.0", "2166961282500505.0"),
            Ok((2_166_961_282_500_505, 2_166_961_282_500_505))
        );
    }

    #[test]
    fn fractions_and_out_of_range_numbers_are_refused() {
        for (signed, unsigned, needle) in [
            ("2.5", "1", "invalid type: floating point `2.5`"),
            ("1", "0.5", "invalid type: floating point `0.5`"),
            (
                "1",
                "-1",
                "invalid value: integer `-1`, expected an integer in u64",
            ),
            ("1", "-1.0", "invalid value: floating point `-1.0`"),
            (
                "9223372036854775808",
                "1",
                "invalid value: integer `9223372036854775808`",
            ),
            (
                "9.223372036854775808e18",
                "1",
                "invalid value: floating point",
            ),
            // Out of range, though serde_json hands it over as the float -2^63.
            ("-9223372036854775809", "1", "invalid value: floating point"),
            (
                "-9.223372036854775808e18",
                "1",
                "invalid value: floating point",
            ),
            (
                "1",
                "1.8446744073709551616e19",
                "invalid value: floating point",
            ),
            ("1e400", "1", "number out of range"),
            ("\"1\"", "1", "invalid type: string"),
            ("null", "1", "invalid type: null"),
        ] {
            let e = read(signed, unsigned).unwrap_err();
            assert!(e.contains(needle), "{signed} {unsigned}: {e}");
        }
    }
}
