//! Time helpers shared by the table tests: instants written the way the tables read best.

#![allow(dead_code, unreachable_pub)]

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

/// An instant written as RFC 3339 (`2012-03-11T00:00:00-05:00`, `2024-01-01T02:00:00Z`).
pub fn at(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339)
        .unwrap_or_else(|e| panic!("bad instant {rfc3339:?} in a test table: {e}"))
        .to_utc()
}

/// An instant written either as RFC 3339 or, like robfig's tables, as a wall-clock time in
/// `zone` (`Mon Jul 9 14:45 2012`, `Mon Jul 9 14:45:00.005 2012`); the weekday name is not
/// checked, as Go's parser does not check it either.
pub fn when(zone: Tz, text: &str) -> DateTime<Utc> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return t.to_utc();
    }
    let without_weekday = text.split_once(' ').map_or(text, |(_, rest)| rest);
    let wall = [
        "%b %e %H:%M %Y",
        "%b %e %H:%M:%S %Y",
        "%b %e %H:%M:%S%.f %Y",
    ]
    .iter()
    .find_map(|format| NaiveDateTime::parse_from_str(without_weekday, format).ok())
    .unwrap_or_else(|| panic!("bad time {text:?} in a test table"));
    zone.from_local_datetime(&wall)
        .single()
        .unwrap_or_else(|| panic!("{text:?} is not a single instant in {zone}"))
        .to_utc()
}
