//! Go's `time.Duration` as text: `time.ParseDuration` and `Duration.String`, kept step for step
//! with Go's. This is the workspace's one parser of Go durations: slim-sprig's `duration`
//! functions (`gotemplate`), the drivers' durations (MariaDB's `maxRetention`, a Plan's `maxAge`)
//! and the interval of a Plan's `@every` (`schedule`), each of which upstream reads with Go's
//! function.
//!
//! How Go computes it, and so how this does: the whole part of each term is read exactly and may
//! not exceed 2^63; the fraction's digits are accumulated until they would pass 2^63 and scaled
//! through one `f64` multiplication, truncated toward zero; the terms are summed in an unsigned
//! accumulator that wraps at 2^64; a positive total must stay below 2^63, a negative one may
//! reach it.
//!
//! A failure is an [`Error`] that says where and why, so that a caller can word it for its users
//! (`schedule` does); [`Error::go_message`] gives Go's own words (`time: invalid duration "x"`),
//! which upstream shows to users where it quotes the error.

/// 2^63: the magnitude of Go's most negative duration; positive ones stop one below it.
const LIMIT: u64 = 1 << 63;

/// Why a text is not a Go duration. Positions are byte offsets into the parsed text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Nothing but an optional sign.
    Empty,
    /// A term has no number where one must start (`h`, `.s`, `1h.`): the term starts at `at`.
    ExpectedNumber {
        /// Where the term without a number starts.
        at: usize,
    },
    /// A number is not followed by a unit (`90`, `1h30`): the number is `text[number]`.
    MissingUnit {
        /// The number without its unit.
        number: std::ops::Range<usize>,
    },
    /// A unit Go does not know (`3d`): the unit is `text[unit]`.
    UnknownUnit {
        /// The unit as written.
        unit: std::ops::Range<usize>,
    },
    /// The value does not fit Go's duration (about ±292 years).
    Overflow,
}

impl Error {
    /// Go's message for this failure of `text` (the text that was parsed), e.g.
    /// `time: unknown unit "d" in duration "3d"`.
    pub fn go_message(&self, text: &[u8]) -> String {
        match self {
            Error::MissingUnit { .. } => {
                format!("time: missing unit in duration {}", quote(text))
            }
            Error::UnknownUnit { unit } => format!(
                "time: unknown unit {} in duration {}",
                quote(&text[unit.clone()]),
                quote(text)
            ),
            Error::Empty | Error::ExpectedNumber { .. } | Error::Overflow => {
                format!("time: invalid duration {}", quote(text))
            }
        }
    }
}

