//! Daylight-saving changes with a fixed clock, in Europe/Berlin (2024-03-31 02:00 CET → 03:00
//! CEST; 2024-10-27 03:00 CEST → 02:00 CET) and America/New_York (2024-03-10 02:00 EST → 03:00
//! EDT; 2024-11-03 02:00 EDT → 01:00 EST): the successive activations of a schedule from a start
//! instant. The expected chains are robfig/cron v3's own answers for the same inputs:
//!
//! * a wall time in the spring-forward gap does not run that day (daily schedules skip a day,
//!   hourly ones have one hour fewer);
//! * a wall time in the fall-back repeat runs in both passes (daily schedules run twice that
//!   night, hourly ones have one hour more).
//!
//! Each chain is also run through `CRON_TZ=`/`TZ=` with a UTC process zone, to show the prefix is
//! what decides the zone.

use crate::support;

use chrono::{DateTime, Utc};
use chrono_tz::{America, Europe, Tz, UTC};
use pretty_assertions::assert_eq;
use schedule::Schedule;
use support::at;

/// Times in the schedule's zone, written with their offsets so the tables show which pass of
/// a repeated hour each activation is.
fn chain(schedule: &Schedule, from: DateTime<Utc>, n: usize) -> Vec<String> {
    let zone = schedule.zone();
    std::iter::successors(schedule.next_after(from), |t| schedule.next_after(*t))
        .take(n)
        .map(|t| t.with_timezone(&zone).to_rfc3339())
        .collect()
}

struct Case {
    spec: &'static str,
    from: &'static str,
    expected: &'static [&'static str],
}

fn check(zone: Tz, prefix_name: &str, cases: &[Case]) {
    for case in cases {
        let from = at(case.from);
        let in_process_zone = Schedule::parse(case.spec, zone).unwrap();
        assert_eq!(
            chain(&in_process_zone, from, case.expected.len()),
            case.expected,
            "{:?} from {} with process zone {zone}",
            case.spec,
            case.from
        );
        for prefix in ["CRON_TZ=", "TZ="] {
            let spec = format!("{prefix}{prefix_name} {}", case.spec);
            let prefixed = Schedule::parse(&spec, UTC).unwrap();
            assert_eq!(prefixed.zone(), zone, "{spec:?}");
            assert_eq!(
                chain(&prefixed, from, case.expected.len()),
                case.expected,
                "{spec:?} from {} with process zone UTC",
                case.from
            );
        }
    }
}

#[test]
fn berlin_spring_forward() {
    check(
        Europe::Berlin,
        "Europe/Berlin",
        &[
            Case {
                spec: "0 * * * *",
                from: "2024-03-31T00:30:00+01:00",
                expected: &[
                    "2024-03-31T01:00:00+01:00",
                    "2024-03-31T03:00:00+02:00",
                    "2024-03-31T04:00:00+02:00",
                ],
            },
            Case {
                spec: "*/30 * * * *",
                from: "2024-03-31T01:10:00+01:00",
                expected: &[
                    "2024-03-31T01:30:00+01:00",
                    "2024-03-31T03:00:00+02:00",
                    "2024-03-31T03:30:00+02:00",
                    "2024-03-31T04:00:00+02:00",
                ],
            },
            // 02:30 does not exist on the 31st: no run that day.
            Case {
                spec: "30 2 * * *",
                from: "2024-03-29T13:00:00+01:00",
                expected: &[
                    "2024-03-30T02:30:00+01:00",
                    "2024-04-01T02:30:00+02:00",
                    "2024-04-02T02:30:00+02:00",
                ],
            },
            Case {
                spec: "0 2 * * *",
                from: "2024-03-29T13:00:00+01:00",
                expected: &[
                    "2024-03-30T02:00:00+01:00",
                    "2024-04-01T02:00:00+02:00",
                    "2024-04-02T02:00:00+02:00",
                ],
            },
            // Outside the gap nothing changes but the offset.
            Case {
                spec: "0 3 * * *",
                from: "2024-03-29T13:00:00+01:00",
                expected: &[
                    "2024-03-30T03:00:00+01:00",
                    "2024-03-31T03:00:00+02:00",
                    "2024-04-01T03:00:00+02:00",
                ],
            },
            Case {
                spec: "@daily",
                from: "2024-03-30T13:00:00+01:00",
                expected: &[
                    "2024-03-31T00:00:00+01:00",
                    "2024-04-01T00:00:00+02:00",
                    "2024-04-02T00:00:00+02:00",
                ],
            },
        ],
    );
}

