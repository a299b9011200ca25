//! The next activation of a cron schedule after a given instant, computed the way robfig/cron
//! v3's `SpecSchedule.Next` computes it, so DST gaps and repeats behave as they did upstream.
//!
//! ```text
//!  instant (unix s) ──► wall clock in the schedule's zone ──► bump month / day / hour / minute /
//!  second until each field matches, re-checking from the month after any wrap-around ──► instant
//! ```
//!
//! robfig walks Go `time.Time` values: `time.Date` builds an instant from wall-clock fields,
//! `AddDate` re-builds from the wall clock with a larger day or month, `Add` moves the absolute
//! instant. Their DST behaviour comes from those three operations, so [`Clock`] reproduces them
//! exactly, including how Go resolves a wall time that does not exist (spring forward) or
//! exists twice (fall back). What follows from that, and is therefore kept on purpose:
//!
//! * a daily slot inside a spring-forward gap is skipped that day (02:30 on the day 02:00
//!   jumps to 03:00 does not run), an hourly schedule just has one hour fewer;
//! * a daily slot inside a fall-back repeat runs twice (01:00 EDT and 01:00 EST), an hourly
//!   schedule has one hour more.
//!
//! Invariants: no time is returned that is not strictly after the input; the search gives up
//! (returns `None`) five years after the start, as robfig does, and after a fixed number of
//! steps in case a zone's rules ever made the walk cycle.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Offset, TimeZone, Timelike};
use chrono_tz::Tz;

use crate::parse::CronFields;

/// An upper bound on walk steps. A five-year search of the densest or sparsest schedule takes
/// a few thousand; the bound only guards against a loop nobody has foreseen.
const MAX_STEPS: u32 = 1_000_000;

/// Go-style wall-clock arithmetic on unix seconds in one zone.
struct Clock {
    zone: Tz,
}

impl Clock {
    /// Seconds east of UTC in force at `unix`.
    fn offset(&self, unix: i64) -> Option<i64> {
        let utc = DateTime::from_timestamp(unix, 0)?.naive_utc();
        Some(i64::from(
            self.zone
                .offset_from_utc_datetime(&utc)
                .fix()
                .local_minus_utc(),
        ))
    }

    /// The wall clock at `unix`.
    fn wall(&self, unix: i64) -> Option<NaiveDateTime> {
        Some(DateTime::from_timestamp(unix + self.offset(unix)?, 0)?.naive_utc())
    }

    /// Go's `time.Date(year, month, day, hour, minute, second, 0, zone)`: out-of-range fields
    /// are normalised (month 13 is January of the next year, day 32 rolls into the next
    /// month), and the wall time is turned into an instant the way Go does it: take the
    /// offset in force at the wall time read as if it were UTC, and if the instant this gives
    /// lies in another offset period, use that period's offset instead. A wall time in a gap
    /// or a repeat therefore resolves exactly as Go resolves it.
    fn date(
        &self,
        year: i32,
        month: i64,
        day: i64,
        hour: i64,
        minute: i64,
        second: i64,
    ) -> Option<i64> {
        let months = i64::from(year) * 12 + (month - 1);
        let first = NaiveDate::from_ymd_opt(
            i32::try_from(months.div_euclid(12)).ok()?,
            u32::try_from(months.rem_euclid(12) + 1).ok()?,
            1,
        )?;
        let days = first
            .signed_duration_since(DateTime::UNIX_EPOCH.date_naive())
            .num_days()
            + (day - 1);
        let local = days * 86_400 + hour * 3_600 + minute * 60 + second;
        let guess = local - self.offset(local)?;
        Some(local - self.offset(guess)?)
    }

    /// Go's `t.AddDate(0, months, days)`: the same wall clock on a later calendar date.
    fn add_date(&self, unix: i64, months: i64, days: i64) -> Option<i64> {
        let w = self.wall(unix)?;
        self.date(
            w.year(),
            i64::from(w.month()) + months,
            i64::from(w.day()) + days,
            i64::from(w.hour()),
            i64::from(w.minute()),
            i64::from(w.second()),
        )
    }
}

