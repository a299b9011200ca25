//! What `Schedule::parse` accepts, in which zone, and the exact message of every rejection (the
//! message becomes a Plan condition, so it has to say what is wrong and where).
//!
//! The rejected specs include robfig/cron v3's own error cases (`TestErrors`,
//! `TestParseScheduleErrors`, `TestStandardSpecSchedule`, `TestSlash0NoHang`, the unsatisfiable
//! specs of `TestNext`), and the few inputs robfig accepts that are rejected here on purpose.

use crate::support;

use std::time::Duration;

use chrono_tz::{America, Asia, Europe, UTC};
use pretty_assertions::assert_eq;
use schedule::{Schedule, parse_zone};
use support::at;

#[test]
fn zone_comes_from_the_prefix_else_the_default() {
    let cases: &[(&str, chrono_tz::Tz, chrono_tz::Tz)] = &[
        ("0 2 * * *", UTC, UTC),
        ("0 2 * * *", Europe::Berlin, Europe::Berlin),
        ("CRON_TZ=UTC  5 * * * *", Europe::Berlin, UTC),
        ("CRON_TZ=Asia/Tokyo 5 * * * *", UTC, Asia::Tokyo),
        ("TZ=UTC  @midnight", America::New_York, UTC),
        ("TZ=Asia/Tokyo @midnight", UTC, Asia::Tokyo),
        ("TZ=America/New_York @every 1h", UTC, America::New_York),
        // Go's "Local" is the process zone.
        ("TZ=Local 0 2 * * *", Europe::Berlin, Europe::Berlin),
        // Surrounding whitespace is ignored.
        ("  CRON_TZ=Europe/Berlin\t0 2 * * *  ", UTC, Europe::Berlin),
    ];
    for (spec, default, zone) in cases {
        let schedule = Schedule::parse(spec, *default)
            .unwrap_or_else(|e| panic!("{spec:?} should parse: {e}"));
        assert_eq!(schedule.zone(), *zone, "{spec:?}");
        assert_eq!(
            schedule.to_string(),
            *spec,
            "Display gives the spec as written"
        );
    }
}

#[test]
fn the_zone_prefix_moves_activations() {
    let from = at("2024-01-01T00:00:00Z");
    let cases: &[(&str, &str)] = &[
        ("@midnight", "2024-01-02T00:00:00Z"),
        ("TZ=Asia/Tokyo @midnight", "2024-01-01T15:00:00Z"),
        ("CRON_TZ=America/New_York 0 2 * * *", "2024-01-01T07:00:00Z"),
        ("CRON_TZ=Asia/Kolkata 0 2 * * *", "2024-01-01T20:30:00Z"),
    ];
    for (spec, expected) in cases {
        let schedule = Schedule::parse(spec, UTC).unwrap();
        assert_eq!(schedule.next_after(from), Some(at(expected)), "{spec:?}");
    }
}

#[test]
fn every_keeps_whole_seconds() {
    // robfig's Every: truncated to whole seconds, at least one second.
    let cases: &[(&str, u64)] = &[
        ("@every 5m", 300),
        ("@every 1h30m", 5_400),
        ("@every 90s", 90),
        ("@every 1.5s", 1),
        ("@every 100ms", 1),
        ("@every 2562047h", 2_562_047 * 3_600),
    ];
    for (spec, seconds) in cases {
        let schedule = Schedule::parse(spec, UTC).unwrap();
        assert_eq!(
            schedule.interval(),
            Some(Duration::from_secs(*seconds)),
            "{spec:?}"
        );
    }
    assert_eq!(Schedule::parse("@daily", UTC).unwrap().interval(), None);
}

#[test]
fn day_of_month_and_day_of_week_may_be_alternatives() {
    // Both restricted: either suffices, so a day-of-month that February lacks is still fine
    // when a weekday is named too (it runs on Mondays in February).
    let schedule = Schedule::parse("0 0 30 2 MON", UTC).unwrap();
    assert_eq!(
        schedule.next_after(at("2024-01-01T00:00:00Z")),
        Some(at("2024-02-05T00:00:00Z"))
    );
}

