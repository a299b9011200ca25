//! The duration after `@every`, in Go's `time.ParseDuration` syntax (`90s`, `1h30m`, `1.5h`,
//! `500ms`), because upstream reads it with exactly that function and existing Plans use it.
//!
//! The parsing is the workspace's one Go-duration parser (`goduration`, step for step Go's);
//! this module words its failures for a Plan's author. Invariants: a unit is required after every
//! number (only a bare `0` may omit it); the accepted units are `ns`, `us`, `µs`, `μs`, `ms`, `s`,
//! `m` and `h`; any value outside Go's `time.Duration` range (±2^63 ns, about 292 years) is an
//! error, as it is in Go.

use thiserror::Error;

/// Why the text after `@every` is not a duration.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Nothing followed `@every`.
    #[error("no duration given (for example `@every 1h30m`)")]
    Missing,
    /// A term does not start with a number, or a number has no digits (`h`, `.s`, `1..2s`).
    #[error("expected a number such as `90`, `1.5` or `.5` at {at:?}")]
    ExpectedNumber {
        /// The rest of the text where the number was expected.
        at: String,
    },
    /// A number is not followed by a unit.
    #[error("the number {number:?} has no unit (use ns, us, ms, s, m or h)")]
    MissingUnit {
        /// The number without its unit.
        number: String,
    },
    /// A unit that Go does not know.
    #[error("unknown unit {unit:?} (use ns, us, ms, s, m or h)")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
    },
    /// The value does not fit Go's duration type.
    #[error("longer than the largest duration Go accepts (about 292 years)")]
    TooLong,
}

/// Parses a Go duration into signed nanoseconds.
pub(crate) fn parse_go_duration(text: &str) -> Result<i128, DurationError> {
    let bytes = text.as_bytes();
    // The positions fall on character boundaries (next to ASCII digits, dots and signs); a lossy
    // conversion keeps that from ever mattering.
    let part = |range: std::ops::Range<usize>| String::from_utf8_lossy(&bytes[range]).into_owned();
    goduration::parse(bytes)
        .map(i128::from)
        .map_err(|e| match e {
            goduration::Error::Empty => DurationError::Missing,
            goduration::Error::ExpectedNumber { at } => DurationError::ExpectedNumber {
                at: part(at..bytes.len()),
            },
            goduration::Error::MissingUnit { number } => DurationError::MissingUnit {
                number: part(number),
            },
            goduration::Error::UnknownUnit { unit } => {
                DurationError::UnknownUnit { unit: part(unit) }
            }
            goduration::Error::Overflow => DurationError::TooLong,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const S: i128 = 1_000_000_000;

    #[test]
    fn accepts_go_syntax() {
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("+0", 0),
            ("5s", 5 * S),
            ("30s", 30 * S),
            ("1478s", 1478 * S),
            ("-5s", -5 * S),
            ("+5s", 5 * S),
            ("-0s", 0),
            ("5.0s", 5 * S),
            ("5.6s", 5 * S + 600_000_000),
            ("5.s", 5 * S),
            (".5s", S / 2),
            ("1.0004s", S + 400_000),
            ("1.004s", S + 4_000_000),
            ("100.00100s", 100 * S + 1_000_000),
            ("10ns", 10),
            ("11us", 11_000),
            ("12\u{b5}s", 12_000),
            ("12\u{3bc}s", 12_000),
            ("13ms", 13_000_000),
            ("14s", 14 * S),
            ("15m", 15 * 60 * S),
            ("16h", 16 * 3600 * S),
            ("3h30m", (3 * 3600 + 30 * 60) * S),
            ("10.5s4m", 4 * 60 * S + 10 * S + S / 2),
            ("-2m3.4s", -(2 * 60 * S + 3 * S + 400_000_000)),
            ("1h2m3s4ms5us6ns", 3_723_004_005_006),
            ("39h9m14.425s", 140_954_425_000_000),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 1_200_000_000_000),
            ("9007199254740993ns", 9_007_199_254_740_993),
            ("9223372036854775807ns", (1 << 63) - 1),
            ("9223372036854775.807us", (1 << 63) - 1),
            ("-9223372036854775808ns", -(1 << 63)),
            ("0.100000000000000000000h", 360 * S),
        ];
        for (text, nanos) in cases {
            assert_eq!(parse_go_duration(text), Ok(*nanos), "{text}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        let unknown = |u: &str| DurationError::UnknownUnit { unit: u.to_owned() };
        let cases: Vec<(&str, DurationError)> = vec![
            ("", DurationError::Missing),
            ("-", DurationError::Missing),
            ("3", DurationError::MissingUnit { number: "3".into() }),
            ("1h3", DurationError::MissingUnit { number: "3".into() }),
            ("s", DurationError::ExpectedNumber { at: "s".into() }),
            (".", DurationError::ExpectedNumber { at: ".".into() }),
            ("-.", DurationError::ExpectedNumber { at: ".".into() }),
            (".s", DurationError::ExpectedNumber { at: ".s".into() }),
            ("+.s", DurationError::ExpectedNumber { at: ".s".into() }),
            ("1d", unknown("d")),
            ("3000000h", DurationError::TooLong),
            ("9223372036854775808ns", DurationError::TooLong),
            ("9223372036854775.808us", DurationError::TooLong),
            ("9223372036854ms775us808ns", DurationError::TooLong),
            ("-9223372036854775809ns", DurationError::TooLong),
        ];
        for (text, error) in cases {
            assert_eq!(parse_go_duration(text), Err(error), "{text}");
        }
    }
}