/// The first activation strictly after `after` (unix seconds, already truncated to the
/// second), or `None` when there is none within five years.
pub(crate) fn next(fields: &CronFields, zone: Tz, after: i64) -> Option<i64> {
    let clock = Clock { zone };
    let mut t = after.checked_add(1)?;
    // Once any field had to move, everything below it starts from its minimum.
    let mut added = false;
    let year_limit = clock.wall(t)?.year() + 5;
    let mut steps = 0_u32;
    let mut step = || {
        steps += 1;
        (steps <= MAX_STEPS).then_some(())
    };

    'wrap: loop {
        step()?;
        let w = clock.wall(t)?;
        if w.year() > year_limit {
            return None;
        }

        while !fields.month.has(clock.wall(t)?.month()) {
            step()?;
            if !added {
                added = true;
                let w = clock.wall(t)?;
                t = clock.date(w.year(), i64::from(w.month()), 1, 0, 0, 0)?;
            }
            t = clock.add_date(t, 1, 0)?;
            if clock.wall(t)?.month() == 1 {
                continue 'wrap;
            }
        }

        while !day_matches(fields, clock.wall(t)?) {
            step()?;
            if !added {
                added = true;
                let w = clock.wall(t)?;
                t = clock.date(w.year(), i64::from(w.month()), i64::from(w.day()), 0, 0, 0)?;
            }
            t = clock.add_date(t, 0, 1)?;
            // Where midnight does not exist, Go's Date lands an hour off; move back to the
            // day's first hour the way robfig does (forward from 23:xx, back from 01:xx).
            let hour = i64::from(clock.wall(t)?.hour());
            if hour != 0 {
                t += if hour > 12 {
                    (24 - hour) * 3_600
                } else {
                    -hour * 3_600
                };
            }
            if clock.wall(t)?.day() == 1 {
                continue 'wrap;
            }
        }

        while !fields.hour.has(clock.wall(t)?.hour()) {
            step()?;
            if !added {
                added = true;
                let w = clock.wall(t)?;
                t = clock.date(
                    w.year(),
                    i64::from(w.month()),
                    i64::from(w.day()),
                    i64::from(w.hour()),
                    0,
                    0,
                )?;
            }
            t += 3_600;
            if clock.wall(t)?.hour() == 0 {
                continue 'wrap;
            }
        }

        while !fields.minute.has(clock.wall(t)?.minute()) {
            step()?;
            if !added {
                added = true;
                t = t.div_euclid(60) * 60;
            }
            t += 60;
            if clock.wall(t)?.minute() == 0 {
                continue 'wrap;
            }
        }

        while !fields.second.has(clock.wall(t)?.second()) {
            step()?;
            // The instant is already whole seconds, so robfig's truncation is a no-op here.
            added = true;
            t += 1;
            if clock.wall(t)?.second() == 0 {
                continue 'wrap;
            }
        }

        return Some(t);
    }
}

/// robfig's day rule: when either day field is a star, both must match; when both are
/// restricted, either one suffices (so `0 0 1,15 * MON` runs on the 1st, the 15th and Mondays).
fn day_matches(fields: &CronFields, wall: NaiveDateTime) -> bool {
    let dom = fields.day_of_month.has(wall.day());
    let dow = fields
        .day_of_week
        .has(wall.weekday().num_days_from_sunday());
    if fields.day_of_month.star || fields.day_of_week.star {
        dom && dow
    } else {
        dom || dow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn unix(rfc3339: &str) -> i64 {
        DateTime::parse_from_rfc3339(rfc3339).unwrap().timestamp()
    }

    #[test]
    fn date_resolves_gaps_and_repeats_like_go() {
        // Go's time.Date for wall times that do not exist or exist twice. The asymmetry
        // between zones west and east of Greenwich is Go's: its resolution reads the wall time
        // as UTC to pick a first offset.
        let cases: &[(Tz, &str, &str)] = &[
            // New York, 2012-03-11 02:30 does not exist: Go gives 01:30 EST.
            (
                chrono_tz::America::New_York,
                "2012-03-11 02:30",
                "2012-03-11T01:30:00-05:00",
            ),
            // New York, 2012-11-04 01:30 exists twice: Go gives the first (EDT).
            (
                chrono_tz::America::New_York,
                "2012-11-04 01:30",
                "2012-11-04T01:30:00-04:00",
            ),
            // Berlin, 2024-03-31 02:30 does not exist: Go gives 03:30 CEST.
            (
                chrono_tz::Europe::Berlin,
                "2024-03-31 02:30",
                "2024-03-31T03:30:00+02:00",
            ),
            // Berlin, 2024-10-27 02:30 exists twice: Go gives the second (CET).
            (
                chrono_tz::Europe::Berlin,
                "2024-10-27 02:30",
                "2024-10-27T02:30:00+01:00",
            ),
        ];
        for (zone, wall, want) in cases {
            let w = NaiveDateTime::parse_from_str(wall, "%Y-%m-%d %H:%M").unwrap();
            let clock = Clock { zone: *zone };
            let got = clock.date(
                w.year(),
                i64::from(w.month()),
                i64::from(w.day()),
                i64::from(w.hour()),
                i64::from(w.minute()),
                0,
            );
            assert_eq!(got, Some(unix(want)), "{zone} {wall}");
        }
    }

    #[test]
    fn date_normalises_overflowing_fields_like_go() {
        let clock = Clock {
            zone: chrono_tz::UTC,
        };
        assert_eq!(
            clock.date(2012, 13, 1, 0, 0, 0),
            Some(unix("2013-01-01T00:00:00Z"))
        );
        assert_eq!(
            clock.date(2012, 1, 32, 0, 0, 0),
            Some(unix("2012-02-01T00:00:00Z"))
        );
        assert_eq!(
            clock.date(2012, 2, 30, 0, 0, 0),
            Some(unix("2012-03-01T00:00:00Z"))
        );
        assert_eq!(
            clock.date(2012, 0, 1, 0, 0, 0),
            Some(unix("2011-12-01T00:00:00Z"))
        );
    }
}
