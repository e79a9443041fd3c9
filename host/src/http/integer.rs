//! A JSON integer as JSON Schema counts one: `4349` and `4349.0` alike
//! (2020-12: an integer is a number whose fractional part is zero). serde
//! reads `4349.0` as a float, which a plain `i64` field refuses, so every
//! integer of a request body is read with [`integer`] or
//! [`optional_integer`]; what the document allows, the server accepts.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, Unexpected, Visitor};

/// `#[serde(deserialize_with = "integer")]` on an `i64` field.
pub fn integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    deserializer.deserialize_any(Integral)
}

/// `#[serde(default, deserialize_with = "optional_integer")]` on an
/// `Option<i64>` field: absent or `null` is `None`.
pub fn optional_integer<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<i64>, D::Error> {
    deserializer.deserialize_option(OptionalIntegral)
}

struct Integral;

impl Visitor<'_> for Integral {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer")
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<i64, E> {
        Ok(value)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<i64, E> {
        i64::try_from(value).map_err(|_| E::custom(format!("{value} is out of range")))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<i64, E> {
        if value.fract() != 0.0 || !value.is_finite() {
            return Err(E::invalid_type(Unexpected::Float(value), &self));
        }
        // 2^63 is the first float past i64::MAX; -2^63 is i64::MIN itself.
        const I64_RANGE: std::ops::Range<f64> =
            -9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0;
        if !I64_RANGE.contains(&value) {
            return Err(E::custom(format!("{value} is out of range")));
        }
        Ok(value as i64)
    }
}

struct OptionalIntegral;

impl<'de> Visitor<'de> for OptionalIntegral {
    type Value = Option<i64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<i64>, D::Error> {
        integer(deserializer).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize, Debug)]
    struct Body {
        #[serde(deserialize_with = "integer")]
        count: i64,
        #[serde(default, deserialize_with = "optional_integer")]
        limit: Option<i64>,
    }

    fn read(json: &str) -> Result<Body, String> {
        serde_json::from_str(json).map_err(|err| err.to_string())
    }

    #[test]
    fn an_integral_number_is_an_integer_whatever_its_spelling() {
        for (json, count) in [
            (r#"{"count": 4349}"#, 4349),
            (r#"{"count": 4349.0}"#, 4349),
            (r#"{"count": 4.349e3}"#, 4349),
            (r#"{"count": -2}"#, -2),
            (r#"{"count": -9223372036854775808.0}"#, i64::MIN),
        ] {
            assert_eq!(read(json).unwrap().count, count, "{json}");
        }
        assert_eq!(
            read(r#"{"count": 1, "limit": 258134.0}"#).unwrap().limit,
            Some(258134)
        );
        assert_eq!(read(r#"{"count": 1, "limit": null}"#).unwrap().limit, None);
        assert_eq!(read(r#"{"count": 1}"#).unwrap().limit, None);
    }

    #[test]
    fn a_fraction_or_a_number_past_i64_is_refused_saying_so() {
        let fraction = read(r#"{"count": 1.5}"#).unwrap_err();
        assert!(fraction.contains("expected an integer"), "{fraction}");
        for json in [
            r#"{"count": 9223372036854775808}"#,
            r#"{"count": 9223372036854775808.0}"#,
            r#"{"count": 1e300}"#,
        ] {
            assert!(read(json).unwrap_err().contains("out of range"), "{json}");
        }
        assert!(read(r#"{"count": "3"}"#).is_err());
    }
}
