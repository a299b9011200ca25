//! Pure Plan scheduling: when a backup Plan's BackupJobs are due, and what they are called.
//!
//! ```text
//!  spec.schedule.cron ──► Schedule::parse(spec, process zone) ──► Schedule ─┬─► next_after(t)
//!  ("CRON_TZ=Europe/Berlin 0 2 * * *")        │                             ├─► zone()
//!                                             ▼                             └─► decide(Evaluation)
//!                                    ParseError (Plan condition message)          │
//!                                                                                 ▼
//!  now, creationTimestamp, status.lastScheduleTime, deadline ──────────► SlotDecision { due,
//!                                                                          skipped, next }
//!  plan name + due slot ──► backup_job_name() ──► "<plan>-<minutes since the epoch>"
//! ```
//!
//! The dialect is the one upstream's Plan controller parses with robfig/cron v3
//! `ParseStandard`: five fields (minute hour day-of-month month day-of-week) with names, ranges,
//! lists, steps and `*`/`?`; the descriptors `@yearly @annually @monthly @weekly @daily
//! @midnight @hourly @every <Go duration>`; an optional `CRON_TZ=<zone> ` or `TZ=<zone> `
//! prefix; and robfig's rule that a restricted day-of-month and a restricted day-of-week are
//! alternatives. Activation times are computed with robfig's own walk over the wall clock of
//! the schedule's zone, so DST gaps and repeats behave as they do upstream (see the `walk` module's
//! documentation). Where this crate deliberately differs from upstream (stricter parsing of
//! nonsense, the catch-up rule, long names) is listed in `docs/plans.md`.
//!
//! ```
//! use chrono::{DateTime, Utc};
//! use schedule::chrono_tz::UTC;
//! use schedule::{DEFAULT_STARTING_DEADLINE, Evaluation, Schedule, backup_job_name};
//!
//! let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
//! let nightly = Schedule::parse("CRON_TZ=Europe/Berlin 0 2 * * *", UTC).unwrap();
//! let decision = nightly.decide(&Evaluation {
//!     now: at("2024-01-01T01:00:30Z"),
//!     created: at("2023-12-01T00:00:00Z"),
//!     last_slot: Some(at("2023-12-31T01:00:00Z")),
//!     starting_deadline: DEFAULT_STARTING_DEADLINE,
//! });
//! let slot = decision.due.unwrap();
//! assert_eq!(slot, at("2024-01-01T01:00:00Z")); // 02:00 in Berlin
//! assert_eq!(backup_job_name("nightly", slot), "nightly-28401180");
//! assert_eq!(decision.next, Some(at("2024-01-02T01:00:00Z")));
//! assert_eq!(decision.skipped, None);
//! ```
//!
//! Invariants: no I/O, no clock reads, no Kubernetes types; every function is deterministic in
//! its inputs, which is what lets several replicas agree on a slot without talking.

mod duration;
mod name;
mod parse;
mod slot;
mod walk;

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

pub use duration::DurationError;
pub use name::{MAX_JOB_NAME_LEN, backup_job_name};
pub use parse::{CronField, FieldError, ParseError};
pub use slot::{
    DEFAULT_STARTING_DEADLINE, Evaluation, SKIPPED_COUNT_LIMIT, Skipped, SkippedCount, SlotDecision,
};

/// Re-exported so callers name zones with the same type.
pub use chrono_tz;

use parse::Kind;

/// A parsed Plan schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    spec: String,
    zone: Tz,
    kind: Kind,
}

impl Schedule {
    /// Parses `spec`; `default_zone` is the zone of a spec without a `CRON_TZ=`/`TZ=` prefix
    /// (upstream uses the controller process's zone, UTC in a container unless configured).
    pub fn parse(spec: &str, default_zone: Tz) -> Result<Self, ParseError> {
        let (kind, zone) = parse::parse(spec, default_zone)?;
        Ok(Self {
            spec: spec.to_owned(),
            zone,
            kind,
        })
    }

    /// The zone the schedule is evaluated in: the prefix's, else the default zone.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The interval of an `@every` schedule (whole seconds, at least one), `None` for a
    /// calendar schedule.
    pub fn interval(&self) -> Option<Duration> {
        match self.kind {
            Kind::Every(seconds) => Some(Duration::from_secs(seconds.unsigned_abs())),
            Kind::Cron(_) => None,
        }
    }

    /// The spec as written.
    pub fn as_str(&self) -> &str {
        &self.spec
    }

    /// robfig/cron's `Next`: the first activation strictly after `t`, or `None` when there is
    /// none within five years. For `@every d` this is `t + d` (with `t`'s fraction of a second
    /// dropped), exactly as robfig defines it; [`Schedule::decide`] instead lays `@every`
    /// slots on a fixed grid from the Plan's creation or last slot, so they do not drift.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.kind {
            Kind::Cron(fields) => walk::next(fields, self.zone, t.timestamp())
                .and_then(|unix| DateTime::from_timestamp(unix, 0)),
            Kind::Every(seconds) => DateTime::from_timestamp(t.timestamp(), 0)?
                .checked_add_signed(TimeDelta::seconds(*seconds)),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spec)
    }
}

/// Parses an IANA time-zone name (`UTC`, `Europe/Berlin`), e.g. for a `--time-zone` flag.
pub fn parse_zone(name: &str) -> Result<Tz, UnknownZone> {
    parse::parse_zone_name(name).ok_or_else(|| UnknownZone(name.to_owned()))
}

/// A time-zone name that is not in the time-zone database.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown time zone {0:?} (expected an IANA name such as \"Europe/Berlin\" or \"UTC\")")]
pub struct UnknownZone(pub String);
