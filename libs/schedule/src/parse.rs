//! Parsing a Plan's `spec.schedule.cron` in the dialect of robfig/cron v3 `ParseStandard`, which
//! is what upstream uses, so a schedule means here what it meant there.
//!
//! ```text
//!  "CRON_TZ=Europe/Berlin 0 2 * * MON-FRI"
//!   └─ zone prefix ─┘ └──── body ───────┘
//!        │                 │
//!        ▼                 ▼
//!   chrono_tz::Tz    "@descriptor" ──► fixed field sets, or Every(seconds)
//!                    5 fields ──────► a bit set per field (+ "was it a star" for the day rule)
//! ```
//!
//! Invariants: every accepted field set is non-empty and within its bounds; a day-of-month that
//! can never occur in any of the selected months is rejected here instead of yielding a schedule
//! that never fires; every error names the part of the spec that is wrong and why.

use std::fmt;
use std::str::FromStr;

use chrono_tz::Tz;
use thiserror::Error;

use crate::duration::{DurationError, parse_go_duration};

/// A field's allowed values as a bit set (bit `n` = value `n`), plus whether the field was
/// written as a bare `*`/`?` (or `*/1`): the day-of-month/day-of-week rule depends on that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bits {
    pub(crate) set: u64,
    pub(crate) star: bool,
}

impl Bits {
    pub(crate) fn has(self, value: u32) -> bool {
        value < 64 && self.set & (1 << value) != 0
    }

    fn only(value: u32) -> Self {
        Self {
            set: 1 << value,
            star: false,
        }
    }

    fn all(field: CronField) -> Self {
        let (min, max) = field.bounds();
        Self {
            set: range_bits(min, max, 1),
            star: true,
        }
    }
}

/// The six bit sets of a cron schedule (seconds are always `{0}` in the standard dialect but
/// are kept so the time search is the same walk robfig/cron makes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CronFields {
    pub(crate) second: Bits,
    pub(crate) minute: Bits,
    pub(crate) hour: Bits,
    pub(crate) day_of_month: Bits,
    pub(crate) month: Bits,
    pub(crate) day_of_week: Bits,
}

/// What a parsed spec describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A 5-field spec or a calendar descriptor (`@daily` …).
    Cron(CronFields),
    /// `@every <duration>`: a fixed interval, in whole seconds (at least 1).
    Every(i64),
}

/// One of the five fields of a standard cron spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CronField {
    /// Minute, 0–59.
    Minute,
    /// Hour, 0–23.
    Hour,
    /// Day of the month, 1–31.
    DayOfMonth,
    /// Month, 1–12 or JAN–DEC.
    Month,
    /// Day of the week, 0–6 (Sunday = 0) or SUN–SAT.
    DayOfWeek,
}

impl CronField {
    const ORDER: [Self; 5] = [
        Self::Minute,
        Self::Hour,
        Self::DayOfMonth,
        Self::Month,
        Self::DayOfWeek,
    ];

    fn bounds(self) -> (u32, u32) {
        match self {
            Self::Minute => (0, 59),
            Self::Hour => (0, 23),
            Self::DayOfMonth => (1, 31),
            Self::Month => (1, 12),
            Self::DayOfWeek => (0, 6),
        }
    }

    fn names(self) -> &'static [&'static str] {
        const MONTHS: [&str; 12] = [
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        match self {
            Self::Month => &MONTHS,
            Self::DayOfWeek => &DAYS,
            _ => &[],
        }
    }

    /// `names()[i]` stands for this value.
    fn first_named_value(self) -> u32 {
        match self {
            Self::Month => 1,
            _ => 0,
        }
    }

    /// What a value of this field may look like, for error messages.
    fn expected(self) -> &'static str {
        match self {
            Self::Minute => "a number from 0 to 59",
            Self::Hour => "a number from 0 to 23",
            Self::DayOfMonth => "a number from 1 to 31",
            Self::Month => "a number from 1 to 12 or a month name (JAN-DEC)",
            Self::DayOfWeek => "a number from 0 (Sunday) to 6 or a day name (SUN-SAT)",
        }
    }
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::DayOfMonth => "day-of-month",
            Self::Month => "month",
            Self::DayOfWeek => "day-of-week",
        })
    }
}

