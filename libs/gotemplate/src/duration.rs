//! Go's `time.Duration` for slim-sprig's `duration`, `durationRound` and `dateModify`: the
//! parsing and printing are the workspace's one implementation (`goduration`); `durationRound`
//! is slim-sprig's own.

/// Parses a Go duration into nanoseconds, with Go's error messages.
pub fn parse_duration(text: &[u8]) -> Result<i64, String> {
    goduration::parse_go(text)
}

/// Formats nanoseconds as Go's `Duration.String()` does (`720h0m0s`, `1.5s`, `300ms`).
pub fn format_duration(nanos: i64) -> String {
    goduration::format(nanos)
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
    fn duration_round_takes_the_largest_whole_unit() {
        assert_eq!(duration_round(i64::MIN), "292y");
        assert_eq!(duration_round(1_000_000_000), "0s");
        assert_eq!(duration_round(-61_000_000_000), "1m");
    }
}
