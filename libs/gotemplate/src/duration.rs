//! Go's `time.Duration`: `time.ParseDuration` and `Duration.String`, for slim-sprig's
//! `duration`, `durationRound` and `dateModify`, and for the drivers' Go durations (MariaDB's
//! `maxRetention`, a Plan's `maxAge`), kept step for step with Go's: the whole part of
//! each term is read exactly and may not exceed 2^63, the fraction's digits are accumulated until
//! they would pass 2^63 and scaled through one `f64` multiplication, and the sum wraps at 2^64 as
//! Go's unsigned accumulator does.

/// Parses a Go duration into nanoseconds, with Go's error messages.
pub fn parse_duration(text: &[u8]) -> Result<i64, String> {
    const LIMIT: u64 = 1 << 63;
    let invalid = || format!("time: invalid duration {}", go_quote(text));
    let mut s = text;
    let mut negative = false;
    if let Some(&sign @ (b'-' | b'+')) = s.first() {
        negative = sign == b'-';
        s = &s[1..];
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let before = s.len();
        let mut value: u64 = 0;
        while let Some(&c) = s.first().filter(|c| c.is_ascii_digit()) {
            if value > LIMIT / 10 {
                return Err(invalid());
            }
            value = value * 10 + u64::from(c - b'0');
            if value > LIMIT {
                return Err(invalid());
            }
            s = &s[1..];
        }
        let whole_digits = s.len() != before;
        let (mut fraction, mut scale, mut frac_digits) = (0_u64, 1_f64, false);
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let mut overflow = false;
            while let Some(&c) = s.first().filter(|c| c.is_ascii_digit()) {
                s = &s[1..];
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
            return Err(invalid());
        }
        let unit_len = s
            .iter()
            .position(|c| *c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {}", go_quote(text)));
        }
        let unit = &s[..unit_len];
        s = &s[unit_len..];
        let nanos: u64 = match unit {
            b"ns" => 1,
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            other => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    go_quote(other),
                    go_quote(text)
                ));
            }
        };
        if value > LIMIT / nanos {
            return Err(invalid());
        }
        value *= nanos;
        if fraction > 0 {
            value += (fraction as f64 * (nanos as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(invalid());
            }
        }
        total = total.wrapping_add(value);
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if negative {
        Ok((total as i64).wrapping_neg())
    } else if total > LIMIT - 1 {
        Err(invalid())
    } else {
        Ok(total as i64)
    }
}

/// Quotes as Go's time package quotes a duration or unit in its errors: `"` and the backslash
/// escaped, every byte of a control or non-ASCII character (or an invalid byte) as `\xNN`.
fn go_quote(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut i = 0;
    while i < s.len() {
        let (c, n) = crate::strconv::decode_rune(&s[i..]);
        if c < ' ' || !c.is_ascii() {
            for b in &s[i..i + n] {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        i += n;
    }
    out.push('"');
    out
}

/// Formats nanoseconds as Go's `Duration.String()` does (`720h0m0s`, `1.5s`, `300ms`).
pub fn format_duration(nanos: i64) -> String {
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

/// slim-sprig's `durationRound`: the duration's magnitude in its largest whole unit (a year is
/// 365 days, a month 30), `0s` below a second; each bound is exclusive, as in slim-sprig.
pub(crate) fn duration_round(d: i64) -> String {
    const SECOND: u64 = 1_000_000_000;
    const UNITS: [(u64, &str); 6] = [
        (SECOND * 3600 * 24 * 365, "y"),
        (SECOND * 3600 * 24 * 30, "mo"),
        (SECOND * 3600 * 24, "d"),
        (SECOND * 3600, "h"),
        (SECOND * 60, "m"),
        (SECOND, "s"),
    ];
    let u = d.unsigned_abs();
    for (size, name) in UNITS {
        if u > size {
            return format!("{}{name}", u / size);
        }
    }
    "0s".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        for (text, nanos, shown) in [
            ("720h", 2_592_000_000_000_000, "720h0m0s"),
            ("1.5s", 1_500_000_000, "1.5s"),
            ("-300ms", -300_000_000, "-300ms"),
            ("1h2m3.000000004s", 3_723_000_000_004, "1h2m3.000000004s"),
            ("2µs", 2_000, "2µs"),
            ("0", 0, "0s"),
        ] {
            assert_eq!(parse_duration(text.as_bytes()), Ok(nanos), "{text}");
            assert_eq!(format_duration(nanos), shown, "{text}");
        }
        assert_eq!(format_duration(i64::MIN), "-2562047h47m16.854775808s");
        assert_eq!(
            parse_duration(b"3d"),
            Err("time: unknown unit \"d\" in duration \"3d\"".into())
        );
        assert_eq!(
            parse_duration(b""),
            Err("time: invalid duration \"\"".into())
        );
        assert_eq!(duration_round(i64::MIN), "292y");
        assert_eq!(duration_round(1_000_000_000), "0s");
        assert_eq!(duration_round(-61_000_000_000), "1m");
    }
}