/// Why a schedule spec was rejected. The message is meant for a person reading a Plan's
/// condition: it says which part is wrong and what would be accepted.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ParseError {
    /// The spec is empty or only whitespace.
    #[error(
        "the schedule is empty (expected 5 fields such as \"0 2 * * *\" or a descriptor such as \"@daily\")"
    )]
    Empty,
    /// `CRON_TZ=`/`TZ=` without a zone name.
    #[error(
        "the {prefix} prefix names no time zone (write e.g. \"{prefix}Europe/Berlin 0 2 * * *\")"
    )]
    MissingZone {
        /// `CRON_TZ=` or `TZ=`.
        prefix: &'static str,
    },
    /// `CRON_TZ=<zone>`/`TZ=<zone>` with nothing after it.
    #[error("nothing follows the {prefix}{zone} prefix (write e.g. \"{prefix}{zone} 0 2 * * *\")")]
    MissingScheduleAfterZone {
        /// `CRON_TZ=` or `TZ=`.
        prefix: &'static str,
        /// The zone name as written.
        zone: String,
    },
    /// The zone of a `CRON_TZ=`/`TZ=` prefix is not in the time-zone database.
    #[error(
        "unknown time zone {zone:?} in the {prefix} prefix (expected an IANA name such as \"Europe/Berlin\" or \"UTC\")"
    )]
    UnknownZone {
        /// `CRON_TZ=` or `TZ=`.
        prefix: &'static str,
        /// The zone name as written.
        zone: String,
    },
    /// Something starting with `@` that is not a known descriptor.
    #[error(
        "unknown descriptor {0:?} (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)"
    )]
    UnknownDescriptor(String),
    /// `@every` with a duration that does not parse.
    #[error("@every {input:?}: {problem}")]
    InvalidEvery {
        /// The text after `@every`.
        input: String,
        /// What is wrong with it.
        problem: DurationError,
    },
    /// `@every` with a zero or negative duration.
    #[error("@every {input:?}: the interval must be longer than zero")]
    NonPositiveEvery {
        /// The text after `@every`.
        input: String,
    },
    /// Not exactly five whitespace-separated fields.
    #[error(
        "expected exactly 5 fields (minute hour day-of-month month day-of-week), found {found}"
    )]
    FieldCount {
        /// How many fields the spec has.
        found: usize,
    },
    /// One field is malformed or out of range.
    #[error("{field} field {text:?}: {problem}")]
    Field {
        /// Which field.
        field: CronField,
        /// The whole field as written.
        text: String,
        /// What is wrong with it.
        problem: FieldError,
    },
    /// The day-of-month field selects only days that none of the selected months has (e.g.
    /// `0 0 31 4 *` or `0 0 30 FEB *`): such a schedule would never fire.
    #[error(
        "day-of-month {days:?} never occurs in month {months:?}, so the schedule would never fire"
    )]
    NeverFires {
        /// The day-of-month field as written.
        days: String,
        /// The month field as written.
        months: String,
    },
}