/// Parses a Go duration into nanoseconds.
pub fn parse(text: &[u8]) -> Result<i64, Error> {
    let mut pos = 0;
    let mut negative = false;
    if let Some(&sign @ (b'-' | b'+')) = text.first() {
        negative = sign == b'-';
        pos = 1;
    }
    if &text[pos..] == b"0" {
        return Ok(0);
    }
    if pos == text.len() {
        return Err(Error::Empty);
    }
    let digit_at = |i: usize| text.get(i).copied().filter(u8::is_ascii_digit);
    let mut total: u64 = 0;
    while pos < text.len() {
        let term = pos;
        if !(text[pos] == b'.' || text[pos].is_ascii_digit()) {
            return Err(Error::ExpectedNumber { at: term });
        }
        // The whole part, exactly.
        let mut value: u64 = 0;
        while let Some(c) = digit_at(pos) {
            if value > LIMIT / 10 {
                return Err(Error::Overflow);
            }
            value = value * 10 + u64::from(c - b'0');
            if value > LIMIT {
                return Err(Error::Overflow);
            }
            pos += 1;
        }
        let whole_digits = pos != term;
        // The fraction: digits past what the accumulator holds are read and ignored.
        let (mut fraction, mut scale, mut frac_digits) = (0_u64, 1_f64, false);
        if text.get(pos) == Some(&b'.') {
            pos += 1;
            let mut overflow = false;
            while let Some(c) = digit_at(pos) {
                pos += 1;
                frac_digits = true;
                if overflow {
                    continue;
                }
                if fraction > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let next = fraction * 10 + u64::from(c - b'0');
                if next > LIMIT {
                    overflow = true;
                    continue;
                }
                fraction = next;
                scale *= 10.0;
            }
        }
        if !whole_digits && !frac_digits {
            return Err(Error::ExpectedNumber { at: term });
        }
        let unit_end = text[pos..]
            .iter()
            .position(|c| *c == b'.' || c.is_ascii_digit())
            .map_or(text.len(), |i| pos + i);
        if unit_end == pos {
            return Err(Error::MissingUnit { number: term..pos });
        }
        let unit = pos..unit_end;
        pos = unit_end;
        let nanos: u64 = match &text[unit.clone()] {
            b"ns" => 1,
            // `us`, MICRO SIGN + s, GREEK SMALL LETTER MU + s.
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => return Err(Error::UnknownUnit { unit }),
        };
        if value > LIMIT / nanos {
            return Err(Error::Overflow);
        }
        value *= nanos;
        if fraction > 0 {
            // Truncation toward zero is the documented behaviour of this float-to-int cast.
            value += (fraction as f64 * (nanos as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(Error::Overflow);
            }
        }
        total = total.wrapping_add(value);
        if total > LIMIT {
            return Err(Error::Overflow);
        }
    }
    if negative {
        Ok((total as i64).wrapping_neg())
    } else if total > LIMIT - 1 {
        Err(Error::Overflow)
    } else {
        Ok(total as i64)
    }
}

/// Parses a Go duration into nanoseconds, failing with Go's message.
pub fn parse_go(text: &[u8]) -> Result<i64, String> {
    parse(text).map_err(|e| e.go_message(text))
}

/// Quotes as Go's time package quotes a duration or unit in its errors: `"` and the backslash
/// escaped, every byte of a control or non-ASCII character (or of an invalid sequence) as
/// `\xNN`.
pub fn quote(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut i = 0;
    while i < s.len() {
        // One character as Go's `utf8.DecodeRune` reads it: an invalid byte is one wide.
        let (c, n) = match s[i..].utf8_chunks().next() {
            Some(chunk) => match chunk.valid().chars().next() {
                Some(c) => (Some(c), c.len_utf8()),
                None => (None, 1),
            },
            None => (None, 1),
        };
        match c {
            Some(c) if c >= ' ' && c.is_ascii() => {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            _ => {
                for b in &s[i..i + n] {
                    out.push_str(&format!("\\x{b:02x}"));
                }
            }
        }
        i += n;
    }
    out.push('"');
    out
}

/// Formats nanoseconds as Go's `Duration.String()` does (`720h0m0s`, `1.5s`, `300ms`, `2µs`).
pub fn format(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let u = nanos.unsigned_abs();
    let frac = |v: u64, digits: u32| -> String {
        let scale = 10u64.pow(digits);
        let (whole, mut rest) = (v / scale, v % scale);
        if rest == 0 {
            return whole.to_string();
        }
        let mut width = digits as usize;
        while rest % 10 == 0 {
            rest /= 10;
            width -= 1;
        }
        format!("{whole}.{rest:0width$}")
    };
    if u < 1_000_000_000 {
        return if u < 1_000 {
            format!("{sign}{u}ns")
        } else if u < 1_000_000 {
            format!("{sign}{}µs", frac(u, 3))
        } else {
            format!("{sign}{}ms", frac(u, 6))
        };
    }
    let seconds = frac(u % 60_000_000_000, 9);
    let minutes_total = u / 60_000_000_000;
    if minutes_total == 0 {
        return format!("{sign}{seconds}s");
    }
    let (hours, minutes) = (minutes_total / 60, minutes_total % 60);
    if hours == 0 {
        format!("{sign}{minutes}m{seconds}s")
    } else {
        format!("{sign}{hours}h{minutes}m{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_and_print_as_go() {
        for (text, nanos, shown) in [
            ("720h", 2_592_000_000_000_000, "720h0m0s"),
            ("1.5s", 1_500_000_000, "1.5s"),
            ("-300ms", -300_000_000, "-300ms"),
            ("1h2m3.000000004s", 3_723_000_000_004, "1h2m3.000000004s"),
            ("2µs", 2_000, "2µs"),
            ("0", 0, "0s"),
            (
                "-9223372036854775808ns",
                i64::MIN,
                "-2562047h47m16.854775808s",
            ),
        ] {
            assert_eq!(parse(text.as_bytes()), Ok(nanos), "{text}");
            assert_eq!(format(nanos), shown, "{text}");
        }
    }

    #[test]
    fn failures_say_where_and_carry_gos_words() {
        let cases: [(&str, Error, &str); 7] = [
            ("", Error::Empty, r#"time: invalid duration """#),
            ("-", Error::Empty, r#"time: invalid duration "-""#),
            (
                "1h.",
                Error::ExpectedNumber { at: 2 },
                r#"time: invalid duration "1h.""#,
            ),
            (
                "h",
                Error::ExpectedNumber { at: 0 },
                r#"time: invalid duration "h""#,
            ),
            (
                "1h30",
                Error::MissingUnit { number: 2..4 },
                r#"time: missing unit in duration "1h30""#,
            ),
            (
                "3d\x01",
                Error::UnknownUnit { unit: 1..3 },
                r#"time: unknown unit "d\x01" in duration "3d\x01""#,
            ),
            (
                "9223372036854775808ns",
                Error::Overflow,
                r#"time: invalid duration "9223372036854775808ns""#,
            ),
        ];
        for (text, error, message) in cases {
            assert_eq!(parse(text.as_bytes()), Err(error), "{text:?}");
            assert_eq!(
                parse_go(text.as_bytes()),
                Err(message.to_owned()),
                "{text:?}"
            );
        }
        assert_eq!(quote(b"\xff\"\\\xc2\xb5"), r#""\xff\"\\\xc2\xb5""#);
    }
}
