//! The slot decision of one Plan evaluation: which scheduled time (if any) to run now, which
//! missed ones are given up, and when the next one is.
//!
//! ```text
//!  Evaluation { now, created, last_slot, starting_deadline }
//!        │
//!        ▼   slots = the schedule's activation times after the origin
//!  ──────┬──────────────┬─────────────────────────┬──────────┬──────────►  time
//!     origin        horizon               now − deadline    now
//!   (last_slot,    (slots at or before         │             │
//!    else created)  it are not ours to report) │             │
//!                  ├─ skipped (oldest…newest) ─┼── due ──────┤   next ► first slot after now
//!                                              (only the newest slot in this window runs)
//! ```
//!
//! * **origin**: the recorded last slot (`status.lastScheduleTime`), else the Plan's creation
//!   time. Slots at or before it never run. For `@every` it is also where the interval grid
//!   starts (origin + n × interval); calendar schedules have a fixed grid of their own.
//! * **horizon**: with a recorded slot, the origin: every later slot that does not run is
//!   reported as skipped. Without one, the later of creation and `now − deadline`: a Plan
//!   written by another controller (upstream records no last slot) must not report the
//!   slots that controller already ran as skipped.
//! * **due**: the newest slot in `(horizon, now]` if it is also in `(now − deadline, now]`.
//!   At most one slot runs per evaluation, and only a recent one.
//! * **skipped**: every other slot in `(horizon, now]`, as a count with the oldest and newest.
//!
//! Invariants: pure (no clock is read); the same inputs give the same decision, so two
//! replicas, or a replica before and after a restart, pick the same slot and therefore the
//! same BackupJob name; once the caller records the due slot, no evaluation returns it or any
//! earlier slot again.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

use crate::Schedule;
use crate::parse::{CronFields, Kind};
use crate::walk;

/// Upstream's starting deadline: a slot more than five minutes old is not run any more.
pub const DEFAULT_STARTING_DEADLINE: Duration = Duration::from_secs(300);

/// Skipped slots are counted one by one up to this many; beyond it the count is a lower bound.
/// It keeps an evaluation after a long outage of a minutely schedule cheap.
pub const SKIPPED_COUNT_LIMIT: u64 = 10_000;

/// Everything one evaluation of a Plan depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// The current time.
    pub now: DateTime<Utc>,
    /// The Plan's `metadata.creationTimestamp`.
    pub created: DateTime<Utc>,
    /// The Plan's last slot as stored from an earlier decision's [`SlotDecision::record`]
    /// (`status.lastScheduleTime`): the newest slot already run or reported skipped.
    pub last_slot: Option<DateTime<Utc>>,
    /// How late a slot may still be run ([`DEFAULT_STARTING_DEADLINE`] unless configured). A
    /// slot is on time while it lies in `(now − deadline, now]`; zero means no slot is ever
    /// run, so callers should reject it.
    pub starting_deadline: Duration,
}

/// The outcome of one evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotDecision {
    /// The slot to create a BackupJob for now, if any. The caller creates
    /// [`crate::backup_job_name`]`(plan, due)` (an AlreadyExists answer means another replica or
    /// an earlier attempt did it) and then stores [`SlotDecision::record`].
    pub due: Option<DateTime<Utc>>,
    /// Missed slots that will never run, if any (for one Event).
    pub skipped: Option<Skipped>,
    /// The first slot after now (for `status.nextScheduleTime` and the requeue); `None` when
    /// the schedule has no activation within five years.
    pub next: Option<DateTime<Utc>>,
    /// The slot to store as the Plan's last slot once the BackupJob exists (or, with nothing
    /// due, once the skip is reported): `due`, else the newest skipped slot; `None` means
    /// leave the stored value alone. Storing the newest skipped slot too is what makes a skip
    /// reported once instead of at every evaluation.
    pub record: Option<DateTime<Utc>>,
}

/// Missed slots that are given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// How many.
    pub count: SkippedCount,
    /// The oldest of them.
    pub oldest: DateTime<Utc>,
    /// The newest of them.
    pub newest: DateTime<Utc>,
}

/// A number of skipped slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkippedCount {
    /// Exactly this many.
    Exact(u64),
    /// More than [`SKIPPED_COUNT_LIMIT`] (the value is the limit).
    AtLeast(u64),
}

impl fmt::Display for SkippedCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(n) => write!(f, "{n}"),
            Self::AtLeast(n) => write!(f, "more than {n}"),
        }
    }
}

