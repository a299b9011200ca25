//! Go's `time.Time` as slim-sprig's date functions use it: an instant with a location, Go's
//! reference-layout formatting (`Time.Format`) and parsing (`time.ParseInLocation`), and
//! `Time.String()`. About 1,200 lines because formatting and parsing walk the same chunk table of
//! Go's layout elements; they are kept beside it.
//!
//! Written here rather than taken from a crate: no maintained crate implementing Go's layouts was
//! found, and chrono's strftime formats cannot express Go's rules, which decide whether upstream's
//! template renders or is used as written (which chunk wins where layouts overlap, `_2006`, `__2`,
//! fractional seconds after any digit run, `2` vs `02` accepting one or two digits, the
//! zone-abbreviation and `GMT+n` rules, the day-of-year checks). Each step follows Go's
//! `format.go`; chrono and chrono-tz supply the calendar and the zones.
//!
//! The local zone is UTC: the daemons run with `TZ` unset and no zone files, where Go's `Local`
//! is UTC (its abbreviation `UTC`), so `toDate` parses in UTC and `date` formats in UTC.

use std::sync::Arc;

use chrono::{Datelike, Offset, TimeZone, Timelike};
use chrono_tz::OffsetName;

/// A location: UTC (also Go's `Local` here), a fixed zone (named or not), or a tz database zone.
#[derive(Clone, Debug, PartialEq)]
pub enum Loc {
    /// UTC.
    Utc,
    /// Go's `Local`, which is UTC here but another location than `UTC` (times in the two are not
    /// `==` in Go).
    Local,
    /// `time.FixedZone(name, offset)`.
    Fixed(Arc<str>, i32),
    /// A zone of the tz database.
    Tz(chrono_tz::Tz),
}

impl Loc {
    /// `Location.String()`: the name given to `LoadLocation` or `FixedZone`.
    pub fn name(&self) -> String {
        match self {
            Loc::Utc => "UTC".to_owned(),
            // Go names `Local` "UTC" when it is UTC (`TZ` empty or `UTC`, or no zone file), as
            // here; with a zone file and `TZ` unset it would be "Local".
            Loc::Local => "UTC".to_owned(),
            Loc::Fixed(name, _) => name.to_string(),
            Loc::Tz(tz) => tz.name().to_owned(),
        }
    }
}

/// A Go `time.Time` (without a monotonic reading unless `mono` is set); opaque outside the crate.
#[derive(Clone, Debug, PartialEq)]
pub struct Time {
    /// Seconds since the Unix epoch.
    pub(crate) secs: i64,
    /// Nanoseconds within the second.
    pub(crate) nanos: u32,
    /// The location it is shown in.
    pub(crate) loc: Loc,
    /// The monotonic clock reading (nanoseconds) that `time.Now()` carries and `String()` shows.
    pub(crate) mono: Option<i64>,
}

/// Seconds from 0001-01-01 to 1970-01-01 (Go's zero time is year 1).
const ZERO_UNIX: i64 = -62_135_596_800;

/// The broken-down time in its zone.
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    yday: u32,
    weekday: usize,
    hour: u32,
    min: u32,
    sec: u32,
}

pub(crate) const LONG_MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
pub(crate) const LONG_DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

impl Time {
    /// Go's zero `time.Time` (what `toDate` gives for a value that does not parse).
    pub(crate) fn zero() -> Time {
        Time {
            secs: ZERO_UNIX,
            nanos: 0,
            loc: Loc::Utc,
            mono: None,
        }
    }

    /// `time.Unix(secs, 0)` in the local zone.
    pub(crate) fn unix(secs: i64) -> Time {
        Time {
            secs,
            nanos: 0,
            loc: Loc::Local,
            mono: None,
        }
    }

    /// `time.Now()`.
    pub(crate) fn now() -> Time {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let start = *START.get_or_init(std::time::Instant::now);
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Time {
            secs: since.as_secs() as i64,
            nanos: since.subsec_nanos(),
            loc: Loc::Local,
            mono: Some(start.elapsed().as_nanos() as i64 + 1),
        }
    }

    /// `t.In(loc)`, which drops the monotonic reading.
    pub(crate) fn in_loc(&self, loc: Loc) -> Time {
        Time {
            loc,
            mono: None,
            ..self.clone()
        }
    }

    /// `t.IsZero()`.
    pub(crate) fn is_zero(&self) -> bool {
        self.secs == ZERO_UNIX && self.nanos == 0
    }

