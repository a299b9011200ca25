//! A Plan's `spec.retentionPolicy`, checked, and the grandfather-father-son selection over its
//! successful Backups.
//!
//! ```text
//!  RetentionPolicy (raw, from the Plan) ──► Policy::parse ──► Policy { keep_*, max_age, keep_failed }
//!                                                │                    │
//!                                                ▼                    ▼
//!                                         PolicyError        select(times newest first, zone)
//!                                                                     │
//!                                                                     ▼
//!                                              per Backup: the rules that keep it (maybe none)
//! ```
//!
//! Selection follows restic's `forget` (and borg's `prune`): every rule is applied to the whole list
//! independently and a Backup is kept when at least one rule keeps it. `keepLast N` keeps the N
//! newest; `keepDaily N` walks the list from the newest and keeps the first (newest) Backup of each
//! calendar day it meets until it has kept N days, so days without a Backup do not count;
//! `keepWeekly` does the same per ISO week (Monday to Sunday, weeks numbered by ISO 8601, so the
//! last days of December may belong to week 1 of the next year) and `keepMonthly` per calendar
//! month. Days, weeks and months are those of the Plan's time zone, so a Backup at 00:30 local time
//! counts for that local day whatever the UTC date, and a daylight-saving change neither splits nor
//! merges a day. `maxAge` is applied afterwards by the caller, together with the floors.
//!
//! Invariant: the input order decides ties. The caller sorts newest first with a total order
//! (time, then creation time, then name), so two Backups with the same timestamp are always
//! resolved the same way.

use std::time::Duration;

use api::backups::RetentionPolicy;
use chrono::{DateTime, Datelike, Utc};
use schedule::chrono_tz::Tz;

/// One rule of a retention policy, as named in its spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// `keepLast`.
    Last,
    /// `keepDaily`.
    Daily,
    /// `keepWeekly`.
    Weekly,
    /// `keepMonthly`.
    Monthly,
}

impl Rule {
    /// The field name in `spec.retentionPolicy`.
    pub fn field(self) -> &'static str {
        match self {
            Self::Last => "keepLast",
            Self::Daily => "keepDaily",
            Self::Weekly => "keepWeekly",
            Self::Monthly => "keepMonthly",
        }
    }
}

/// Why a retention policy cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A count is negative.
    #[error("spec.retentionPolicy.{field} is {value}; it must be 0 or more")]
    NegativeCount {
        /// The field.
        field: &'static str,
        /// Its value.
        value: i32,
    },
    /// `maxAge` is not a Go duration.
    #[error("spec.retentionPolicy.maxAge {value:?} is not a duration such as \"720h\": {problem}")]
    InvalidMaxAge {
        /// The text.
        value: String,
        /// Go's complaint.
        problem: String,
    },
    /// `maxAge` is negative.
    #[error("spec.retentionPolicy.maxAge {value:?} is negative")]
    NegativeMaxAge {
        /// The text.
        value: String,
    },
    /// The calendar rules need the schedule's time zone, and the schedule does not parse.
    #[error(
        "spec.retentionPolicy.{field} counts calendar periods in the Plan's time zone, but spec.schedule.cron does not parse: {problem}"
    )]
    UnknownZone {
        /// The first calendar rule set.
        field: &'static str,
        /// The schedule's parse error.
        problem: String,
    },
}

/// A checked retention policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    /// `keepLast`.
    pub keep_last: Option<usize>,
    /// `keepDaily`.
    pub keep_daily: Option<usize>,
    /// `keepWeekly`.
    pub keep_weekly: Option<usize>,
    /// `keepMonthly`.
    pub keep_monthly: Option<usize>,
    /// `maxAge`.
    pub max_age: Option<Duration>,
    /// `keepFailed` (0 when unset).
    pub keep_failed: usize,
}

impl Policy {
    /// Checks a Plan's raw policy.
    pub fn parse(raw: &RetentionPolicy) -> Result<Self, PolicyError> {
        let count = |field: &'static str, v: Option<i32>| -> Result<Option<usize>, PolicyError> {
            match v {
                None => Ok(None),
                Some(value) => usize::try_from(value)
                    .map(Some)
                    .map_err(|_| PolicyError::NegativeCount { field, value }),
            }
        };
        let max_age = match raw.max_age.as_deref() {
            None => None,
            Some(text) => {
                let nanos = drivers::mariadb::parse_go_duration(text).map_err(|problem| {
                    PolicyError::InvalidMaxAge {
                        value: text.to_owned(),
                        problem,
                    }
                })?;
                let nanos = u64::try_from(nanos).map_err(|_| PolicyError::NegativeMaxAge {
                    value: text.to_owned(),
                })?;
                Some(Duration::from_nanos(nanos))
            }
        };
        Ok(Self {
            keep_last: count("keepLast", raw.keep_last)?,
            keep_daily: count("keepDaily", raw.keep_daily)?,
            keep_weekly: count("keepWeekly", raw.keep_weekly)?,
            keep_monthly: count("keepMonthly", raw.keep_monthly)?,
            max_age,
            keep_failed: count("keepFailed", raw.keep_failed)?.unwrap_or(0),
        })
    }

    /// The first calendar rule the policy sets (these need the Plan's time zone).
    pub fn calendar_rule(&self) -> Option<Rule> {
        [
            (Rule::Daily, self.keep_daily),
            (Rule::Weekly, self.keep_weekly),
            (Rule::Monthly, self.keep_monthly),
        ]
        .into_iter()
        .find_map(|(rule, n)| n.map(|_| rule))
    }
}

