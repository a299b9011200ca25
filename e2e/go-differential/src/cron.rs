//! Plan schedules: robfig/cron v3 `ParseStandard` and `Next`, against `schedule::Schedule`.
//!
//! Cases are specs the way Plans write them (five fields, names, ranges, lists, steps, `?`,
//! descriptors, `@every`, `CRON_TZ=`/`TZ=` prefixes) plus the nasty ones (a day-of-month and a
//! day-of-week together, the 31st of short months, 29 February, values out of range), each
//! walked a few activations from an instant near a DST change in `Europe/Berlin`,
//! `America/Sao_Paulo` (whose DST began at midnight) or `Australia/Lord_Howe` (a 30-minute
//! shift). Error *texts* are this project's own (docs/plans.md), so errors are compared by class.

use chrono::{DateTime, Utc};
use schedule::{ParseError, Schedule};
use serde_json::{Value as Json, json};

use crate::rng::Rng;
use crate::{Case, Verdict, go_error, size_of};

const ZONES: [&str; 8] = [
    "UTC",
    "Europe/Berlin",
    "America/Sao_Paulo",
    "Australia/Lord_Howe",
    "America/New_York",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "Europe/London",
];

/// DST changes (UTC seconds) the walks start near.
const TRANSITIONS: [i64; 10] = [
    1_711_846_800, // 2024-03-31 01:00Z, Berlin springs forward
    1_729_990_800, // 2024-10-27 01:00Z, Berlin falls back
    1_541_300_400, // 2018-11-04 03:00Z, Sao Paulo springs forward at midnight
    1_550_368_800, // 2019-02-17 02:00Z, Sao Paulo falls back to 23:00
    1_712_415_600, // 2024-04-06 15:00Z, Lord Howe falls back 30 minutes
    1_728_142_200, // 2024-10-05 15:30Z, Lord Howe springs forward 30 minutes
    1_710_054_000, // 2024-03-10 07:00Z, New York springs forward
    1_709_164_800, // 2024-02-29 00:00Z, a leap day
    1_735_689_600, // 2025-01-01 00:00Z
    1_582_934_400, // 2020-02-29 00:00Z
];

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// `n` cases, growing in the number of list items and activations.
pub fn generate(rng: &mut Rng, n: usize) -> Vec<Case> {
    (0..n)
        .map(|i| {
            let size = size_of(i, n, 8);
            let spec = spec(rng, size);
            let zone = *rng.pick(&ZONES);
            let from = if rng.chance(80) {
                rng.pick(&TRANSITIONS) + rng.range(-2 * 86_400, 86_400)
            } else {
                rng.range(1_420_070_400, 2_051_222_400)
            };
            let steps = 1 + rng.below(size.min(6));
            Case {
                size,
                input: json!({"spec": spec, "zone": zone, "from": from, "n": steps}),
            }
        })
        .collect()
}

