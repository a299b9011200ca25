//! The slot decision of one Plan evaluation, with a fixed clock: on time, late within the
//! starting deadline (one catch-up), late beyond it (skipped, with counts), restarts with and
//! without a recorded last slot, schedules tighter than the deadline, `@every` grids, DST.

use crate::support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::UTC;
use pretty_assertions::assert_eq;
use schedule::{
    DEFAULT_STARTING_DEADLINE, Evaluation, SKIPPED_COUNT_LIMIT, Schedule, Skipped, SkippedCount,
    SlotDecision, backup_job_name,
};
use support::at;

struct Case {
    name: &'static str,
    spec: &'static str,
    created: &'static str,
    last_slot: Option<&'static str>,
    now: &'static str,
    deadline: Duration,
    due: Option<&'static str>,
    skipped: Option<(SkippedCount, &'static str, &'static str)>,
    next: Option<&'static str>,
}

const DEADLINE: Duration = DEFAULT_STARTING_DEADLINE;

fn decide(
    spec: &str,
    created: &str,
    last_slot: Option<&str>,
    now: &str,
    deadline: Duration,
) -> SlotDecision {
    Schedule::parse(spec, UTC).unwrap().decide(&Evaluation {
        now: at(now),
        created: at(created),
        last_slot: last_slot.map(at),
        starting_deadline: deadline,
    })
}

