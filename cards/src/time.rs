//! `Timestamp`: a point in time in the RFC 3339 form that `google.protobuf.Timestamp` uses in JSON.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Seconds and nanoseconds since the Unix epoch, UTC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    seconds: i64,
    nanos: u32,
}

/// Why a string is not an RFC 3339 timestamp.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid timestamp {input:?}: expected RFC 3339, like 2026-01-31T12:00:00Z")]
pub struct TimestampError {
    input: String,
}

impl Timestamp {
    /// The current time.
    pub fn now() -> Self {
        Self::from(SystemTime::now())
    }

    /// A timestamp from whole seconds and nanoseconds since the epoch.
    pub fn from_unix(seconds: i64, nanos: u32) -> Self {
        let carry = i64::from(nanos / 1_000_000_000);
        Self {
            seconds: seconds.saturating_add(carry),
            nanos: nanos % 1_000_000_000,
        }
    }

    /// Seconds since the epoch.
    pub fn unix_seconds(self) -> i64 {
        self.seconds
    }

    /// Nanoseconds within the second.
    pub fn subsec_nanos(self) -> u32 {
        self.nanos
    }

    /// Nanoseconds since the epoch, for storage and ordering.
    pub fn unix_nanos(self) -> i128 {
        i128::from(self.seconds) * 1_000_000_000 + i128::from(self.nanos)
    }

    /// The inverse of [`Timestamp::unix_nanos`].
    pub fn from_unix_nanos(nanos: i128) -> Self {
        let seconds = nanos.div_euclid(1_000_000_000);
        let sub = nanos.rem_euclid(1_000_000_000);
        Self {
            seconds: i64::try_from(seconds).unwrap_or(if seconds < 0 {
                i64::MIN
            } else {
                i64::MAX
            }),
            nanos: u32::try_from(sub).unwrap_or(0),
        }
    }
}

impl From<SystemTime> for Timestamp {
    fn from(time: SystemTime) -> Self {
        match time.duration_since(UNIX_EPOCH) {
            Ok(d) => Self::from_unix(
                i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                d.subsec_nanos(),
            ),
            Err(e) => {
                let d = e.duration();
                let nanos = -(i128::from(d.as_secs() as i64) * 1_000_000_000
                    + i128::from(d.subsec_nanos()));
                Self::from_unix_nanos(nanos)
            }
        }
    }
}

impl From<Timestamp> for SystemTime {
    fn from(ts: Timestamp) -> Self {
        if ts.seconds >= 0 {
            UNIX_EPOCH + Duration::new(ts.seconds.unsigned_abs(), ts.nanos)
        } else {
            UNIX_EPOCH - Duration::from_secs(ts.seconds.unsigned_abs())
                + Duration::from_nanos(u64::from(ts.nanos))
        }
    }
}

/// Days since 1970-01-01 for a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.seconds.div_euclid(86_400);
        let secs = self.seconds.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )?;
        match self.nanos {
            0 => {}
            n if n % 1_000_000 == 0 => write!(f, ".{:03}", n / 1_000_000)?,
            n if n % 1_000 == 0 => write!(f, ".{:06}", n / 1_000)?,
            n => write!(f, ".{n:09}")?,
        }
        f.write_str("Z")
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        parse_rfc3339(input.as_bytes()).ok_or_else(|| TimestampError {
            input: input.to_owned(),
        })
    }
}

fn digits(bytes: &[u8], at: usize, len: usize) -> Option<u32> {
    let slice = bytes.get(at..at + len)?;
    slice.iter().try_fold(0u32, |acc, b| {
        b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0'))
    })
}

fn parse_rfc3339(b: &[u8]) -> Option<Timestamp> {
    let year = i64::from(digits(b, 0, 4)?);
    let month = digits(b, 5, 2)?;
    let day = digits(b, 8, 2)?;
    let (hour, minute, second) = (digits(b, 11, 2)?, digits(b, 14, 2)?, digits(b, 17, 2)?);
    let separators_ok = b.get(4) == Some(&b'-')
        && b.get(7) == Some(&b'-')
        && matches!(b.get(10), Some(b'T' | b't' | b' '))
        && b.get(13) == Some(&b':')
        && b.get(16) == Some(&b':');
    if !separators_ok
        || !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut at = 19;
    let mut nanos = 0u32;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        let frac = &b[start..at];
        if frac.is_empty() || frac.len() > 9 {
            return None;
        }
        nanos = frac
            .iter()
            .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'))
            * 10u32.pow(9 - frac.len() as u32);
    }
    let offset_seconds: i64 = match b.get(at..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (digits(b, at + 1, 2)?, digits(b, at + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let offset = i64::from(h * 3600 + m * 60);
            if *sign == b'+' { offset } else { -offset }
        }
        _ => return None,
    };
    let second = second.min(59); // a leap second folds onto the one before it
    let seconds = days_from_civil(year, month, day) * 86_400
        + i64::from(hour * 3600 + minute * 60 + second)
        - offset_seconds;
    Some(Timestamp { seconds, nanos })
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_round_trip() {
        for (text, secs, nanos) in [
            ("1970-01-01T00:00:00Z", 0, 0),
            ("2026-11-30T04:08:57.123Z", 1_796_011_737, 123_000_000),
            ("2000-02-29T23:59:59.000001Z", 951_868_799, 1_000),
            ("1969-12-31T23:59:59.999999999Z", -1, 999_999_999),
        ] {
            let ts: Timestamp = text.parse().unwrap();
            assert_eq!(
                (ts.unix_seconds(), ts.subsec_nanos()),
                (secs, nanos),
                "{text}"
            );
            assert_eq!(ts.to_string(), text);
        }
    }

    #[test]
    fn applies_offsets_and_rejects_garbage() {
        let a: Timestamp = "2026-01-01T01:30:00+01:30".parse().unwrap();
        let b: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(a, b);
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00.Z",
            "yesterday",
        ] {
            assert!(bad.parse::<Timestamp>().is_err(), "{bad}");
        }
    }
}