    /// `t.Add(d)`; `None` past chrono's range.
    pub(crate) fn add(&self, d: i64) -> Time {
        let total = i128::from(self.secs) * 1_000_000_000 + i128::from(self.nanos) + i128::from(d);
        Time {
            secs: total.div_euclid(1_000_000_000) as i64,
            nanos: total.rem_euclid(1_000_000_000) as u32,
            loc: self.loc.clone(),
            mono: self.mono.map(|m| m.wrapping_add(d)),
        }
    }

    /// `t.Month()` (1 to 12) and `t.Weekday()` (0 is Sunday); `None` past chrono's range.
    pub(crate) fn month_weekday(&self) -> Option<(i64, i64)> {
        let c = self.civil(self.zone().1)?;
        Some((i64::from(c.month), c.weekday as i64))
    }

    /// `t.Location()`.
    pub(crate) fn location(&self) -> Loc {
        self.loc.clone()
    }

    /// `t.GoString()`; `None` past chrono's range.
    pub(crate) fn go_string(&self) -> Option<String> {
        let c = self.civil(self.zone().1)?;
        let loc = match &self.loc {
            Loc::Utc => "time.UTC".to_owned(),
            Loc::Local => "time.Local".to_owned(),
            other => format!(
                "time.Location({})",
                crate::strconv::quote(other.name().as_bytes())
            ),
        };
        Some(format!(
            "time.Date({}, time.{}, {}, {}, {}, {}, {}, {loc})",
            c.year,
            LONG_MONTHS[c.month as usize - 1],
            c.day,
            c.hour,
            c.min,
            c.sec,
            self.nanos
        ))
    }

    /// `t.IsDST()`.
    pub(crate) fn is_dst(&self) -> bool {
        match &self.loc {
            Loc::Tz(tz) => chrono::DateTime::from_timestamp(self.secs, 0).is_some_and(|utc| {
                use chrono_tz::OffsetComponents;
                tz.offset_from_utc_datetime(&utc.naive_utc())
                    .dst_offset()
                    .num_seconds()
                    != 0
            }),
            _ => false,
        }
    }

