//! Go durations: `maxRetention` and `maxAge` (parsed and normalised as Go prints them), the
//! deadlines shown in whole seconds, and the interval of `@every`.
//!
//! The Rust side: `drivers::mariadb::parse_go_duration` (the parser behind `maxRetention` and
//! the retention policy's `maxAge`; its error text is Go's, because upstream shows it in
//! `failed to template MariaDB strategy: time: invalid duration …`), `format_go_duration`,
//! `drivers::status::go_duration` (whole seconds) and `schedule::Schedule::parse("@every …")`.

use serde_json::{Value as Json, json};

use crate::rng::Rng;
use crate::{Case, Verdict, go_error, size_of};

const UNITS: [&str; 8] = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"];
const BAD_UNITS: [&str; 9] = ["", "d", "H", "sec", "mss", "S", "µ", "hh", "\u{3bc}"];

/// `n` duration texts, growing in the number of terms and digits.
pub fn generate(rng: &mut Rng, n: usize) -> Vec<Case> {
    (0..n)
        .map(|i| {
            let size = size_of(i, n, 12);
            Case {
                size,
                input: json!({"text": text(rng, size)}),
            }
        })
        .collect()
}

fn digits(rng: &mut Rng, max: usize) -> String {
    match rng.below(10) {
        0 => rng
            .pick(&[
                "9223372036854775807",
                "9223372036854775808",
                "18446744073709551616",
                "2562047",
                "153722867",
                "9223372036",
            ])
            .to_string(),
        1 => "0".repeat(1 + rng.below(max.max(1))),
        _ => {
            let len = 1 + rng.below(max.clamp(1, 20));
            let mut s = String::new();
            for k in 0..len {
                let d = rng.below(10);
                s.push(char::from(
                    b'0' + if k == 0 && len > 1 && rng.chance(70) {
                        1 + (d % 9) as u8
                    } else {
                        d as u8
                    },
                ));
            }
            s
        }
    }
}

fn text(rng: &mut Rng, size: usize) -> String {
    if rng.chance(4) {
        return rng
            .pick(&[
                "0", "", "-0", "+0", "-", "+", ".", "1h 2m", " 1h", "1h ", ".s", "1.5.h", "0.h",
                "-.5s", "+5m", "1e3s", "0x10s", "1_000s", "−1h", "1h-2m", "１h",
            ])
            .to_string();
    }
    let mut s = String::new();
    match rng.below(10) {
        0 => s.push('-'),
        1 if rng.chance(30) => s.push('+'),
        _ => {}
    }
    let terms = 1 + rng.below(size.min(5));
    for _ in 0..terms {
        match rng.below(6) {
            0 => {
                s.push('.');
                s.push_str(&digits(rng, size));
            }
            1 => {
                s.push_str(&digits(rng, size));
                s.push('.');
                if rng.chance(80) {
                    s.push_str(&digits(rng, size * 2));
                }
            }
            _ => s.push_str(&digits(rng, size)),
        }
        if rng.chance(4) {
            s.push_str(rng.pick_str(&BAD_UNITS));
        } else {
            s.push_str(rng.pick_str(&UNITS));
        }
    }
    s
}

/// Compares one case.
pub fn check(case: &Json, go: &Json) -> Verdict {
    let text = case["text"].as_str().unwrap_or_default();
    let rust = drivers::mariadb::parse_go_duration(text);
    let differ = |go: String, rust: String| Verdict::Differ { go, rust };
    match (go_error(go), rust) {
        (Some((_, msg)), Err(ours)) => {
            if msg != ours {
                return differ(format!("error {msg}"), format!("error {ours}"));
            }
            every(text, None)
        }
        (Some((_, msg)), Ok(ns)) => differ(format!("error {msg}"), format!("{ns}ns")),
        (None, Err(ours)) => differ(go.to_string(), format!("error {ours}")),
        (None, Ok(ns)) => {
            let go_ns = go["ns"].as_i64().unwrap_or_default();
            let go_str = go["str"].as_str().unwrap_or_default();
            if i128::from(go_ns) != ns {
                return differ(format!("{go_ns}ns"), format!("{ns}ns"));
            }
            let ours = drivers::mariadb::format_go_duration(ns);
            if ours != go_str {
                return differ(
                    format!("String() {go_str}"),
                    format!("format_go_duration {ours}"),
                );
            }
            if let Ok(whole) = u64::try_from(ns) {
                let secs = drivers::status::go_duration(std::time::Duration::from_nanos(whole));
                let go_secs = go["secs"].as_str().unwrap_or_default();
                if secs != go_secs {
                    return differ(
                        format!("whole seconds {go_secs}"),
                        format!("go_duration {secs}"),
                    );
                }
            }
            every(text, Some(go_ns))
        }
    }
}

/// The same text after `@every` in a Plan schedule: robfig reads it with `time.ParseDuration`,
/// then uses whole seconds, at least one.
fn every(text: &str, go_ns: Option<i64>) -> Verdict {
    if text.contains(char::is_whitespace) || text.is_empty() {
        // Leading/trailing spaces after `@every` are a documented leniency of the schedule
        // parser; a space inside is an error on both sides. Not compared here.
        return Verdict::Same;
    }
    let parsed = schedule::Schedule::parse(&format!("@every {text}"), schedule::chrono_tz::UTC);
    match (go_ns, parsed) {
        (None, Err(_)) => Verdict::Same,
        (None, Ok(s)) => Verdict::Differ {
            go: "@every: invalid duration".into(),
            rust: format!("@every accepted: {:?}", s.interval()),
        },
        (Some(ns), Err(_)) if ns <= 0 => {
            Verdict::Deviation("@every with a zero or negative interval is rejected")
        }
        (Some(ns), Err(e)) => Verdict::Differ {
            go: format!("@every {ns}ns"),
            rust: format!("@every rejected: {e}"),
        },
        (Some(ns), Ok(s)) => {
            let want = std::time::Duration::from_secs((ns / 1_000_000_000).max(1) as u64);
            if s.interval() == Some(want) {
                Verdict::Same
            } else {
                Verdict::Differ {
                    go: format!("@every {want:?}"),
                    rust: format!("@every {:?}", s.interval()),
                }
            }
        }
    }
}
