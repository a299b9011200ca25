//! One parser for every duration flag of every daemon (`--debounce 5s`, `--system-tick 1m`,
//! `--max-ttl 30s`): Go-style durations as Kubernetes users write them.
//!
//! Accepted: one or more `<number><unit>` parts with units `ms`, `s`, `m`, `h` (`500ms`, `1.5s`,
//! `1h30m`). A bare number is only accepted by the legacy parsers ([`seconds`], [`millis`]) that
//! keep old `--…-seconds`/`--…-ms` flags working: there it means the old flag's unit.

use std::time::Duration;

/// Parses a duration such as `500ms`, `30s`, `5m`, `1h30m` or `1.5s`.
pub fn parse(s: &str) -> Result<Duration, String> {
    parse_in(s, None)
}

/// Parses like [`parse`], and a bare number as seconds (old `--…-seconds` flags).
pub fn seconds(s: &str) -> Result<Duration, String> {
    parse_in(s, Some(1.0))
}

/// Parses like [`parse`], and a bare number as milliseconds (old `--…-ms` flags).
pub fn millis(s: &str) -> Result<Duration, String> {
    parse_in(s, Some(0.001))
}

fn parse_in(input: &str, bare_unit_secs: Option<f64>) -> Result<Duration, String> {
    let s = input.trim();
    let invalid = |why: &str| {
        format!("invalid duration {input:?}: {why} (expected e.g. 500ms, 30s, 5m or 1h30m)")
    };
    if s.is_empty() {
        return Err(invalid("empty"));
    }
    if let Some(unit) = bare_unit_secs
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        let n: f64 = s.parse().map_err(|_| invalid("not a number"))?;
        return Duration::try_from_secs_f64(n * unit).map_err(|e| invalid(&e.to_string()));
    }
    let mut total = 0.0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| invalid("missing unit"))?;
        if digits == 0 {
            return Err(invalid("expected a number"));
        }
        let (num, after) = rest.split_at(digits);
        let n: f64 = num.parse().map_err(|_| invalid("not a number"))?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => {
                return Err(invalid(&format!(
                    "unknown unit {unit:?}; use ms, s, m or h"
                )));
            }
        };
        total += n * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(total).map_err(|e| invalid(&e.to_string()))
}

/// Formats a duration the way [`parse`] reads it back (`1h30m`, `5s`, `1500ms`).
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let mut secs = ms / 1000;
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if secs > 0 {
        out.push_str(&format!("{secs}s"));
    }
    out
}

/// Serializes a duration as [`format`] writes it (for effective-configuration log lines).
pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_durations() {
        let ok = |s: &str| parse(s).unwrap();
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("5s"), Duration::from_secs(5));
        assert_eq!(ok("0.5s"), Duration::from_millis(500));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok(" 1m30s "), Duration::from_secs(90));
        assert_eq!(ok("0s"), Duration::ZERO);
        for bad in ["", "5", "fast", "5d", "s", "1h-5m", "1..5s"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("invalid duration"), "{bad}: {err}");
        }
    }

    #[test]
    fn legacy_flags_read_bare_numbers_in_their_unit() {
        assert_eq!(seconds("60"), Ok(Duration::from_secs(60)));
        assert_eq!(seconds("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(millis("30000"), Ok(Duration::from_secs(30)));
        assert_eq!(millis("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(millis("-1").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for d in [0, 1500, 5_000, 60_000, 5_400_000, 3_725_000] {
            let d = Duration::from_millis(d);
            assert_eq!(parse(&format(d)), Ok(d), "{}", format(d));
        }
        assert_eq!(format(Duration::from_secs(3725)), "1h2m5s");
    }
}
