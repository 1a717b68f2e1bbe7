//! Human units in config files: durations (`250ms`, `30s`, `10m`) and byte sizes (`64KiB`, `8MiB`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// A duration written as an integer and a unit: `ns`, `us`, `ms`, `s`, `m`, `h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub std::time::Duration);

/// A byte size written as an integer and an optional unit: `B`, `KiB`, `MiB`, `GiB`
/// (powers of 1024) or `KB`, `MB`, `GB` (powers of 1000). A bare integer is bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

/// Why a unit string did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnitError(String);

fn split_number(s: &str) -> Result<(u64, &str), UnitError> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits == 0 {
        return Err(UnitError(format!("`{s}` does not start with a whole number")));
    }
    let n =
        s[..digits].parse::<u64>().map_err(|_| UnitError(format!("`{s}`: number too large")))?;
    Ok((n, s[digits..].trim_start()))
}

impl FromStr for Duration {
    type Err = UnitError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (n, unit) = split_number(s)?;
        let nanos_per: u64 = match unit {
            "ns" => 1,
            "us" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(UnitError(format!("`{s}` needs a unit: ns, us, ms, s, m or h"))),
            other => {
                return Err(UnitError(format!(
                    "`{other}` in `{s}` is not a duration unit: use ns, us, ms, s, m or h"
                )));
            }
        };
        let nanos = n
            .checked_mul(nanos_per)
            .ok_or_else(|| UnitError(format!("`{s}` is too long a duration")))?;
        Ok(Duration(std::time::Duration::from_nanos(nanos)))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        for (unit, per) in [
            ("h", 3_600_000_000_000u128),
            ("m", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
            ("us", 1_000),
        ] {
            if nanos != 0 && nanos.is_multiple_of(per) {
                return write!(f, "{}{unit}", nanos / per);
            }
        }
        write!(f, "{nanos}ns")
    }
}

impl FromStr for ByteSize {
    type Err = UnitError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (n, unit) = split_number(s)?;
        let per: u64 = match unit {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "TiB" => 1 << 40,
            "KB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            "TB" => 1_000_000_000_000,
            other => {
                return Err(UnitError(format!(
                    "`{other}` in `{s}` is not a size unit: use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"
                )));
            }
        };
        n.checked_mul(per)
            .map(ByteSize)
            .ok_or_else(|| UnitError(format!("`{s}` is too large a size")))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, per) in
            [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        {
            if self.0 != 0 && self.0.is_multiple_of(per) {
                return write!(f, "{}{unit}", self.0 / per);
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// Accepts a string with a unit; an integer is accepted for byte sizes only.
macro_rules! deserialize_from_str {
    ($ty:ty, $expecting:literal, $int:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl serde::de::Visitor<'_> for Visitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<$ty, E> {
                        let int: fn(u64) -> Result<$ty, String> = $int;
                        int(v).map_err(E::custom)
                    }
                }
                d.deserialize_any(Visitor)
            }
        }
    };
}

deserialize_from_str!(Duration, "a duration such as `250ms` or `30s`", |v| Err(format!(
    "`{v}` needs a unit: ns, us, ms, s, m or h"
)));
deserialize_from_str!(ByteSize, "a size such as `4096`, `64KiB` or `8MiB`", |v| Ok(ByteSize(v)));

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn duration_parses_each_unit() {
        assert_eq!(
            "250ms".parse::<Duration>().map(|d| d.0),
            Ok(std::time::Duration::from_millis(250))
        );
        assert_eq!("2m".parse::<Duration>().map(|d| d.0), Ok(std::time::Duration::from_secs(120)));
        assert_eq!(
            "1500us".parse::<Duration>().map(|d| d.0),
            Ok(std::time::Duration::from_micros(1500))
        );
    }

    #[test]
    fn duration_rejects_missing_or_unknown_unit_and_overflow() {
        assert!("250".parse::<Duration>().is_err());
        assert!("5 parsecs".parse::<Duration>().is_err());
        assert!("ms".parse::<Duration>().is_err());
        assert!("-1s".parse::<Duration>().is_err());
        assert!("99999999999999999999h".parse::<Duration>().is_err());
        assert!("18446744073709551615h".parse::<Duration>().is_err());
    }

    #[test]
    fn byte_size_parses_binary_and_decimal_units() {
        assert_eq!("64KiB".parse::<ByteSize>(), Ok(ByteSize(65_536)));
        assert_eq!("8 MiB".parse::<ByteSize>(), Ok(ByteSize(8 << 20)));
        assert_eq!("2MB".parse::<ByteSize>(), Ok(ByteSize(2_000_000)));
        assert_eq!("17".parse::<ByteSize>(), Ok(ByteSize(17)));
        assert!("1 XB".parse::<ByteSize>().is_err());
        assert!("18446744073709551615GiB".parse::<ByteSize>().is_err());
    }

    proptest! {
        #[test]
        fn duration_display_round_trips(nanos in 0u64..u64::MAX / 4) {
            let d = Duration(std::time::Duration::from_nanos(nanos));
            prop_assert_eq!(d.to_string().parse::<Duration>(), Ok(d));
        }

        #[test]
        fn byte_size_display_round_trips(n in any::<u64>()) {
            prop_assert_eq!(ByteSize(n).to_string().parse::<ByteSize>(), Ok(ByteSize(n)));
        }
    }
}