/// The calendar period of `rule` that a local time falls in.
fn period(rule: Rule, local: &DateTime<Tz>) -> (i32, u32) {
    match rule {
        Rule::Daily => (local.year(), local.ordinal()),
        Rule::Weekly => {
            let w = local.iso_week();
            (w.year(), w.week())
        }
        // `keepLast` counts Backups, not periods; it is never asked for one.
        Rule::Monthly | Rule::Last => (local.year(), local.month()),
    }
}

/// The rules that keep each Backup, for `times` sorted newest first (index-aligned with the
/// input), with calendar periods taken in `zone`.
pub fn select(policy: &Policy, times: &[DateTime<Utc>], zone: Tz) -> Vec<Vec<Rule>> {
    let mut kept = vec![Vec::new(); times.len()];
    if let Some(n) = policy.keep_last {
        for rules in kept.iter_mut().take(n) {
            rules.push(Rule::Last);
        }
    }
    let local: Vec<_> = times.iter().map(|t| t.with_timezone(&zone)).collect();
    let periods = [
        (Rule::Daily, policy.keep_daily),
        (Rule::Weekly, policy.keep_weekly),
        (Rule::Monthly, policy.keep_monthly),
    ];
    for (rule, n) in periods {
        let Some(mut left) = n else { continue };
        let mut last = None;
        for (rules, at) in kept.iter_mut().zip(&local) {
            if left == 0 {
                break;
            }
            let p = period(rule, at);
            if last != Some(p) {
                // The newest Backup of a period not seen yet: it represents that period.
                rules.push(rule);
                last = Some(p);
                left -= 1;
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use schedule::chrono_tz::{Europe, UTC};

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn policy(
        last: Option<usize>,
        daily: Option<usize>,
        weekly: Option<usize>,
        monthly: Option<usize>,
    ) -> Policy {
        Policy {
            keep_last: last,
            keep_daily: daily,
            keep_weekly: weekly,
            keep_monthly: monthly,
            ..Default::default()
        }
    }

    /// Which of `times` (newest first) each rule keeps, by index.
    fn kept_by(p: &Policy, times: &[&str], zone: Tz) -> Vec<(usize, Vec<Rule>)> {
        let times: Vec<_> = times.iter().map(|t| at(t)).collect();
        select(p, &times, zone)
            .into_iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .collect()
    }

    #[test]
    fn calendar_boundaries() {
        use Rule::*;
        struct Case {
            name: &'static str,
            policy: Policy,
            zone: Tz,
            times: &'static [&'static str],
            want: Vec<(usize, Vec<Rule>)>,
        }
        let cases = [
            Case {
                name: "keepLast keeps the newest N",
                policy: policy(Some(2), None, None, None),
                zone: UTC,
                times: &[
                    "2026-01-03T00:00:00Z",
                    "2026-01-02T00:00:00Z",
                    "2026-01-01T00:00:00Z",
                ],
                want: vec![(0, vec![Last]), (1, vec![Last])],
            },
            Case {
                name: "keepLast 0 keeps nothing",
                policy: policy(Some(0), None, None, None),
                zone: UTC,
                times: &["2026-01-03T00:00:00Z", "2026-01-02T00:00:00Z"],
                want: vec![],
            },
            Case {
                name: "daily: the newest of each day, the day ends at midnight",
                policy: policy(None, Some(2), None, None),
                zone: UTC,
                times: &[
                    "2026-01-02T00:00:00Z", // day 2, newest
                    "2026-01-01T23:59:59Z", // day 1, newest of day 1
                    "2026-01-01T12:00:00Z",
                    "2025-12-31T23:00:00Z", // a third day: beyond keepDaily 2
                ],
                want: vec![(0, vec![Daily]), (1, vec![Daily])],
            },
            Case {
                name: "daily: days without a backup do not count",
                policy: policy(None, Some(2), None, None),
                zone: UTC,
                times: &[
                    "2026-01-10T01:00:00Z",
                    "2026-01-01T01:00:00Z",
                    "2025-12-01T01:00:00Z",
                ],
                want: vec![(0, vec![Daily]), (1, vec![Daily])],
            },
            Case {
                name: "weekly: ISO weeks start on Monday (2026-01-05 is a Monday)",
                policy: policy(None, None, Some(2), None),
                zone: UTC,
                times: &[
                    "2026-01-05T00:00:00Z", // Mon, week 2
                    "2026-01-04T23:59:59Z", // Sun, week 1
                    "2026-01-01T00:00:00Z", // Thu, week 1
                    "2025-12-28T00:00:00Z", // Sun, 2025 week 52: third week
                ],
                want: vec![(0, vec![Weekly]), (1, vec![Weekly])],
            },
            Case {
                name: "weekly: 2025-12-29 (Monday) already belongs to ISO week 1 of 2026",
                policy: policy(None, None, Some(1), None),
                zone: UTC,
                times: &["2026-01-02T00:00:00Z", "2025-12-29T00:00:00Z"],
                want: vec![(0, vec![Weekly])],
            },
            Case {
                name: "monthly: calendar months, not 30-day spans",
                policy: policy(None, None, None, Some(2)),
                zone: UTC,
                times: &[
                    "2026-03-01T00:00:00Z",
                    "2026-02-28T23:00:00Z",
                    "2026-02-01T00:00:00Z",
                    "2026-01-31T23:00:00Z",
                ],
                want: vec![(0, vec![Monthly]), (1, vec![Monthly])],
            },
            Case {
                name: "rules are independent; a Backup kept by several lists them all",
                policy: policy(Some(1), Some(2), Some(2), Some(2)),
                zone: UTC,
                times: &[
                    "2026-02-10T00:00:00Z",
                    "2026-02-09T00:00:00Z",
                    "2026-02-01T00:00:00Z",
                    "2026-01-15T00:00:00Z",
                ],
                want: vec![
                    (0, vec![Last, Daily, Weekly, Monthly]),
                    (1, vec![Daily]),
                    (2, vec![Weekly]), // Sunday Feb 1: the week before Monday Feb 9
                    (3, vec![Monthly]),
                ],
            },
            Case {
                name: "zone: 23:30Z on Jan 31 is Feb 1 in Berlin, so it is February's newest",
                policy: policy(None, None, None, Some(2)),
                zone: Europe::Berlin,
                times: &[
                    "2026-02-15T00:00:00Z",
                    "2026-01-31T23:30:00Z", // 00:30 on Feb 1 in Berlin
                    "2026-01-31T22:30:00Z", // 23:30 on Jan 31 in Berlin
                ],
                want: vec![(0, vec![Monthly]), (2, vec![Monthly])],
            },
            Case {
                name: "same instants in UTC: one month",
                policy: policy(None, None, None, Some(2)),
                zone: UTC,
                times: &[
                    "2026-02-15T00:00:00Z",
                    "2026-01-31T23:30:00Z",
                    "2026-01-31T22:30:00Z",
                ],
                want: vec![(0, vec![Monthly]), (1, vec![Monthly])],
            },
            Case {
                name: "DST spring forward (Berlin, 2026-03-29): the 23-hour day is one day",
                policy: policy(None, Some(3), None, None),
                zone: Europe::Berlin,
                times: &[
                    "2026-03-29T22:30:00Z", // 00:30 CEST Mar 30
                    "2026-03-29T21:59:00Z", // 23:59 CEST Mar 29
                    "2026-03-28T23:30:00Z", // 00:30 CET Mar 29
                    "2026-03-28T22:30:00Z", // 23:30 CET Mar 28
                ],
                want: vec![(0, vec![Daily]), (1, vec![Daily]), (3, vec![Daily])],
            },
            Case {
                name: "DST fall back (Berlin, 2026-10-25): 02:30 twice is one day",
                policy: policy(None, Some(2), None, None),
                zone: Europe::Berlin,
                times: &[
                    "2026-10-25T01:30:00Z", // 02:30 CET Oct 25 (second time)
                    "2026-10-25T00:30:00Z", // 02:30 CEST Oct 25 (first time)
                    "2026-10-24T21:30:00Z", // 23:30 CEST Oct 24
                ],
                want: vec![(0, vec![Daily]), (2, vec![Daily])],
            },
            Case {
                name: "ties: equal times, the earlier position (the caller's order) wins",
                policy: policy(None, Some(1), None, None),
                zone: UTC,
                times: &["2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z"],
                want: vec![(0, vec![Daily])],
            },
        ];
        for c in cases {
            assert_eq!(kept_by(&c.policy, c.times, c.zone), c.want, "{}", c.name);
        }
    }

    #[test]
    fn parse_checks_counts_and_max_age() {
        let raw = |f: fn(&mut RetentionPolicy)| {
            let mut r = RetentionPolicy::default();
            f(&mut r);
            Policy::parse(&r)
        };
        assert_eq!(
            raw(|r| {
                r.keep_last = Some(3);
                r.max_age = Some("720h".into());
                r.keep_failed = Some(2);
            }),
            Ok(Policy {
                keep_last: Some(3),
                max_age: Some(Duration::from_secs(720 * 3600)),
                keep_failed: 2,
                ..Default::default()
            })
        );
        assert_eq!(
            raw(|r| r.keep_daily = Some(-1)),
            Err(PolicyError::NegativeCount {
                field: "keepDaily",
                value: -1
            })
        );
        assert_eq!(
            raw(|r| r.max_age = Some("30d".into()))
                .unwrap_err()
                .to_string(),
            "spec.retentionPolicy.maxAge \"30d\" is not a duration such as \"720h\": time: unknown unit \"d\" in duration \"30d\""
        );
        assert_eq!(
            raw(|r| r.max_age = Some("-1h".into())),
            Err(PolicyError::NegativeMaxAge {
                value: "-1h".into()
            })
        );
    }
}