#[test]
fn berlin_fall_back() {
    check(
        Europe::Berlin,
        "Europe/Berlin",
        &[
            Case {
                spec: "0 * * * *",
                from: "2024-10-27T01:30:00+02:00",
                expected: &[
                    "2024-10-27T02:00:00+02:00",
                    "2024-10-27T02:00:00+01:00",
                    "2024-10-27T03:00:00+01:00",
                    "2024-10-27T04:00:00+01:00",
                ],
            },
            Case {
                spec: "*/30 * * * *",
                from: "2024-10-27T02:10:00+02:00",
                expected: &[
                    "2024-10-27T02:30:00+02:00",
                    "2024-10-27T02:00:00+01:00",
                    "2024-10-27T02:30:00+01:00",
                    "2024-10-27T03:00:00+01:00",
                ],
            },
            // 02:30 happens twice on the 27th: two runs that night.
            Case {
                spec: "30 2 * * *",
                from: "2024-10-25T14:00:00+02:00",
                expected: &[
                    "2024-10-26T02:30:00+02:00",
                    "2024-10-27T02:30:00+02:00",
                    "2024-10-27T02:30:00+01:00",
                    "2024-10-28T02:30:00+01:00",
                ],
            },
            Case {
                spec: "0 2 * * *",
                from: "2024-10-25T14:00:00+02:00",
                expected: &[
                    "2024-10-26T02:00:00+02:00",
                    "2024-10-27T02:00:00+02:00",
                    "2024-10-27T02:00:00+01:00",
                    "2024-10-28T02:00:00+01:00",
                ],
            },
            // Outside the repeat: once a day.
            Case {
                spec: "0 1 * * *",
                from: "2024-10-25T14:00:00+02:00",
                expected: &[
                    "2024-10-26T01:00:00+02:00",
                    "2024-10-27T01:00:00+02:00",
                    "2024-10-28T01:00:00+01:00",
                ],
            },
        ],
    );
}

#[test]
fn new_york_spring_forward() {
    check(
        America::New_York,
        "America/New_York",
        &[
            Case {
                spec: "0 * * * *",
                from: "2024-03-10T00:30:00-05:00",
                expected: &[
                    "2024-03-10T01:00:00-05:00",
                    "2024-03-10T03:00:00-04:00",
                    "2024-03-10T04:00:00-04:00",
                ],
            },
            // 02:00 and 02:30 do not exist on the 10th: no run that day.
            Case {
                spec: "0 2 * * *",
                from: "2024-03-09T07:00:00-05:00",
                expected: &[
                    "2024-03-11T02:00:00-04:00",
                    "2024-03-12T02:00:00-04:00",
                    "2024-03-13T02:00:00-04:00",
                ],
            },
            Case {
                spec: "30 2 * * *",
                from: "2024-03-09T07:00:00-05:00",
                expected: &[
                    "2024-03-11T02:30:00-04:00",
                    "2024-03-12T02:30:00-04:00",
                    "2024-03-13T02:30:00-04:00",
                ],
            },
            Case {
                spec: "@weekly",
                from: "2024-03-05T07:00:00-05:00",
                expected: &[
                    "2024-03-10T00:00:00-05:00",
                    "2024-03-17T00:00:00-04:00",
                    "2024-03-24T00:00:00-04:00",
                ],
            },
        ],
    );
}

#[test]
fn new_york_fall_back() {
    check(
        America::New_York,
        "America/New_York",
        &[
            Case {
                spec: "0 * * * *",
                from: "2024-11-03T00:30:00-04:00",
                expected: &[
                    "2024-11-03T01:00:00-04:00",
                    "2024-11-03T01:00:00-05:00",
                    "2024-11-03T02:00:00-05:00",
                    "2024-11-03T03:00:00-05:00",
                ],
            },
            // 01:30 happens twice on the 3rd: two runs that night.
            Case {
                spec: "30 1 * * *",
                from: "2024-11-02T08:00:00-04:00",
                expected: &[
                    "2024-11-03T01:30:00-04:00",
                    "2024-11-03T01:30:00-05:00",
                    "2024-11-04T01:30:00-05:00",
                    "2024-11-05T01:30:00-05:00",
                ],
            },
        ],
    );
}