impl Schedule {
    /// Decides one evaluation of a Plan; see the module documentation for the rule.
    pub fn decide(&self, e: &Evaluation) -> SlotDecision {
        let now = e.now.timestamp();
        let created = e.created.timestamp();
        let deadline = TimeDelta::from_std(e.starting_deadline).unwrap_or(TimeDelta::MAX);
        let window = e
            .now
            .checked_sub_signed(deadline)
            .map_or(i64::MIN, |w| w.timestamp());
        let (origin, horizon) = match e.last_slot {
            Some(last) => {
                let origin = last.timestamp().max(created);
                (origin, origin)
            }
            None => (created, created.max(window)),
        };
        let grid = self.grid(origin);

        let Some(newest) = grid.newest_in(horizon, now) else {
            return SlotDecision {
                due: None,
                skipped: None,
                next: grid.first_after(now.max(horizon)).and_then(instant),
                record: None,
            };
        };
        let (due, skipped_bound) = if newest > window {
            (Some(newest), newest - 1)
        } else {
            (None, now)
        };
        let skipped = grid.newest_in(horizon, skipped_bound).and_then(|latest| {
            let oldest = grid.first_after(horizon).unwrap_or(latest);
            Some(Skipped {
                count: grid.count_in(horizon, latest),
                oldest: instant(oldest)?,
                newest: instant(latest)?,
            })
        });
        let due = due.and_then(instant);
        SlotDecision {
            due,
            skipped,
            next: grid.first_after(now).and_then(instant),
            record: due.or(skipped.map(|s| s.newest)),
        }
    }

    fn grid(&self, origin: i64) -> Grid<'_> {
        match &self.kind {
            Kind::Cron(fields) => Grid::Calendar {
                fields,
                zone: self.zone,
            },
            Kind::Every(step) => Grid::Interval {
                origin,
                step: *step,
            },
        }
    }
}

fn instant(unix: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(unix, 0)
}

/// The slots of a schedule, in unix seconds.
enum Grid<'a> {
    /// A calendar schedule: robfig's walk defines the slots.
    Calendar { fields: &'a CronFields, zone: Tz },
    /// `@every`: `origin + n × step` for n ≥ 1.
    Interval { origin: i64, step: i64 },
}

impl Grid<'_> {
    /// The first slot strictly after `t`.
    fn first_after(&self, t: i64) -> Option<i64> {
        match *self {
            Self::Calendar { fields, zone } => walk::next(fields, zone, t),
            Self::Interval { origin, step } => {
                let n = (t.checked_sub(origin)?.div_euclid(step) + 1).max(1);
                origin.checked_add(n.checked_mul(step)?)
            }
        }
    }

    fn at_or_before(&self, t: i64, bound: i64) -> bool {
        self.first_after(t).is_some_and(|slot| slot <= bound)
    }

    /// The newest slot in `(horizon, bound]`.
    fn newest_in(&self, horizon: i64, bound: i64) -> Option<i64> {
        if horizon >= bound {
            return None;
        }
        match *self {
            Self::Interval { origin, step } => {
                let n = bound.checked_sub(origin)?.div_euclid(step);
                let slot = origin.checked_add(n.checked_mul(step)?)?;
                (n >= 1 && slot > horizon).then_some(slot)
            }
            Self::Calendar { .. } => {
                if !self.at_or_before(horizon, bound) {
                    return None;
                }
                // Widen a window ending at `bound` until it holds a slot, then bisect for the
                // latest start whose first slot is still within `bound`: that slot is the
                // newest. A few dozen walks, however long the outage.
                let mut span: i64 = 60;
                let mut high = bound;
                let mut low = loop {
                    let probe = bound.saturating_sub(span).max(horizon);
                    if self.at_or_before(probe, bound) {
                        break probe;
                    }
                    high = probe;
                    span = span.saturating_mul(2);
                };
                while high - low > 1 {
                    let mid = low + (high - low) / 2;
                    if self.at_or_before(mid, bound) {
                        low = mid;
                    } else {
                        high = mid;
                    }
                }
                self.first_after(low)
            }
        }
    }

    /// How many slots lie in `(horizon, bound]`.
    fn count_in(&self, horizon: i64, bound: i64) -> SkippedCount {
        match *self {
            Self::Interval { origin, step } => {
                let last = (bound - origin).div_euclid(step);
                let first = ((horizon - origin).div_euclid(step) + 1).max(1);
                SkippedCount::Exact(u64::try_from(last - first + 1).unwrap_or(0))
            }
            Self::Calendar { .. } => {
                let mut count = 0;
                let mut t = horizon;
                while let Some(slot) = self.first_after(t).filter(|slot| *slot <= bound) {
                    if count == SKIPPED_COUNT_LIMIT {
                        return SkippedCount::AtLeast(SKIPPED_COUNT_LIMIT);
                    }
                    count += 1;
                    t = slot;
                }
                SkippedCount::Exact(count)
            }
        }
    }
}