/// What is wrong inside one field.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FieldError {
    /// The field has no values at all (e.g. `,`).
    #[error("no values")]
    NoValues,
    /// A value is neither a number nor a known name.
    #[error("{token:?} is not {expected}")]
    NotAValue {
        /// The offending text.
        token: String,
        /// What the field accepts.
        expected: &'static str,
    },
    /// A value below the field's minimum.
    #[error("{value} is below the minimum {min}")]
    BelowMinimum {
        /// The value.
        value: u64,
        /// The field's minimum.
        min: u32,
    },
    /// A value above the field's maximum.
    #[error("{value} is above the maximum {max}")]
    AboveMaximum {
        /// The value.
        value: u64,
        /// The field's maximum.
        max: u32,
    },
    /// A range whose start is after its end (e.g. `5-3`).
    #[error("the range {item:?} starts after it ends")]
    ReversedRange {
        /// The range as written.
        item: String,
    },
    /// A step that is not a positive whole number (e.g. `*/0`, `*/x`).
    #[error("the step in {item:?} must be a whole number of 1 or more")]
    BadStep {
        /// The item as written.
        item: String,
    },
    /// More than one `-` in an item (e.g. `5--5`).
    #[error("{item:?} has more than one '-'")]
    TooManyHyphens {
        /// The item as written.
        item: String,
    },
    /// More than one `/` in an item (e.g. `*//2`).
    #[error("{item:?} has more than one '/'")]
    TooManySlashes {
        /// The item as written.
        item: String,
    },
    /// A range that starts with `*` or `?` (e.g. `*-5`).
    #[error("{item:?}: a range cannot start with '*' or '?'")]
    StarRange {
        /// The item as written.
        item: String,
    },
}

/// Parses a spec; `default_zone` applies when the spec has no `CRON_TZ=`/`TZ=` prefix.
pub(crate) fn parse(spec: &str, default_zone: Tz) -> Result<(Kind, Tz), ParseError> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err(ParseError::Empty);
    }
    let (zone, body) = split_zone(spec, default_zone)?;
    let kind = if body.starts_with('@') {
        parse_descriptor(body)?
    } else {
        Kind::Cron(parse_fields(body)?)
    };
    Ok((kind, zone))
}

/// Parses an IANA zone name (`Europe/Berlin`, `UTC`) as the prefix would.
pub(crate) fn parse_zone_name(name: &str) -> Option<Tz> {
    Tz::from_str(name).ok()
}

fn split_zone(spec: &str, default_zone: Tz) -> Result<(Tz, &str), ParseError> {
    let Some((prefix, rest)) = ["CRON_TZ=", "TZ="]
        .into_iter()
        .find_map(|p| spec.strip_prefix(p).map(|rest| (p, rest)))
    else {
        return Ok((default_zone, spec));
    };
    let (zone, body) = rest
        .split_once(char::is_whitespace)
        .map_or((rest, ""), |(zone, body)| (zone, body.trim()));
    if zone.is_empty() {
        return Err(ParseError::MissingZone { prefix });
    }
    if body.is_empty() {
        return Err(ParseError::MissingScheduleAfterZone {
            prefix,
            zone: zone.to_owned(),
        });
    }
    // Go's time.LoadLocation gives "Local" the process zone; that is our default zone.
    let tz = if zone == "Local" {
        default_zone
    } else {
        parse_zone_name(zone).ok_or_else(|| ParseError::UnknownZone {
            prefix,
            zone: zone.to_owned(),
        })?
    };
    Ok((tz, body))
}

