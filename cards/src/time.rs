//! `Timestamp`: a point in time in the RFC 3339 form that `google.protobuf.Timestamp` uses in JSON.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, PrimitiveDateTime};

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

/// The ProtoJSON form: UTC with `Z`, and 0, 3, 6 or 9 fractional digits. (The calendar comes
/// from `time`; this layout of the fraction is ProtoJSON's own, which no RFC 3339 formatter
/// offers.) A time beyond the years `time` knows (±9999) is written as the nearest it knows.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.seconds.clamp(
            PrimitiveDateTime::MIN.assume_utc().unix_timestamp(),
            PrimitiveDateTime::MAX.assume_utc().unix_timestamp(),
        );
        let time =
            OffsetDateTime::from_unix_timestamp(seconds).unwrap_or(OffsetDateTime::UNIX_EPOCH);
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            time.year(),
            u8::from(time.month()),
            time.day(),
            time.hour(),
            time.minute(),
            time.second()
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

/// Any RFC 3339 time, with any offset (`time` parses it, leap seconds included).
impl FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let time = OffsetDateTime::parse(input, &Rfc3339).map_err(|_| TimestampError {
            input: input.to_owned(),
        })?;
        Ok(Self {
            seconds: time.unix_timestamp(),
            nanos: time.nanosecond(),
        })
    }
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

    #[test]
    fn leap_seconds_parse_and_far_times_still_format() {
        let leap: Timestamp = "2016-12-31T23:59:60Z".parse().unwrap();
        let before: Timestamp = "2016-12-31T23:59:59Z".parse().unwrap();
        assert_eq!(leap.unix_seconds(), before.unix_seconds());
        assert_eq!(
            Timestamp::from_unix(i64::MAX, 0).to_string(),
            "9999-12-31T23:59:59Z"
        );
        assert!(
            Timestamp::from_unix(i64::MIN, 0)
                .to_string()
                .starts_with("-9999-01-01")
        );
    }
}
