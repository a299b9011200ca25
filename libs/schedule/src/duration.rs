//! The duration after `@every`, in Go's `time.ParseDuration` syntax (`90s`, `1h30m`, `1.5h`,
//! `500ms`), because upstream reads it with exactly that function and existing Plans use it.
//!
//! Data flow: text → whole nanoseconds (`i128`, so no sum of terms can overflow) → the caller
//! keeps whole seconds. Invariants: a unit is required after every number (only a bare `0` may
//! omit it); the accepted units are `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m` and `h`; any value
//! outside Go's `time.Duration` range (±2^63 ns, about 292 years) is an error, as it is in Go.

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

const NANOS_PER_UNIT: [(&str, u64); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),  // MICRO SIGN
    ("\u{3bc}s", 1_000), // GREEK SMALL LETTER MU
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a Go duration into signed nanoseconds.
pub(crate) fn parse_go_duration(text: &str) -> Result<i128, DurationError> {
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(DurationError::Missing);
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let term_start = rest;
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_digits = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_digits = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            frac_digits = &after_dot[..frac_len];
            rest = &after_dot[frac_len..];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(DurationError::ExpectedNumber {
                at: term_start.to_owned(),
            });
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let number = &term_start[..term_start.len() - rest.len()];
        if unit_len == 0 {
            return Err(DurationError::MissingUnit {
                number: number.to_owned(),
            });
        }
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale = NANOS_PER_UNIT
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, nanos)| *nanos)
            .ok_or_else(|| DurationError::UnknownUnit {
                unit: unit.to_owned(),
            })?;
        total = total
            .checked_add(term_nanos(int_digits, frac_digits, scale)?)
            .filter(|t| *t <= MAGNITUDE_LIMIT)
            .ok_or(DurationError::TooLong)?;
    }
    if negative {
        Ok(-i128::from(total))
    } else if total > MAGNITUDE_LIMIT - 1 {
        Err(DurationError::TooLong)
    } else {
        Ok(i128::from(total))
    }
}

/// 2^63: the magnitude of Go's most negative duration; positive ones stop one below it.
const MAGNITUDE_LIMIT: u64 = 1 << 63;

/// `int.frac × scale` in nanoseconds, computed the way Go computes it so that odd inputs
/// (`0.3333333333333333333h`) give the same whole number of seconds: the integer part exactly,
/// the fraction through one `f64` multiplication truncated toward zero, digits that would
/// overflow the fraction's accumulator ignored.
fn term_nanos(int: &str, frac: &str, scale: u64) -> Result<u64, DurationError> {
    let mut whole: u64 = 0;
    for digit in int.bytes() {
        whole = whole
            .checked_mul(10)
            .and_then(|w| w.checked_add(u64::from(digit - b'0')))
            .filter(|w| *w <= MAGNITUDE_LIMIT)
            .ok_or(DurationError::TooLong)?;
    }
    if whole > MAGNITUDE_LIMIT / scale {
        return Err(DurationError::TooLong);
    }
    let mut nanos = whole * scale;
    let (mut fraction, mut divisor) = (0_u64, 1_f64);
    for digit in frac.bytes() {
        match fraction
            .checked_mul(10)
            .and_then(|f| f.checked_add(u64::from(digit - b'0')))
            .filter(|f| *f <= MAGNITUDE_LIMIT)
        {
            Some(f) => {
                fraction = f;
                divisor *= 10.0;
            }
            None => break,
        }
    }
    if fraction > 0 {
        // Truncation toward zero is the documented behaviour of this float-to-int conversion.
        let part = (fraction as f64 * (scale as f64 / divisor)) as u64;
        nanos = nanos
            .checked_add(part)
            .filter(|n| *n <= MAGNITUDE_LIMIT)
            .ok_or(DurationError::TooLong)?;
    }
    Ok(nanos)
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