fn parse_descriptor(body: &str) -> Result<Kind, ParseError> {
    let at = |minute: u32, hour: u32, dom: Bits, month: Bits, dow: Bits| {
        Kind::Cron(CronFields {
            second: Bits::only(0),
            minute: Bits::only(minute),
            hour: Bits::only(hour),
            day_of_month: dom,
            month,
            day_of_week: dow,
        })
    };
    let all = Bits::all;
    match body {
        "@yearly" | "@annually" => Ok(at(
            0,
            0,
            Bits::only(1),
            Bits::only(1),
            all(CronField::DayOfWeek),
        )),
        "@monthly" => Ok(at(
            0,
            0,
            Bits::only(1),
            all(CronField::Month),
            all(CronField::DayOfWeek),
        )),
        "@weekly" => Ok(at(
            0,
            0,
            all(CronField::DayOfMonth),
            all(CronField::Month),
            Bits::only(0),
        )),
        "@daily" | "@midnight" => Ok(at(
            0,
            0,
            all(CronField::DayOfMonth),
            all(CronField::Month),
            all(CronField::DayOfWeek),
        )),
        "@hourly" => Ok(Kind::Cron(CronFields {
            second: Bits::only(0),
            minute: Bits::only(0),
            hour: all(CronField::Hour),
            day_of_month: all(CronField::DayOfMonth),
            month: all(CronField::Month),
            day_of_week: all(CronField::DayOfWeek),
        })),
        "@every" => Err(ParseError::InvalidEvery {
            input: String::new(),
            problem: DurationError::Missing,
        }),
        _ => match body
            .strip_prefix("@every")
            .filter(|rest| rest.starts_with(char::is_whitespace))
        {
            Some(rest) => parse_every(rest.trim()),
            None => Err(ParseError::UnknownDescriptor(body.to_owned())),
        },
    }
}

fn parse_every(input: &str) -> Result<Kind, ParseError> {
    let nanos = parse_go_duration(input).map_err(|problem| ParseError::InvalidEvery {
        input: input.to_owned(),
        problem,
    })?;
    if nanos <= 0 {
        return Err(ParseError::NonPositiveEvery {
            input: input.to_owned(),
        });
    }
    // Like robfig/cron's Every: whole seconds, and never less than one second.
    let seconds = i64::try_from(nanos / 1_000_000_000).unwrap_or(i64::MAX);
    Ok(Kind::Every(seconds.max(1)))
}

fn parse_fields(body: &str) -> Result<CronFields, ParseError> {
    let texts: Vec<&str> = body.split_whitespace().collect();
    if texts.len() != CronField::ORDER.len() {
        return Err(ParseError::FieldCount { found: texts.len() });
    }
    let mut sets = [Bits::only(0); 5];
    for ((set, field), text) in sets.iter_mut().zip(CronField::ORDER).zip(&texts) {
        *set = parse_field(text, field).map_err(|problem| ParseError::Field {
            field,
            text: (*text).to_owned(),
            problem,
        })?;
    }
    let [minute, hour, day_of_month, month, day_of_week] = sets;
    let fields = CronFields {
        second: Bits::only(0),
        minute,
        hour,
        day_of_month,
        month,
        day_of_week,
    };
    if !some_day_exists(&fields) {
        return Err(ParseError::NeverFires {
            days: texts[2].to_owned(),
            months: texts[3].to_owned(),
        });
    }
    Ok(fields)
}

/// Whether the day rule can ever be satisfied. Only a restricted day-of-month combined with a
/// `*` day-of-week (so both must match) can be impossible: when both are restricted either one
/// suffices, and every weekday occurs in every month.
fn some_day_exists(fields: &CronFields) -> bool {
    if fields.day_of_month.star || !fields.day_of_week.star {
        return true;
    }
    const LONGEST: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    (1..=12u32).any(|month| {
        fields.month.has(month)
            && (1..=LONGEST[month as usize - 1]).any(|day| fields.day_of_month.has(day))
    })
}

/// A field is a comma-separated list of items; empty items are ignored, as robfig/cron does.
fn parse_field(text: &str, field: CronField) -> Result<Bits, FieldError> {
    let mut bits = Bits {
        set: 0,
        star: false,
    };
    let mut any = false;
    for item in text.split(',').filter(|item| !item.is_empty()) {
        let one = parse_item(item, field)?;
        bits.set |= one.set;
        bits.star |= one.star;
        any = true;
    }
    if !any {
        return Err(FieldError::NoValues);
    }
    Ok(bits)
}