#[test]
fn decisions() {
    use SkippedCount::{AtLeast, Exact};
    let cases = [
        Case {
            name: "on time",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: None,
            now: "2024-01-01T02:00:05Z",
            deadline: DEADLINE,
            due: Some("2024-01-01T02:00:00Z"),
            skipped: None,
            next: Some("2024-01-02T02:00:00Z"),
        },
        Case {
            name: "before the first slot",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: None,
            now: "2024-01-01T01:59:59Z",
            deadline: DEADLINE,
            due: None,
            skipped: None,
            next: Some("2024-01-01T02:00:00Z"),
        },
        Case {
            name: "a slot at or before the Plan's creation never runs",
            spec: "0 2 * * *",
            created: "2024-01-01T02:00:30Z",
            last_slot: None,
            now: "2024-01-01T02:01:00Z",
            deadline: DEADLINE,
            due: None,
            skipped: None,
            next: Some("2024-01-02T02:00:00Z"),
        },
        Case {
            name: "late within the deadline: caught up",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-01T02:00:00Z"),
            now: "2024-01-02T02:04:59Z",
            deadline: DEADLINE,
            due: Some("2024-01-02T02:00:00Z"),
            skipped: None,
            next: Some("2024-01-03T02:00:00Z"),
        },
        Case {
            name: "exactly the deadline late: too late",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-01T02:00:00Z"),
            now: "2024-01-02T02:05:00Z",
            deadline: DEADLINE,
            due: None,
            skipped: Some((Exact(1), "2024-01-02T02:00:00Z", "2024-01-02T02:00:00Z")),
            next: Some("2024-01-03T02:00:00Z"),
        },
        Case {
            name: "late beyond the deadline: skipped",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-01T02:00:00Z"),
            now: "2024-01-02T03:00:00Z",
            deadline: DEADLINE,
            due: None,
            skipped: Some((Exact(1), "2024-01-02T02:00:00Z", "2024-01-02T02:00:00Z")),
            next: Some("2024-01-03T02:00:00Z"),
        },
        Case {
            name: "an outage of days ending just after a slot: the newest runs, the rest are skipped",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-01T02:00:00Z"),
            now: "2024-01-05T02:01:00Z",
            deadline: DEADLINE,
            due: Some("2024-01-05T02:00:00Z"),
            skipped: Some((Exact(3), "2024-01-02T02:00:00Z", "2024-01-04T02:00:00Z")),
            next: Some("2024-01-06T02:00:00Z"),
        },
        Case {
            name: "an outage of days: nothing recent enough, all skipped",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-01T02:00:00Z"),
            now: "2024-01-05T12:00:00Z",
            deadline: DEADLINE,
            due: None,
            skipped: Some((Exact(4), "2024-01-02T02:00:00Z", "2024-01-05T02:00:00Z")),
            next: Some("2024-01-06T02:00:00Z"),
        },
        Case {
            name: "restart after the slot was recorded: no second run",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-02T02:00:00Z"),
            now: "2024-01-02T02:00:30Z",
            deadline: DEADLINE,
            due: None,
            skipped: None,
            next: Some("2024-01-03T02:00:00Z"),
        },
        Case {
            name: "no slot recorded (status write lost, or a Plan from another controller): the recent slot again, older ones not reported",
            spec: "0 2 * * *",
            created: "2023-12-01T00:00:00Z",
            last_slot: None,
            now: "2024-01-02T02:03:00Z",
            deadline: DEADLINE,
            due: Some("2024-01-02T02:00:00Z"),
            skipped: None,
            next: Some("2024-01-03T02:00:00Z"),
        },
        Case {
            name: "no slot recorded and nothing recent",
            spec: "0 2 * * *",
            created: "2023-12-01T00:00:00Z",
            last_slot: None,
            now: "2024-01-02T02:06:00Z",
            deadline: DEADLINE,
            due: None,
            skipped: None,
            next: Some("2024-01-03T02:00:00Z"),
        },
        Case {
            name: "tighter than the deadline: only the newest missed slot runs",
            spec: "* * * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-01T12:00:00Z"),
            now: "2024-01-01T12:03:30Z",
            deadline: DEADLINE,
            due: Some("2024-01-01T12:03:00Z"),
            skipped: Some((Exact(2), "2024-01-01T12:01:00Z", "2024-01-01T12:02:00Z")),
            next: Some("2024-01-01T12:04:00Z"),
        },
        Case {
            name: "tighter than the deadline, no slot recorded: the window is the deadline",
            spec: "*/2 * * * *",
            created: "2023-12-01T00:00:00Z",
            last_slot: None,
            now: "2024-01-01T12:03:30Z",
            deadline: DEADLINE,
            due: Some("2024-01-01T12:02:00Z"),
            skipped: Some((Exact(1), "2024-01-01T12:00:00Z", "2024-01-01T12:00:00Z")),
            next: Some("2024-01-01T12:04:00Z"),
        },
        Case {
            name: "tighter than the deadline, on time",
            spec: "*/2 * * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-01T12:00:00Z"),
            now: "2024-01-01T12:02:00Z",
            deadline: DEADLINE,
            due: Some("2024-01-01T12:02:00Z"),
            skipped: None,
            next: Some("2024-01-01T12:04:00Z"),
        },
        Case {
            name: "a long outage of a minutely schedule: the count is bounded",
            spec: "* * * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-01T00:00:00Z"),
            now: "2024-01-31T00:00:30Z",
            deadline: DEADLINE,
            due: Some("2024-01-31T00:00:00Z"),
            skipped: Some((
                AtLeast(SKIPPED_COUNT_LIMIT),
                "2024-01-01T00:01:00Z",
                "2024-01-30T23:59:00Z",
            )),
            next: Some("2024-01-31T00:01:00Z"),
        },
        Case {
            name: "a longer deadline catches up an older slot",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-01T02:00:00Z"),
            now: "2024-01-02T05:00:00Z",
            deadline: Duration::from_secs(4 * 3600),
            due: Some("2024-01-02T02:00:00Z"),
            skipped: None,
            next: Some("2024-01-03T02:00:00Z"),
        },
        Case {
            name: "a zero deadline runs nothing",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: None,
            now: "2024-01-01T02:00:00Z",
            deadline: Duration::ZERO,
            due: None,
            skipped: None,
            next: Some("2024-01-02T02:00:00Z"),
        },
        Case {
            name: "a recorded slot ahead of this clock (skew between replicas): nothing until after it",
            spec: "0 2 * * *",
            created: "2024-01-01T00:00:00Z",
            last_slot: Some("2024-01-03T02:00:00Z"),
            now: "2024-01-02T02:00:10Z",
            deadline: DEADLINE,
            due: None,
            skipped: None,
            next: Some("2024-01-04T02:00:00Z"),
        },
        Case {
            name: "a schedule with no slot left within five years",
            spec: "0 0 29 2 *",
            created: "2090-01-01T00:00:00Z",
            last_slot: Some("2096-02-29T00:00:00Z"),
            now: "2097-03-01T00:00:00Z",
            deadline: DEADLINE,
            due: None,
            skipped: None,
            next: None,
        },
        Case {
            name: "@every: slots on a grid from the Plan's creation",
            spec: "@every 1h",
            created: "2024-01-01T10:00:00Z",
            last_slot: None,
            now: "2024-01-01T11:00:10Z",
            deadline: DEADLINE,
            due: Some("2024-01-01T11:00:00Z"),
            skipped: None,
            next: Some("2024-01-01T12:00:00Z"),
        },
        Case {
            name: "@every: not yet due, no slot recorded, the grid does not move with the clock",
            spec: "@every 1h",
            created: "2024-01-01T10:00:00Z",
            last_slot: None,
            now: "2024-01-01T11:59:00Z",
            deadline: DEADLINE,
            due: None,
            skipped: None,
            next: Some("2024-01-01T12:00:00Z"),
        },
        Case {
            name: "@every: late beyond the deadline",
            spec: "@every 1h",
            created: "2024-01-01T10:00:00Z",
            last_slot: Some("2024-01-01T11:00:00Z"),
            now: "2024-01-01T12:30:00Z",
            deadline: DEADLINE,
            due: None,
            skipped: Some((Exact(1), "2024-01-01T12:00:00Z", "2024-01-01T12:00:00Z")),
            next: Some("2024-01-01T13:00:00Z"),
        },
        Case {
            name: "@every: an outage counts its missed slots",
            spec: "@every 30s",
            created: "2024-01-01T10:00:00Z",
            last_slot: Some("2024-01-01T10:00:30Z"),
            now: "2024-01-02T10:00:45Z",
            deadline: DEADLINE,
            due: Some("2024-01-02T10:00:30Z"),
            skipped: Some((Exact(2879), "2024-01-01T10:01:00Z", "2024-01-02T10:00:00Z")),
            next: Some("2024-01-02T10:01:00Z"),
        },
        Case {
            name: "DST: the 02:30 that does not exist in Berlin is not a missed slot",
            spec: "CRON_TZ=Europe/Berlin 30 2 * * *",
            created: "2024-03-01T00:00:00Z",
            last_slot: Some("2024-03-30T02:30:00+01:00"),
            now: "2024-04-01T02:30:10+02:00",
            deadline: DEADLINE,
            due: Some("2024-04-01T02:30:00+02:00"),
            skipped: None,
            next: Some("2024-04-02T02:30:00+02:00"),
        },
        Case {
            name: "DST: the second 02:30 of a Berlin fall-back night is a slot of its own",
            spec: "CRON_TZ=Europe/Berlin 30 2 * * *",
            created: "2024-10-01T00:00:00Z",
            last_slot: Some("2024-10-27T02:30:00+02:00"),
            now: "2024-10-27T02:30:20+01:00",
            deadline: DEADLINE,
            due: Some("2024-10-27T02:30:00+01:00"),
            skipped: None,
            next: Some("2024-10-28T02:30:00+01:00"),
        },
    ];
    for case in cases {
        let got = decide(
            case.spec,
            case.created,
            case.last_slot,
            case.now,
            case.deadline,
        );
        // What to record is the due slot, else the newest skipped one.
        let record = case
            .due
            .or(case.skipped.map(|(_, _, newest)| newest))
            .map(at);
        let want = SlotDecision {
            due: case.due.map(at),
            skipped: case.skipped.map(|(count, oldest, newest)| Skipped {
                count,
                oldest: at(oldest),
                newest: at(newest),
            }),
            next: case.next.map(at),
            record,
        };
        assert_eq!(got, want, "{}", case.name);
    }
}