#[test]
fn rejections_say_what_and_where() {
    let cases: &[(&str, &str)] = &[
        (
            "",
            "the schedule is empty (expected 5 fields such as \"0 2 * * *\" or a descriptor such as \"@daily\")",
        ),
        (
            "   ",
            "the schedule is empty (expected 5 fields such as \"0 2 * * *\" or a descriptor such as \"@daily\")",
        ),
        // robfig TestErrors.
        (
            "xyz",
            "expected exactly 5 fields (minute hour day-of-month month day-of-week), found 1",
        ),
        (
            "60 0 * * *",
            "minute field \"60\": 60 is above the maximum 59",
        ),
        (
            "0 60 * * *",
            "hour field \"60\": 60 is above the maximum 23",
        ),
        (
            "0 0 * * XYZ",
            "day-of-week field \"XYZ\": \"XYZ\" is not a number from 0 (Sunday) to 6 or a day name (SUN-SAT)",
        ),
        // robfig TestParseScheduleErrors / TestStandardSpecSchedule (five-field forms).
        (
            "5 j * * *",
            "hour field \"j\": \"j\" is not a number from 0 to 23",
        ),
        (
            "* * * *",
            "expected exactly 5 fields (minute hour day-of-month month day-of-week), found 4",
        ),
        (
            "0 5 * * * *",
            "expected exactly 5 fields (minute hour day-of-month month day-of-week), found 6",
        ),
        (
            "@every Xm",
            "@every \"Xm\": expected a number such as `90`, `1.5` or `.5` at \"Xm\"",
        ),
        (
            "@unrecognized",
            "unknown descriptor \"@unrecognized\" (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)",
        ),
        // robfig TestSlash0NoHang.
        (
            "TZ=America/New_York 15/0 * * * *",
            "minute field \"15/0\": the step in \"15/0\" must be a whole number of 1 or more",
        ),
        // robfig TestNext's unsatisfiable specs: robfig accepts them and never fires.
        (
            "0 0 30 Feb ?",
            "day-of-month \"30\" never occurs in month \"Feb\", so the schedule would never fire",
        ),
        (
            "0 0 31 Apr ?",
            "day-of-month \"31\" never occurs in month \"Apr\", so the schedule would never fire",
        ),
        (
            "0 0 31 4,6,9,11 *",
            "day-of-month \"31\" never occurs in month \"4,6,9,11\", so the schedule would never fire",
        ),
        // Fields.
        (
            "0 0 0 * *",
            "day-of-month field \"0\": 0 is below the minimum 1",
        ),
        (
            "0 0 * 13 *",
            "month field \"13\": 13 is above the maximum 12",
        ),
        (
            "0 0 * JANUARY *",
            "month field \"JANUARY\": \"JANUARY\" is not a number from 1 to 12 or a month name (JAN-DEC)",
        ),
        (
            "0 0 * * 7",
            "day-of-week field \"7\": 7 is above the maximum 6",
        ),
        (
            "0 5-3 * * *",
            "hour field \"5-3\": the range \"5-3\" starts after it ends",
        ),
        (
            "0 0 * * 1--2",
            "day-of-week field \"1--2\": \"1--2\" has more than one '-'",
        ),
        (
            "*//2 * * * *",
            "minute field \"*//2\": \"*//2\" has more than one '/'",
        ),
        (
            "*/x * * * *",
            "minute field \"*/x\": the step in \"*/x\" must be a whole number of 1 or more",
        ),
        (
            "0,*/-12 * * * *",
            "minute field \"0,*/-12\": the step in \"*/-12\" must be a whole number of 1 or more",
        ),
        (
            "*-5 * * * *",
            "minute field \"*-5\": \"*-5\": a range cannot start with '*' or '?'",
        ),
        (", * * * *", "minute field \",\": no values"),
        // Zones.
        (
            "CRON_TZ=Mars/Olympus 0 2 * * *",
            "unknown time zone \"Mars/Olympus\" in the CRON_TZ= prefix (expected an IANA name such as \"Europe/Berlin\" or \"UTC\")",
        ),
        (
            "TZ=europe/berlin 0 2 * * *",
            "unknown time zone \"europe/berlin\" in the TZ= prefix (expected an IANA name such as \"Europe/Berlin\" or \"UTC\")",
        ),
        (
            "TZ=Europe/Berlin",
            "nothing follows the TZ=Europe/Berlin prefix (write e.g. \"TZ=Europe/Berlin 0 2 * * *\")",
        ),
        (
            "CRON_TZ= 0 2 * * *",
            "the CRON_TZ= prefix names no time zone (write e.g. \"CRON_TZ=Europe/Berlin 0 2 * * *\")",
        ),
        // @every.
        (
            "@every",
            "@every \"\": no duration given (for example `@every 1h30m`)",
        ),
        (
            "@every 0s",
            "@every \"0s\": the interval must be longer than zero",
        ),
        (
            "@every -5m",
            "@every \"-5m\": the interval must be longer than zero",
        ),
        (
            "@every 5",
            "@every \"5\": the number \"5\" has no unit (use ns, us, ms, s, m or h)",
        ),
        (
            "@every 1d",
            "@every \"1d\": unknown unit \"d\" (use ns, us, ms, s, m or h)",
        ),
        (
            "@every 3000000h",
            "@every \"3000000h\": longer than the largest duration Go accepts (about 292 years)",
        ),
        (
            "@Daily",
            "unknown descriptor \"@Daily\" (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)",
        ),
    ];
    for (spec, message) in cases {
        let error = Schedule::parse(spec, UTC)
            .map(|s| s.to_string())
            .expect_err(spec);
        assert_eq!(error.to_string(), *message, "{spec:?}");
    }
}

#[test]
fn zone_names_for_flags() {
    assert_eq!(parse_zone("Europe/Berlin"), Ok(Europe::Berlin));
    assert_eq!(parse_zone("UTC"), Ok(UTC));
    assert_eq!(
        parse_zone("Berlin").map_err(|e| e.to_string()),
        Err("unknown time zone \"Berlin\" (expected an IANA name such as \"Europe/Berlin\" or \"UTC\")".to_owned())
    );
}