fn spec(rng: &mut Rng, size: usize) -> String {
    let mut s = String::new();
    if rng.chance(30) {
        s.push_str(rng.pick_str(&["CRON_TZ=", "TZ="]));
        if rng.chance(5) {
            s.push_str(rng.pick_str(&["", "Mars/Olympus", "europe/berlin", "UTC0"]));
        } else {
            s.push_str(rng.pick_str(&ZONES));
        }
        if rng.chance(3) {
            return s;
        }
        s.push(' ');
    }
    if rng.chance(3) {
        s.push_str(rng.pick_str(&[
            "",
            " ",
            "0 2 * *",
            "0 2 * * * *",
            "0  2 * * *",
            " 0 2 * * *",
            "0 2 * * *\t",
            "0\t2 * * *",
            "* * * * * * *",
        ]));
        return s;
    }
    if rng.chance(15) {
        let d = rng.pick(&[
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@midnight",
            "@hourly",
            "@every 90m",
            "@every 1h30m",
            "@every 5m",
            "@every 1.5h",
            "@every 0",
            "@every -5m",
            "@every 500ms",
            "@every",
            "@every ",
            "@every 1d",
            "@fortnightly",
            "@DAILY",
            "@every 24h",
            "@every 59s",
            "@every 2562047h",
        ]);
        s.push_str(d);
        return s;
    }
    // minute hour day-of-month month day-of-week
    let fields: [(u32, u32, &[&str]); 5] = [
        (0, 59, &[]),
        (0, 23, &[]),
        (1, 31, &[]),
        (1, 12, &MONTHS),
        (0, 6, &DAYS),
    ];
    let mut parts = Vec::new();
    for (k, (lo, hi, names)) in fields.iter().enumerate() {
        // The minute and the hour are mostly fixed, as in real Plans, so walks cross DST changes.
        let restrict = match k {
            0 | 1 => rng.chance(85),
            2 => rng.chance(35),
            3 => rng.chance(25),
            _ => rng.chance(35),
        };
        if !restrict {
            parts.push(if rng.chance(8) && k >= 2 {
                "?".to_owned()
            } else {
                "*".to_owned()
            });
            continue;
        }
        parts.push(field(rng, size, *lo, *hi, names, k));
    }
    s.push_str(&parts.join(" "));
    s
}

fn value(rng: &mut Rng, lo: u32, hi: u32, names: &[&str], field: usize) -> String {
    if !names.is_empty() && rng.chance(30) {
        let name = rng.pick(names).to_string();
        return if rng.chance(15) {
            name.to_lowercase()
        } else {
            name
        };
    }
    if rng.chance(4) {
        return rng
            .pick(&[
                "60",
                "24",
                "32",
                "13",
                "7",
                "0",
                "-1",
                "x",
                "",
                "99999999999",
            ])
            .to_string();
    }
    // Hours near DST changes, the 29th-31st, February.
    let favourite: &[u32] = match field {
        0 => &[0, 0, 30, 15, 45, 59],
        1 => &[0, 1, 2, 2, 3, 23],
        2 => &[1, 15, 28, 29, 30, 31],
        3 => &[2, 2, 4, 6, 9, 11, 12],
        _ => &[0, 1, 5, 6],
    };
    let v = if rng.chance(60) {
        *rng.pick(favourite)
    } else {
        lo + rng.below((hi - lo + 1) as usize) as u32
    };
    v.to_string()
}

fn field(rng: &mut Rng, size: usize, lo: u32, hi: u32, names: &[&str], k: usize) -> String {
    let items = 1 + rng.below(size.min(4));
    let mut out = Vec::new();
    for _ in 0..items {
        let mut item = match rng.below(10) {
            0..=4 => value(rng, lo, hi, names, k),
            5..=7 => format!(
                "{}-{}",
                value(rng, lo, hi, names, k),
                value(rng, lo, hi, names, k)
            ),
            8 => "*".to_owned(),
            _ => rng.pick(&["?", "*-5", "5--7", "", "1-2-3"]).to_string(),
        };
        if rng.chance(20) {
            item.push('/');
            item.push_str(rng.pick_str(&["2", "3", "5", "15", "0", "x", "1", "7", "2/2", "61"]));
        }
        out.push(item);
    }
    out.join(",")
}