#[test]
fn the_same_state_gives_the_same_slot_and_name() {
    // Two replicas, or one before and after a restart, evaluating the same Plan state: the
    // same slot, so the same BackupJob name, so the second create is an AlreadyExists.
    let schedule = Schedule::parse("0 2 * * *", UTC).unwrap();
    let evaluation = Evaluation {
        now: at("2024-01-01T02:00:07Z"),
        created: at("2023-12-01T00:00:00Z"),
        last_slot: Some(at("2023-12-31T02:00:00Z")),
        starting_deadline: DEADLINE,
    };
    let first = schedule.decide(&evaluation);
    let second = schedule.decide(&evaluation);
    assert_eq!(first, second);
    let slot = first.due.expect("a slot is due");
    assert_eq!(backup_job_name("nightly", slot), "nightly-28401240");

    // A second later (still before the caller recorded the slot): still the same slot.
    let later = schedule.decide(&Evaluation {
        now: at("2024-01-01T02:00:08Z"),
        ..evaluation
    });
    assert_eq!(later.due, Some(slot));

    // Once recorded, it is never due again.
    assert_eq!(first.record, Some(slot));
    let recorded = schedule.decide(&Evaluation {
        last_slot: first.record,
        ..evaluation
    });
    assert_eq!(recorded.due, None);

    // A skip is reported once: after recording what the decision says, the next evaluation
    // has nothing to report.
    let late = Evaluation {
        now: at("2024-01-01T09:00:00Z"),
        ..evaluation
    };
    let skipping = schedule.decide(&late);
    assert_eq!(skipping.due, None);
    assert!(skipping.skipped.is_some());
    let after = schedule.decide(&Evaluation {
        last_slot: skipping.record,
        ..late
    });
    assert_eq!((after.due, after.skipped), (None, None));
}