/// One item: `*`, `?`, `N`, `N-M`, each optionally followed by `/step`. `N/step` means
/// `N-max/step`. A star keeps its "star" mark only with a step of 1.
fn parse_item(item: &str, field: CronField) -> Result<Bits, FieldError> {
    let (min, max) = field.bounds();
    let mut parts = item.split('/');
    let range = parts.next().unwrap_or_default();
    let step = parts.next();
    if parts.next().is_some() {
        return Err(FieldError::TooManySlashes {
            item: item.to_owned(),
        });
    }
    let ends: Vec<&str> = range.split('-').collect();
    let (start, mut end, mut star) = match ends.as_slice() {
        ["*" | "?"] => (u64::from(min), u64::from(max), true),
        [first, ..] if *first == "*" || *first == "?" => {
            return Err(FieldError::StarRange {
                item: item.to_owned(),
            });
        }
        [single] => {
            let value = parse_value(single, field)?;
            (value, value, false)
        }
        [low, high] => (parse_value(low, field)?, parse_value(high, field)?, false),
        _ => {
            return Err(FieldError::TooManyHyphens {
                item: item.to_owned(),
            });
        }
    };
    let step = match step {
        None => 1,
        Some(text) => {
            let step: u64 = text.parse().map_err(|_| FieldError::BadStep {
                item: item.to_owned(),
            })?;
            if ends.len() == 1 {
                end = u64::from(max);
            }
            if step > 1 {
                star = false;
            }
            step
        }
    };
    if start < u64::from(min) {
        return Err(FieldError::BelowMinimum { value: start, min });
    }
    if end > u64::from(max) {
        return Err(FieldError::AboveMaximum { value: end, max });
    }
    if start > end {
        return Err(FieldError::ReversedRange {
            item: item.to_owned(),
        });
    }
    if step == 0 {
        return Err(FieldError::BadStep {
            item: item.to_owned(),
        });
    }
    // Bounds were checked above, so both ends fit a u32 below 64.
    let step = u32::try_from(step).unwrap_or(u32::MAX);
    Ok(Bits {
        set: range_bits(start as u32, end as u32, step),
        star,
    })
}

fn parse_value(token: &str, field: CronField) -> Result<u64, FieldError> {
    let lower = token.to_ascii_lowercase();
    if let Some(index) = field.names().iter().position(|name| *name == lower) {
        return Ok(u64::from(field.first_named_value()) + index as u64);
    }
    token.parse().map_err(|_| FieldError::NotAValue {
        token: token.to_owned(),
        expected: field.expected(),
    })
}

fn range_bits(start: u32, end: u32, step: u32) -> u64 {
    (start..=end)
        .step_by(step as usize)
        .fold(0, |bits, value| bits | 1 << value)
}

#[cfg(test)]
mod tests {
    //! Ported from robfig/cron v3 `parser_test.go` (`TestRange`, `TestField`, `TestAll`,
    //! `TestBits`): the bit sets and star marks an item or a field produces, and the errors.

    use super::*;
    use pretty_assertions::assert_eq;

    fn bits(values: &[u32]) -> u64 {
        values.iter().fold(0, |b, v| b | 1 << v)
    }