    /// `t.Sub(u)`: the monotonic readings when both have one, saturating at Go's bounds.
    pub(crate) fn sub(&self, u: &Time) -> i64 {
        if let (Some(a), Some(b)) = (self.mono, u.mono) {
            return a.saturating_sub(b);
        }
        let d = (i128::from(self.secs) - i128::from(u.secs)) * 1_000_000_000
            + i128::from(self.nanos)
            - i128::from(u.nanos);
        d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// The remainder of the time since Go's zero time divided by `d` (`d > 0`), as Go's `div`.
    fn rem(&self, d: i64) -> i64 {
        let total = (i128::from(self.secs) - i128::from(ZERO_UNIX)) * 1_000_000_000
            + i128::from(self.nanos);
        total.rem_euclid(i128::from(d)) as i64
    }

    /// `t.Truncate(d)`, which drops the monotonic reading.
    pub(crate) fn truncate(&self, d: i64) -> Time {
        let t = self.in_loc(self.loc.clone());
        if d <= 0 {
            return t;
        }
        let r = t.rem(d);
        t.add(-r)
    }

    /// `t.Round(d)`: halves away from zero (up), dropping the monotonic reading.
    pub(crate) fn round(&self, d: i64) -> Time {
        let t = self.in_loc(self.loc.clone());
        if d <= 0 {
            return t;
        }
        let r = t.rem(d);
        if (r as u64) + (r as u64) < d as u64 {
            t.add(-r)
        } else {
            t.add(d - r)
        }
    }

    /// `t.AddDate(years, months, days)`: the civil date and clock normalised as Go's `time.Date`
    /// normalises them, in the same location; `None` past chrono's range.
    pub(crate) fn add_date(&self, years: i64, months: i64, days: i64) -> Option<Time> {
        let offset = self.zone().1;
        let c = self.civil(offset)?;
        let m0 = i64::from(c.month) - 1 + months;
        let year = c.year + years + m0.div_euclid(12);
        let month = m0.rem_euclid(12) + 1;
        let day_num = days_from_civil(year, month, 1) + i64::from(c.day) - 1 + days;
        let wall =
            day_num * 86_400 + i64::from(c.hour) * 3600 + i64::from(c.min) * 60 + i64::from(c.sec);
        let mut t = Time {
            secs: wall,
            nanos: self.nanos,
            loc: self.loc.clone(),
            mono: None,
        };
        let guess = t.zone().1;
        t.secs = wall - i64::from(guess);
        let actual = t.zone().1;
        if actual != guess {
            t.secs = wall - i64::from(actual);
        }
        Some(t)
    }

    /// The zone's abbreviation and offset (seconds east of UTC) at this instant.
    fn zone(&self) -> (String, i32) {
        match &self.loc {
            Loc::Utc | Loc::Local => ("UTC".into(), 0),
            Loc::Fixed(name, off) => (name.to_string(), *off),
            Loc::Tz(tz) => {
                let Some(utc) = chrono::DateTime::from_timestamp(self.secs, 0) else {
                    return ("UTC".into(), 0);
                };
                let off = tz.offset_from_utc_datetime(&utc.naive_utc());
                let secs = off.fix().local_minus_utc();
                let name = match off.abbreviation() {
                    Some(a) => a.to_owned(),
                    None => numeric_abbreviation(secs),
                };
                (name, secs)
            }
        }
    }

    fn civil(&self, offset: i32) -> Option<Civil> {
        let wall = self.secs.checked_add(i64::from(offset))?;
        let Some(local) = chrono::DateTime::from_timestamp(wall, 0) else {
            return civil_of_wall(wall);
        };
        let local = local.naive_utc();
        Some(Civil {
            year: i64::from(local.year()),
            month: local.month(),
            day: local.day(),
            yday: local.ordinal(),
            weekday: local.weekday().num_days_from_sunday() as usize,
            hour: local.hour(),
            min: local.minute(),
            sec: local.second(),
        })
    }

    /// `t.Format(layout)`; `None` for a year chrono cannot represent.
    pub(crate) fn format(&self, layout: &[u8]) -> Option<Vec<u8>> {
        let (name, offset) = self.zone();
        let c = self.civil(offset)?;
        let mut b = Vec::new();
        let mut layout = layout;
        loop {
            let (prefix, std, suffix) = next_std_chunk(layout);
            b.extend_from_slice(prefix);
            let Some(std) = std else { break };
            layout = suffix;
            match std {
                Std::Year => append_int(&mut b, c.year.abs() % 100, 2),
                Std::LongYear => append_int(&mut b, c.year, 4),
                Std::Month => {
                    b.extend_from_slice(&LONG_MONTHS[c.month as usize - 1].as_bytes()[..3])
                }
                Std::LongMonth => b.extend_from_slice(LONG_MONTHS[c.month as usize - 1].as_bytes()),
                Std::NumMonth => append_int(&mut b, i64::from(c.month), 0),
                Std::ZeroMonth => append_int(&mut b, i64::from(c.month), 2),
                Std::WeekDay => b.extend_from_slice(&LONG_DAYS[c.weekday].as_bytes()[..3]),
                Std::LongWeekDay => b.extend_from_slice(LONG_DAYS[c.weekday].as_bytes()),
                Std::Day => append_int(&mut b, i64::from(c.day), 0),
                Std::UnderDay => {
                    if c.day < 10 {
                        b.push(b' ');
                    }
                    append_int(&mut b, i64::from(c.day), 0);
                }
                Std::ZeroDay => append_int(&mut b, i64::from(c.day), 2),
                Std::UnderYearDay => {
                    if c.yday < 100 {
                        b.push(b' ');
                        if c.yday < 10 {
                            b.push(b' ');
                        }
                    }
                    append_int(&mut b, i64::from(c.yday), 0);
                }
                Std::ZeroYearDay => append_int(&mut b, i64::from(c.yday), 3),
                Std::Hour => append_int(&mut b, i64::from(c.hour), 2),
                Std::Hour12 | Std::ZeroHour12 => {
                    let hr = match c.hour % 12 {
                        0 => 12,
                        h => h,
                    };
                    append_int(
                        &mut b,
                        i64::from(hr),
                        if std == Std::Hour12 { 0 } else { 2 },
                    );
                }
                Std::Minute => append_int(&mut b, i64::from(c.min), 0),
                Std::ZeroMinute => append_int(&mut b, i64::from(c.min), 2),
                Std::Second => append_int(&mut b, i64::from(c.sec), 0),
                Std::ZeroSecond => append_int(&mut b, i64::from(c.sec), 2),
                Std::PM => b.extend_from_slice(if c.hour >= 12 { b"PM" } else { b"AM" }),
                Std::Pm => b.extend_from_slice(if c.hour >= 12 { b"pm" } else { b"am" }),
                Std::Zone(z) => {
                    if offset == 0 && z.iso {
                        b.push(b'Z');
                        continue;
                    }
                    let mut zone = offset / 60;
                    let mut abs = offset;
                    if zone < 0 {
                        b.push(b'-');
                        zone = -zone;
                        abs = -abs;
                    } else {
                        b.push(b'+');
                    }
                    append_int(&mut b, i64::from(zone / 60), 2);
                    if z.colon {
                        b.push(b':');
                    }
                    if !z.short {
                        append_int(&mut b, i64::from(zone % 60), 2);
                    }
                    if z.seconds {
                        if z.colon {
                            b.push(b':');
                        }
                        append_int(&mut b, i64::from(abs % 60), 2);
                    }
                }
                Std::TZ => {
                    if !name.is_empty() {
                        b.extend_from_slice(name.as_bytes());
                        continue;
                    }
                    let mut zone = offset / 60;
                    if zone < 0 {
                        b.push(b'-');
                        zone = -zone;
                    } else {
                        b.push(b'+');
                    }
                    append_int(&mut b, i64::from(zone / 60), 2);
                    append_int(&mut b, i64::from(zone % 60), 2);
                }
                Std::Frac { sep, digits, trim } => {
                    if trim && (digits == 0 || self.nanos == 0) {
                        continue;
                    }
                    let start = b.len();
                    b.push(sep);
                    append_int(&mut b, i64::from(self.nanos), 9);
                    if digits < 9 {
                        b.truncate(b.len() - 9 + digits);
                    }
                    if trim {
                        while b.len() > start && b.last() == Some(&b'0') {
                            b.pop();
                        }
                        if b.len() > start && b.last() == Some(&sep) {
                            b.pop();
                        }
                    }
                }
            }
        }
        Some(b)
    }

    /// `t.String()`.
    pub(crate) fn string(&self) -> Option<Vec<u8>> {
        let mut s = self.format(b"2006-01-02 15:04:05.999999999 -0700 MST")?;
        if let Some(m) = self.mono {
            let sign = if m < 0 { '-' } else { '+' };
            let m = m.unsigned_abs();
            s.extend_from_slice(
                format!(" m={sign}{}.{:09}", m / 1_000_000_000, m % 1_000_000_000).as_bytes(),
            );
        }
        Some(s)
    }
}

/// The tz database's numeric abbreviation (`-03`, `+0530`, `+054530`), which chrono-tz does not
/// return as an abbreviation but Go prints as the zone's name.
fn numeric_abbreviation(offset: i32) -> String {
    let sign = if offset < 0 { '-' } else { '+' };
    let a = offset.unsigned_abs();
    let (h, m, s) = (a / 3600, a / 60 % 60, a % 60);
    if s != 0 {
        format!("{sign}{h:02}{m:02}{s:02}")
    } else if m != 0 {
        format!("{sign}{h:02}{m:02}")
    } else {
        format!("{sign}{h:02}")
    }
}

fn append_int(b: &mut Vec<u8>, x: i64, width: usize) {
    if x < 0 {
        b.push(b'-');
    }
    b.extend_from_slice(format!("{:0width$}", x.unsigned_abs()).as_bytes());
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct ZoneStd {
    iso: bool,
    colon: bool,
    short: bool,
    seconds: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Std {
    Month,
    LongMonth,
    NumMonth,
    ZeroMonth,
    WeekDay,
    LongWeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    PM,
    Pm,
    TZ,
    Zone(ZoneStd),
    Frac { sep: u8, digits: usize, trim: bool },
}

fn zone_std(iso: bool, colon: bool, short: bool, seconds: bool) -> Std {
    Std::Zone(ZoneStd {
        iso,
        colon,
        short,
        seconds,
    })
}

/// Go's `nextStdChunk`: the literal prefix, the first layout element, and the rest.
fn next_std_chunk(layout: &[u8]) -> (&[u8], Option<Std>, &[u8]) {
    let at = |i: usize, s: &[u8]| layout.len() >= i + s.len() && &layout[i..i + s.len()] == s;
    for i in 0..layout.len() {
        let found = |n: usize, std: Std| Some((&layout[..i], Some(std), &layout[i + n..]));
        let hit = match layout[i] {
            b'J' if at(i, b"Jan") => {
                if at(i, b"January") {
                    found(7, Std::LongMonth)
                } else if !starts_lower(&layout[i + 3..]) {
                    found(3, Std::Month)
                } else {
                    None
                }
            }
            b'M' if layout.len() >= i + 3 => {
                if at(i, b"Monday") {
                    found(6, Std::LongWeekDay)
                } else if at(i, b"Mon") && !starts_lower(&layout[i + 3..]) {
                    found(3, Std::WeekDay)
                } else if at(i, b"MST") {
                    found(3, Std::TZ)
                } else {
                    None
                }
            }
            b'0' => match layout.get(i + 1) {
                Some(d @ b'1'..=b'6') => found(
                    2,
                    [
                        Std::ZeroMonth,
                        Std::ZeroDay,
                        Std::ZeroHour12,
                        Std::ZeroMinute,
                        Std::ZeroSecond,
                        Std::Year,
                    ][usize::from(d - b'1')],
                ),
                Some(b'0') if layout.get(i + 2) == Some(&b'2') => found(3, Std::ZeroYearDay),
                _ => None,
            },
            b'1' => {
                if layout.get(i + 1) == Some(&b'5') {
                    found(2, Std::Hour)
                } else {
                    found(1, Std::NumMonth)
                }
            }
            b'2' => {
                if at(i, b"2006") {
                    found(4, Std::LongYear)
                } else {
                    found(1, Std::Day)
                }
            }
            b'_' => {
                if layout.get(i + 1) == Some(&b'2') {
                    if at(i + 1, b"2006") {
                        return (&layout[..i + 1], Some(Std::LongYear), &layout[i + 5..]);
                    }
                    found(2, Std::UnderDay)
                } else if at(i + 1, b"_2") {
                    found(3, Std::UnderYearDay)
                } else {
                    None
                }
            }
            b'3' => found(1, Std::Hour12),
            b'4' => found(1, Std::Minute),
            b'5' => found(1, Std::Second),
            b'P' if layout.get(i + 1) == Some(&b'M') => found(2, Std::PM),
            b'p' if layout.get(i + 1) == Some(&b'm') => found(2, Std::Pm),
            b'-' => {
                if at(i, b"-070000") {
                    found(7, zone_std(false, false, false, true))
                } else if at(i, b"-07:00:00") {
                    found(9, zone_std(false, true, false, true))
                } else if at(i, b"-0700") {
                    found(5, zone_std(false, false, false, false))
                } else if at(i, b"-07:00") {
                    found(6, zone_std(false, true, false, false))
                } else if at(i, b"-07") {
                    found(3, zone_std(false, false, true, false))
                } else {
                    None
                }
            }
            b'Z' => {
                if at(i, b"Z070000") {
                    found(7, zone_std(true, false, false, true))
                } else if at(i, b"Z07:00:00") {
                    found(9, zone_std(true, true, false, true))
                } else if at(i, b"Z0700") {
                    found(5, zone_std(true, false, false, false))
                } else if at(i, b"Z07:00") {
                    found(6, zone_std(true, true, false, false))
                } else if at(i, b"Z07") {
                    found(3, zone_std(true, false, true, false))
                } else {
                    None
                }
            }
            c @ (b'.' | b',') => match layout.get(i + 1) {
                Some(&ch @ (b'0' | b'9')) => {
                    let mut j = i + 1;
                    while j < layout.len() && layout[j] == ch {
                        j += 1;
                    }
                    if layout.get(j).is_some_and(u8::is_ascii_digit) {
                        None
                    } else {
                        found(
                            j - i,
                            Std::Frac {
                                sep: c,
                                digits: j - (i + 1),
                                trim: ch == b'9',
                            },
                        )
                    }
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(h) = hit {
            return h;
        }
    }
    (layout, None, &[])
}

fn starts_lower(s: &[u8]) -> bool {
    s.first().is_some_and(u8::is_ascii_lowercase)
}

fn is_digit(s: &[u8], i: usize) -> bool {
    s.get(i).is_some_and(u8::is_ascii_digit)
}

/// Go's `leadingInt`: the leading decimal digits; `None` on overflow past 2^63.
fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > (1 << 63) / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > 1 << 63 {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

/// Go's `time.atoi`: an optional sign, then digits only (an empty string is 0).
fn atoi(s: &[u8]) -> Option<i64> {
    let (neg, s) = match s.first() {
        Some(&c @ (b'-' | b'+')) => (c == b'-', &s[1..]),
        _ => (false, s),
    };
    let (q, rem) = leading_int(s)?;
    if !rem.is_empty() {
        return None;
    }
    let x = q as i64;
    Some(if neg { x.wrapping_neg() } else { x })
}

fn getnum(s: &[u8], fixed: bool) -> Option<(i64, &[u8])> {
    if !is_digit(s, 0) {
        return None;
    }
    if !is_digit(s, 1) {
        if fixed {
            return None;
        }
        return Some((i64::from(s[0] - b'0'), &s[1..]));
    }
    Some((
        i64::from(s[0] - b'0') * 10 + i64::from(s[1] - b'0'),
        &s[2..],
    ))
}

fn getnum3(s: &[u8], fixed: bool) -> Option<(i64, &[u8])> {
    let mut n = 0;
    let mut i = 0;
    while i < 3 && is_digit(s, i) {
        n = n * 10 + i64::from(s[i] - b'0');
        i += 1;
    }
    if i == 0 || (fixed && i != 3) {
        return None;
    }
    Some((n, &s[i..]))
}

/// Go's `lookup` over name tables, ASCII letters compared without case.
fn lookup_name<'a>(tab: &[&str], val: &'a [u8], short: bool) -> Option<&'a [u8]> {
    for name in tab {
        let v = if short {
            &name.as_bytes()[..3]
        } else {
            name.as_bytes()
        };
        if val.len() >= v.len() && val[..v.len()].eq_ignore_ascii_case(v) {
            return Some(&val[v.len()..]);
        }
    }
    None
}

fn cutspace(mut s: &[u8]) -> &[u8] {
    while s.first() == Some(&b' ') {
        s = &s[1..];
    }
    s
}

fn skip<'a>(mut value: &'a [u8], mut prefix: &[u8]) -> Option<&'a [u8]> {
    while !prefix.is_empty() {
        if prefix[0] == b' ' {
            if !value.is_empty() && value[0] != b' ' {
                return None;
            }
            prefix = cutspace(prefix);
            value = cutspace(value);
            continue;
        }
        if value.first() != Some(&prefix[0]) {
            return None;
        }
        prefix = &prefix[1..];
        value = &value[1..];
    }
    Some(value)
}

/// Go's `parseNanoseconds`: `Err(())` for a bad number or an out-of-range one.
fn parse_nanoseconds(value: &[u8], mut nbytes: usize) -> Result<i64, ()> {
    if !matches!(value.first(), Some(b'.' | b',')) {
        return Err(());
    }
    if nbytes > 10 {
        nbytes = 10;
    }
    let mut ns = atoi(&value[1..nbytes]).ok_or(())?;
    if ns < 0 {
        return Err(());
    }
    for _ in 0..10 - nbytes {
        ns *= 10;
    }
    Ok(ns)
}

fn parse_signed_offset(value: &[u8]) -> usize {
    if !matches!(value.first(), Some(b'-' | b'+')) {
        return 0;
    }
    match leading_int(&value[1..]) {
        Some((x, rem)) if rem.len() != value.len() - 1 && x <= 23 => value.len() - rem.len(),
        _ => 0,
    }
}

fn parse_time_zone(value: &[u8]) -> Option<usize> {
    if value.len() < 3 {
        return None;
    }
    if value.starts_with(b"ChST") || value.starts_with(b"MeST") {
        return Some(4);
    }
    if value.starts_with(b"GMT") {
        return Some(
            3 + if value.len() == 3 {
                0
            } else {
                parse_signed_offset(&value[3..])
            },
        );
    }
    if value[0] == b'+' || value[0] == b'-' {
        let n = parse_signed_offset(value);
        return (n > 0).then_some(n);
    }
    let upper = value
        .iter()
        .take(6)
        .take_while(|c| c.is_ascii_uppercase())
        .count();
    match upper {
        5 if value[4] == b'T' => Some(5),
        4 if value[3] == b'T' || value.starts_with(b"WITA") => Some(4),
        3 => Some(3),
        _ => None,
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

const DAYS_BEFORE: [i64; 13] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365];

fn days_in(month: i64, year: i64) -> i64 {
    if month == 2 && is_leap(year) {
        return 29;
    }
    DAYS_BEFORE[month as usize] - DAYS_BEFORE[month as usize - 1]
}

/// Seconds since the Unix epoch of a UTC civil time (days from the proleptic Gregorian calendar).
fn unix_of(year: i64, month: i64, day: i64, hour: i64, min: i64, sec: i64) -> Option<i64> {
    let date =
        chrono::NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month as u32, day as u32)?;
    let days = date.signed_duration_since(chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?);
    Some(days.num_days() * 86_400 + hour * 3600 + min * 60 + sec)
}

/// `time.ParseInLocation(layout, value, time.Local)` with `Local` UTC; `None` where Go returns an
/// error (the message is not kept: a failing template is used as written either way).
pub(crate) fn parse_in_local(layout: &[u8], value: &[u8]) -> Option<Time> {
    let mut layout = layout;
    let mut value = value;
    let (mut am, mut pm) = (false, false);
    let (mut year, mut month, mut day, mut yday) = (0_i64, -1_i64, -1_i64, -1_i64);
    let (mut hour, mut min, mut sec, mut nsec) = (0_i64, 0_i64, 0_i64, 0_i64);
    let mut utc = false;
    let mut zone_offset: Option<i64> = None;
    let mut zone_name: &[u8] = b"";
    loop {
        let (prefix, std, suffix) = next_std_chunk(layout);
        value = skip(value, prefix)?;
        let Some(std) = std else {
            if !value.is_empty() {
                return None;
            }
            break;
        };
        layout = suffix;
        match std {
            Std::Year => {
                if value.len() < 2 {
                    return None;
                }
                let p = &value[..2];
                value = &value[2..];
                year = atoi(p)?;
                year += if year >= 69 { 1900 } else { 2000 };
            }
            Std::LongYear => {
                if value.len() < 4 || !is_digit(value, 0) {
                    return None;
                }
                year = atoi(&value[..4])?;
                value = &value[4..];
            }
            Std::Month | Std::LongMonth => {
                let short = std == Std::Month;
                let mut found = None;
                for (i, name) in LONG_MONTHS.iter().enumerate() {
                    if let Some(rest) = lookup_name(&[name], value, short) {
                        found = Some((i, rest));
                        break;
                    }
                }
                let (i, rest) = found?;
                month = i as i64 + 1;
                value = rest;
            }
            Std::NumMonth | Std::ZeroMonth => {
                let (m, rest) = getnum(value, std == Std::ZeroMonth)?;
                if !(1..=12).contains(&m) {
                    return None;
                }
                (month, value) = (m, rest);
            }
            Std::WeekDay | Std::LongWeekDay => {
                value = lookup_name(&LONG_DAYS, value, std == Std::WeekDay)?;
            }
            Std::Day | Std::UnderDay | Std::ZeroDay => {
                if std == Std::UnderDay && value.first() == Some(&b' ') {
                    value = &value[1..];
                }
                (day, value) = getnum(value, std == Std::ZeroDay)?;
            }
            Std::UnderYearDay | Std::ZeroYearDay => {
                for _ in 0..2 {
                    if std == Std::UnderYearDay && value.first() == Some(&b' ') {
                        value = &value[1..];
                    }
                }
                (yday, value) = getnum3(value, std == Std::ZeroYearDay)?;
            }
            Std::Hour => {
                (hour, value) = getnum(value, false)?;
                if hour >= 24 {
                    return None;
                }
            }
            Std::Hour12 | Std::ZeroHour12 => {
                (hour, value) = getnum(value, std == Std::ZeroHour12)?;
                if hour > 12 {
                    return None;
                }
            }
            Std::Minute | Std::ZeroMinute => {
                (min, value) = getnum(value, std == Std::ZeroMinute)?;
                if min >= 60 {
                    return None;
                }
            }
            Std::Second | Std::ZeroSecond => {
                (sec, value) = getnum(value, std == Std::ZeroSecond)?;
                if sec >= 60 {
                    return None;
                }
                if value.len() >= 2 && matches!(value[0], b'.' | b',') && is_digit(value, 1) {
                    if let (_, Some(Std::Frac { .. }), _) = next_std_chunk(layout) {
                        continue;
                    }
                    let mut n = 2;
                    while is_digit(value, n) {
                        n += 1;
                    }
                    nsec = parse_nanoseconds(value, n).ok()?;
                    value = &value[n..];
                }
            }
            Std::PM | Std::Pm => {
                if value.len() < 2 {
                    return None;
                }
                let p = &value[..2];
                value = &value[2..];
                let (a, p_) = if std == Std::PM {
                    (b"AM", b"PM")
                } else {
                    (b"am", b"pm")
                };
                if p == p_ {
                    pm = true;
                } else if p == a {
                    am = true;
                } else {
                    return None;
                }
            }
            Std::Zone(z) => {
                if z.iso && value.first() == Some(&b'Z') {
                    value = &value[1..];
                    utc = true;
                    continue;
                }
                let (sign, hh, mm, ss): (u8, &[u8], &[u8], &[u8]);
                if z.colon && !z.seconds {
                    if value.len() < 6 || value[3] != b':' {
                        return None;
                    }
                    (sign, hh, mm, ss) = (value[0], &value[1..3], &value[4..6], b"00");
                    value = &value[6..];
                } else if z.short {
                    if value.len() < 3 {
                        return None;
                    }
                    (sign, hh, mm, ss) = (value[0], &value[1..3], b"00", b"00");
                    value = &value[3..];
                } else if z.colon {
                    if value.len() < 9 || value[3] != b':' || value[6] != b':' {
                        return None;
                    }
                    (sign, hh, mm, ss) = (value[0], &value[1..3], &value[4..6], &value[7..9]);
                    value = &value[9..];
                } else if z.seconds {
                    if value.len() < 7 {
                        return None;
                    }
                    (sign, hh, mm, ss) = (value[0], &value[1..3], &value[3..5], &value[5..7]);
                    value = &value[7..];
                } else {
                    if value.len() < 5 {
                        return None;
                    }
                    (sign, hh, mm, ss) = (value[0], &value[1..3], &value[3..5], b"00");
                    value = &value[5..];
                }
                let (hr, _) = getnum(hh, true)?;
                let (m, _) = getnum(mm, true)?;
                let (s, _) = getnum(ss, true)?;
                if hr > 24 || m > 60 || s > 60 {
                    return None;
                }
                let off = (hr * 60 + m) * 60 + s;
                zone_offset = Some(match sign {
                    b'+' => off,
                    b'-' => -off,
                    _ => return None,
                });
            }
            Std::TZ => {
                if value.starts_with(b"UTC") {
                    utc = true;
                    value = &value[3..];
                    continue;
                }
                let n = parse_time_zone(value)?;
                (zone_name, value) = (&value[..n], &value[n..]);
            }
            Std::Frac { digits, trim, .. } => {
                if !trim {
                    let ndigit = 1 + digits;
                    if value.len() < ndigit {
                        return None;
                    }
                    nsec = parse_nanoseconds(value, ndigit).ok()?;
                    value = &value[ndigit..];
                } else {
                    if value.len() < 2
                        || !matches!(value[0], b'.' | b',')
                        || !value[1].is_ascii_digit()
                    {
                        continue;
                    }
                    let mut i = 0;
                    while i + 1 < value.len() && value[i + 1].is_ascii_digit() {
                        i += 1;
                    }
                    nsec = parse_nanoseconds(value, 1 + i).ok()?;
                    value = &value[1 + i..];
                }
            }
        }
    }
    if pm && hour < 12 {
        hour += 12;
    } else if am && hour == 12 {
        hour = 0;
    }
    if yday >= 0 {
        let mut d = 0;
        let mut m = 0;
        if is_leap(year) {
            if yday == 31 + 29 {
                m = 2;
                d = 29;
            } else if yday > 31 + 29 {
                yday -= 1;
            }
        }
        if !(1..=365).contains(&yday) {
            return None;
        }
        if m == 0 {
            m = (yday - 1) / 31 + 1;
            if DAYS_BEFORE[m as usize] < yday {
                m += 1;
            }
            d = yday - DAYS_BEFORE[m as usize - 1];
        }
        if month >= 0 && month != m {
            return None;
        }
        month = m;
        if day >= 0 && day != d {
            return None;
        }
        day = d;
    } else {
        if month < 0 {
            month = 1;
        }
        if day < 0 {
            day = 1;
        }
    }
    if day < 1 || day > days_in(month, year) {
        return None;
    }
    let wall = unix_of(year, month, day, hour, min, sec)?;
    let mut t = Time {
        secs: wall,
        nanos: nsec as u32,
        loc: Loc::Utc,
        mono: None,
    };
    if utc {
        return Some(t);
    }
    t.loc = Loc::Local;
    if let Some(off) = zone_offset {
        t.secs -= off;
        if off == 0 && (zone_name.is_empty() || zone_name == b"UTC") {
            return Some(t);
        }
        t.loc = Loc::Fixed(Arc::from(String::from_utf8_lossy(zone_name)), off as i32);
        return Some(t);
    }
    if !zone_name.is_empty() {
        let mut off = 0;
        if zone_name.len() > 3 && zone_name.starts_with(b"GMT") {
            off = atoi(&zone_name[3..]).unwrap_or(0) * 3600;
        }
        t.loc = Loc::Fixed(Arc::from(String::from_utf8_lossy(zone_name)), off as i32);
        return Some(t);
    }
    Some(t)
}

/// `time.LoadLocation(name)`, falling back to UTC as slim-sprig does on an error.
pub(crate) fn load_location(name: &[u8]) -> Loc {
    match name {
        b"" | b"UTC" => Loc::Utc,
        b"Local" => Loc::Local,
        other => std::str::from_utf8(other)
            .ok()
            .and_then(|s| s.parse::<chrono_tz::Tz>().ok())
            .map_or(Loc::Utc, Loc::Tz),
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The broken-down wall time of seconds past chrono's range (years beyond ±262,143, which
/// `AddDate` reaches), by the proleptic Gregorian calendar as Go computes it; `None` for the
/// extremes where Go's own arithmetic wraps.
fn civil_of_wall(wall: i64) -> Option<Civil> {
    if wall.unsigned_abs() > 1 << 60 {
        return None;
    }
    let days = wall.div_euclid(86_400);
    let secs = wall.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    Some(Civil {
        year,
        month: month as u32,
        day: day as u32,
        yday: (days - days_from_civil(year, 1, 1) + 1) as u32,
        weekday: (days + 4).rem_euclid(7) as usize,
        hour: (secs / 3600) as u32,
        min: (secs / 60 % 60) as u32,
        sec: (secs % 60) as u32,
    })
}