/// A controller evaluating a Plan at irregular times (some gaps longer than the deadline),
/// storing each decision's `record` as the caller does: from the first slot it handles on,
/// every slot of the schedule is either run once or reported skipped once, and nothing runs
/// twice. (Before anything is recorded, slots older than the deadline are neither run nor
/// reported: see `decisions`, "no slot recorded and nothing recent".)
#[test]
fn every_slot_is_run_or_reported_exactly_once() {
    for spec in [
        "*/7 * * * *",
        "@every 5m",
        "CRON_TZ=Europe/Berlin 0,20 * * * *",
    ] {
        let schedule = Schedule::parse(spec, UTC).unwrap();
        let created = at("2024-10-26T22:03:17Z");
        // Gaps in seconds between evaluations: on-time wakeups, short and long outages.
        let gaps: [i64; 16] = [
            60, 420, 1, 30, 3_600, 299, 301, 420, 7_200, 5, 86, 1_800, 59, 900, 4_000, 120,
        ];
        let mut now = created;
        let mut last_slot = None;
        let mut ran: Vec<DateTime<Utc>> = Vec::new();
        let mut reported = 0_u64;
        let mut first_handled = None;
        for gap in gaps.iter().cycle().take(64) {
            now += TimeDelta::seconds(*gap);
            let decision = schedule.decide(&Evaluation {
                now,
                created,
                last_slot,
                starting_deadline: DEADLINE,
            });
            if let Some(skipped) = decision.skipped {
                let SkippedCount::Exact(n) = skipped.count else {
                    panic!("{spec}: unexpectedly many skipped slots at {now}");
                };
                reported += n;
            }
            if let Some(due) = decision.due {
                assert!(!ran.contains(&due), "{spec}: {due} ran twice");
                ran.push(due);
            }
            if decision.record.is_some() {
                last_slot = decision.record;
                first_handled = first_handled
                    .or(decision.skipped.map(|skipped| skipped.oldest))
                    .or(decision.due);
            }
            if let Some(next) = decision.next {
                assert!(next > now, "{spec}: next {next} is not after now {now}");
            }
        }
        // Count the schedule's slots from the first to the last handled one independently.
        let (first, last) = first_handled.zip(last_slot).expect("some slot was handled");
        let total = std::iter::successors(first_slot(&schedule, created), |t| {
            next_slot(&schedule, created, *t)
        })
        .skip_while(|t| *t < first)
        .take_while(|t| *t <= last)
        .count() as u64;
        assert!(
            !ran.is_empty() && reported > 0,
            "{spec}: the gaps exercise both outcomes"
        );
        assert_eq!(
            ran.len() as u64 + reported,
            total,
            "{spec}: run + skipped = all slots"
        );
    }
}

/// The schedule's slots as the decision defines them: calendar activations, or for `@every`
/// the grid from the Plan's creation.
fn first_slot(schedule: &Schedule, created: DateTime<Utc>) -> Option<DateTime<Utc>> {
    next_slot(schedule, created, created)
}

fn next_slot(
    schedule: &Schedule,
    created: DateTime<Utc>,
    t: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    match schedule.interval() {
        None => schedule.next_after(t),
        Some(interval) => {
            let step = TimeDelta::from_std(interval).unwrap();
            let mut slot = created + step;
            while slot <= t {
                slot += step;
            }
            Some(slot)
        }
    }
}