    #[test]
    fn items_give_robfigs_bit_sets() {
        // (item, field, set, star): robfig's TestRange uses ad-hoc bounds; the same items are
        // checked here against the real field whose bounds match (minute 0-59 covers 0-7 cases,
        // month 1-12 covers the 1-3 star cases by their own bounds).
        let cases: &[(&str, CronField, u64, bool)] = &[
            ("5", CronField::Minute, bits(&[5]), false),
            ("0", CronField::Minute, bits(&[0]), false),
            ("7", CronField::Minute, bits(&[7]), false),
            ("5-5", CronField::Minute, bits(&[5]), false),
            ("5-6", CronField::Minute, bits(&[5, 6]), false),
            ("5-7", CronField::Minute, bits(&[5, 6, 7]), false),
            ("5-6/2", CronField::Minute, bits(&[5]), false),
            ("5-7/2", CronField::Minute, bits(&[5, 7]), false),
            ("5-7/1", CronField::Minute, bits(&[5, 6, 7]), false),
            (
                "*",
                CronField::DayOfWeek,
                bits(&[0, 1, 2, 3, 4, 5, 6]),
                true,
            ),
            (
                "?",
                CronField::DayOfWeek,
                bits(&[0, 1, 2, 3, 4, 5, 6]),
                true,
            ),
            (
                "*/1",
                CronField::DayOfWeek,
                bits(&[0, 1, 2, 3, 4, 5, 6]),
                true,
            ),
            ("*/2", CronField::DayOfWeek, bits(&[0, 2, 4, 6]), false),
            ("*/10", CronField::DayOfMonth, bits(&[1, 11, 21, 31]), false),
            ("5/15", CronField::Minute, bits(&[5, 20, 35, 50]), false),
            ("0/15", CronField::Minute, bits(&[0, 15, 30, 45]), false),
            ("jan-mar", CronField::Month, bits(&[1, 2, 3]), false),
            (
                "Apr-Oct",
                CronField::Month,
                bits(&[4, 5, 6, 7, 8, 9, 10]),
                false,
            ),
            (
                "MON-FRI",
                CronField::DayOfWeek,
                bits(&[1, 2, 3, 4, 5]),
                false,
            ),
            ("Mon/2", CronField::DayOfWeek, bits(&[1, 3, 5]), false),
            ("sun", CronField::DayOfWeek, bits(&[0]), false),
            ("08", CronField::Hour, bits(&[8]), false),
            ("+5", CronField::Minute, bits(&[5]), false),
            ("0/100", CronField::Minute, bits(&[0]), false),
        ];
        for (item, field, set, star) in cases {
            assert_eq!(
                parse_item(item, *field),
                Ok(Bits {
                    set: *set,
                    star: *star
                }),
                "{item} in {field}"
            );
        }
    }

    #[test]
    fn bad_items_are_named() {
        let item = |s: &str| s.to_owned();
        let cases: Vec<(&str, CronField, FieldError)> = vec![
            (
                "5--5",
                CronField::Minute,
                FieldError::TooManyHyphens { item: item("5--5") },
            ),
            (
                "jan-x",
                CronField::Month,
                FieldError::NotAValue {
                    token: item("x"),
                    expected: CronField::Month.expected(),
                },
            ),
            (
                "2-x",
                CronField::Minute,
                FieldError::NotAValue {
                    token: item("x"),
                    expected: CronField::Minute.expected(),
                },
            ),
            (
                "*/-12",
                CronField::Minute,
                FieldError::BadStep {
                    item: item("*/-12"),
                },
            ),
            (
                "*//2",
                CronField::Minute,
                FieldError::TooManySlashes { item: item("*//2") },
            ),
            (
                "0",
                CronField::DayOfMonth,
                FieldError::BelowMinimum { value: 0, min: 1 },
            ),
            (
                "60",
                CronField::Minute,
                FieldError::AboveMaximum { value: 60, max: 59 },
            ),
            (
                "7",
                CronField::DayOfWeek,
                FieldError::AboveMaximum { value: 7, max: 6 },
            ),
            (
                "5-3",
                CronField::Hour,
                FieldError::ReversedRange { item: item("5-3") },
            ),
            (
                "*/0",
                CronField::Minute,
                FieldError::BadStep { item: item("*/0") },
            ),
            (
                "15/0",
                CronField::Minute,
                FieldError::BadStep { item: item("15/0") },
            ),
            (
                "*-5",
                CronField::Minute,
                FieldError::StarRange { item: item("*-5") },
            ),
            (
                "-5",
                CronField::Minute,
                FieldError::NotAValue {
                    token: item(""),
                    expected: CronField::Minute.expected(),
                },
            ),
            (
                "99999999999999999999",
                CronField::Minute,
                FieldError::NotAValue {
                    token: item("99999999999999999999"),
                    expected: CronField::Minute.expected(),
                },
            ),
            (
                "0/99999999999999999999",
                CronField::Minute,
                FieldError::BadStep {
                    item: item("0/99999999999999999999"),
                },
            ),
        ];
        for (text, field, error) in cases {
            assert_eq!(parse_item(text, field), Err(error), "{text} in {field}");
        }
    }

