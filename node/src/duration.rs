//! Durations in configuration: `500ms`, `30s`, `5m`, `1h` (or several, as in `1h30m`), or an integer of seconds.
//!
//! Written here rather than taken from `humantime`, whose grammar is wider than the one the
//! configuration documents (`10 seconds`, `2 days`, `1y` of 365.25 days would all be
//! accepted) and whose formatter writes spaced compounds (`1m 30s`); this one reads
//! exactly the forms above and writes each value back in the one form `mew config show` prints.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// Parses a duration written as `<n><unit>`, repeated (`1h30m`), with units `ms`, `s`, `m` and
/// `h`, or as a bare integer of seconds.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let invalid = || {
        format!(
            "invalid duration `{text}`: expected a whole number with a unit (500ms, 30s, 5m, 1h) \
             or an integer of seconds"
        )
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(invalid());
    }
    if let Ok(seconds) = trimmed.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let mut total = Duration::ZERO;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(invalid());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let part = match &rest[..unit_len] {
            "ms" => Some(Duration::from_millis(number)),
            "s" => Some(Duration::from_secs(number)),
            "m" => number.checked_mul(60).map(Duration::from_secs),
            "h" => number.checked_mul(3600).map(Duration::from_secs),
            _ => return Err(invalid()),
        };
        rest = &rest[unit_len..];
        total = part
            .and_then(|part| total.checked_add(part))
            .ok_or_else(|| format!("duration `{text}` is too large"))?;
    }
    Ok(total)
}

/// Formats a duration the way [`parse`] reads it, in the largest unit that is exact.
pub(crate) fn format(duration: Duration) -> String {
    let millis = duration.as_millis();
    if !millis.is_multiple_of(1000) {
        return format!("{millis}ms");
    }
    let seconds = duration.as_secs();
    if seconds != 0 && seconds.is_multiple_of(3600) {
        format!("{}h", seconds / 3600)
    } else if seconds != 0 && seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

/// Serializes a duration as a string such as `30s`.
pub(crate) fn serialize<S: Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format(*duration))
}

/// Serializes an optional duration, `None` (no limit) as `0s`, the value that configures it.
pub(crate) fn serialize_optional<S: Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serialize(&duration.unwrap_or(Duration::ZERO), serializer)
}

/// Deserializes a duration from a string (see [`parse`]) or an integer of seconds.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    deserializer.deserialize_any(DurationVisitor)
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as 500ms, 30s, 5m, 1h, or an integer of seconds")
    }

    fn visit_u64<E: de::Error>(self, seconds: u64) -> Result<Duration, E> {
        Ok(Duration::from_secs(seconds))
    }

    fn visit_i64<E: de::Error>(self, seconds: i64) -> Result<Duration, E> {
        u64::try_from(seconds)
            .map(Duration::from_secs)
            .map_err(|_| E::custom(format!("invalid duration `{seconds}`: it is negative")))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        parse(text).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_plain_seconds() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse(" 2s "), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn rejects_malformed_durations() {
        for bad in ["", "s", "5x", "-1", "1.5s", "10 seconds", "5m3", "ms5"] {
            let error = parse(bad).unwrap_err();
            assert!(error.contains(&format!("`{bad}`")), "{bad}: {error}");
        }
        assert!(parse("99999999999999999999h").is_err());
        assert!(
            parse("9999999999999999999h")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn formats_in_the_largest_exact_unit() {
        assert_eq!(format(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format(Duration::from_secs(90)), "90s");
        assert_eq!(format(Duration::from_secs(1800)), "30m");
        assert_eq!(format(Duration::from_secs(7200)), "2h");
        assert_eq!(format(Duration::ZERO), "0s");
        for text in ["1500ms", "90s", "30m", "2h", "0s"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
    }
}