/// Compares one case.
pub fn check(case: &Json, go: &Json) -> Verdict {
    let spec = case["spec"].as_str().unwrap_or_default();
    let zone = schedule::parse_zone(case["zone"].as_str().unwrap_or_default())
        .expect("the generator's zones exist");
    let parsed = Schedule::parse(spec, zone);
    match (go_error(go), parsed) {
        (Some(("panic", _)), Err(_)) => {
            Verdict::Deviation("TZ=<zone> with nothing after it (upstream panics) is a parse error")
        }
        (Some((_, msg)), Err(e)) => {
            // Both refuse the spec. Our messages are our own (docs/plans.md), and a spec with two
            // faults may be refused for either one first; what matters to a Plan is that both
            // refuse it. The class is still compared so that the count is visible.
            if go_class(msg) == rust_class(&e) {
                Verdict::Same
            } else {
                Verdict::Deviation("refused by both, for a different first fault")
            }
        }
        (Some((_, msg)), Ok(s)) => {
            if spec != spec.trim() || spec.contains('\t') || spec.contains("  ") {
                Verdict::Deviation("surrounding or repeated whitespace is accepted")
            } else {
                Verdict::Differ {
                    go: format!("error {msg}"),
                    rust: format!("accepted, zone {}", s.zone()),
                }
            }
        }
        (None, Err(e)) => match &e {
            ParseError::NeverFires { .. } if go["next"][0].is_null() => {
                Verdict::Deviation("a day that never occurs is a parse error")
            }
            ParseError::NonPositiveEvery { .. } => {
                Verdict::Deviation("@every with a zero or negative interval is a parse error")
            }
            ParseError::Field {
                problem: schedule::FieldError::StarRange { .. },
                ..
            } => Verdict::Deviation("a range starting with * or ? is a parse error"),
            ParseError::Field {
                problem: schedule::FieldError::NoValues,
                ..
            } => Verdict::Deviation("a field without values is a parse error"),
            ParseError::MissingZone { .. } => {
                Verdict::Deviation("a zone prefix without a zone is a parse error")
            }
            _ => Verdict::Differ {
                go: go.to_string(),
                rust: format!("error {e}"),
            },
        },
        (None, Ok(s)) => {
            let steps = case["n"].as_u64().unwrap_or(1);
            let mut t =
                DateTime::<Utc>::from_timestamp(case["from"].as_i64().unwrap_or_default(), 0)
                    .expect("in range");
            let mut ours = Vec::new();
            for _ in 0..steps {
                match s.next_after(t) {
                    Some(next) => {
                        ours.push(json!(next.timestamp()));
                        t = next;
                    }
                    None => {
                        ours.push(Json::Null);
                        break;
                    }
                }
            }
            let theirs = go["next"].as_array().cloned().unwrap_or_default();
            if ours == theirs {
                Verdict::Same
            } else {
                Verdict::Differ {
                    go: times(&theirs),
                    rust: times(&ours),
                }
            }
        }
    }
}

fn times(list: &[Json]) -> String {
    let shown: Vec<String> = list
        .iter()
        .map(|t| {
            match t
                .as_i64()
                .and_then(|s| DateTime::<Utc>::from_timestamp(s, 0))
            {
                Some(t) => t.to_rfc3339(),
                None => "none".to_owned(),
            }
        })
        .collect();
    shown.join(", ")
}

/// The class of one of robfig's parse errors.
fn go_class(msg: &str) -> &'static str {
    if msg.starts_with("empty spec string") {
        "empty"
    } else if msg.starts_with("expected exactly")
        || msg.starts_with("expected ") && msg.contains(" fields")
    {
        "field count"
    } else if msg.starts_with("provided bad location") {
        "zone"
    } else if msg.starts_with("unrecognized descriptor") {
        "descriptor"
    } else if msg.starts_with("failed to parse duration") {
        "@every duration"
    } else {
        "field"
    }
}

/// The class of one of this project's parse errors, in robfig's terms.
fn rust_class(e: &ParseError) -> &'static str {
    match e {
        ParseError::Empty => "empty",
        ParseError::MissingZone { .. } | ParseError::UnknownZone { .. } => "zone",
        ParseError::MissingScheduleAfterZone { .. } => "nothing after the zone",
        ParseError::UnknownDescriptor(_) => "descriptor",
        ParseError::InvalidEvery { .. } | ParseError::NonPositiveEvery { .. } => "@every duration",
        ParseError::FieldCount { .. } => "field count",
        ParseError::Field { .. } => "field",
        ParseError::NeverFires { .. } => "never fires",
    }
}