    #[test]
    fn fields_union_their_items() {
        // robfig TestField.
        let cases: &[(&str, u64)] = &[
            ("5", bits(&[5])),
            ("5,6", bits(&[5, 6])),
            ("5,6,7", bits(&[5, 6, 7])),
            ("1,5-7/2,3", bits(&[1, 3, 5, 7])),
            ("1,,3", bits(&[1, 3])),
        ];
        for (text, set) in cases {
            assert_eq!(
                parse_field(text, CronField::Minute),
                Ok(Bits {
                    set: *set,
                    star: false
                }),
                "{text}"
            );
        }
        assert_eq!(
            parse_field(",", CronField::Minute),
            Err(FieldError::NoValues)
        );
        assert_eq!(
            parse_field("*,5", CronField::Minute).map(|b| b.star),
            Ok(true),
            "a star anywhere in the list marks the field"
        );
    }

    #[test]
    fn all_covers_each_field() {
        // robfig TestAll: the full sets of each field.
        let cases: &[(CronField, u64)] = &[
            (CronField::Minute, 0x0fff_ffff_ffff_ffff),
            (CronField::Hour, 0x00ff_ffff),
            (CronField::DayOfMonth, 0xffff_fffe),
            (CronField::Month, 0x1ffe),
            (CronField::DayOfWeek, 0x7f),
        ];
        for (field, set) in cases {
            assert_eq!(
                Bits::all(*field),
                Bits {
                    set: *set,
                    star: true
                },
                "{field}"
            );
        }
    }

    #[test]
    fn descriptors_equal_their_field_forms() {
        // robfig TestParseSchedule / TestStandardSpecSchedule: descriptors and prefixes parse
        // to the same field sets as the spelled-out spec.
        let utc = chrono_tz::UTC;
        let cases: &[(&str, &str)] = &[
            ("@yearly", "0 0 1 1 *"),
            ("@annually", "0 0 1 1 *"),
            ("@monthly", "0 0 1 * *"),
            ("@weekly", "0 0 * * 0"),
            ("@daily", "0 0 * * *"),
            ("@midnight", "0 0 * * *"),
            ("@hourly", "0 * * * *"),
            ("5 * * * *", "5 * * * ?"),
        ];
        for (descriptor, fields) in cases {
            assert_eq!(parse(descriptor, utc), parse(fields, utc), "{descriptor}");
        }
        let tokyo = chrono_tz::Asia::Tokyo;
        let every_hour_at_5 = parse("5 * * * *", utc).unwrap().0;
        assert_eq!(
            parse("CRON_TZ=UTC  5 * * * *", tokyo),
            Ok((every_hour_at_5, utc))
        );
        assert_eq!(
            parse("CRON_TZ=Asia/Tokyo 5 * * * *", utc),
            Ok((every_hour_at_5, tokyo))
        );
        let midnight = parse("@midnight", utc).unwrap().0;
        assert_eq!(parse("TZ=Asia/Tokyo @midnight", utc), Ok((midnight, tokyo)));
        assert_eq!(parse("@every 5m", utc), Ok((Kind::Every(300), utc)));
    }

    #[test]
    fn range_bits_steps() {
        // robfig TestBits.
        assert_eq!(range_bits(0, 0, 1), 0x1);
        assert_eq!(range_bits(1, 1, 1), 0x2);
        assert_eq!(range_bits(1, 5, 2), 0x2a);
        assert_eq!(range_bits(1, 4, 2), 0xa);
        assert_eq!(range_bits(0, 59, u32::MAX), 0x1);
    }
}
