//! Restore drills: the pure decisions (no client, no clock). A Plan's `spec.verification` says
//! when a drill is due; a drill restores a Backup into a scratch application no tenant owns,
//! checks the data there, deletes everything it made and records the result on the Backup.
//!
//! ```text
//!  Plan.spec.verification ─ validate ─ invalid ─► Warning InvalidVerification (names the field)
//!        │ every N successful Backups since the last drilled one │ a cron slot since the last drill
//!        ▼
//!  newest successful Backup ─► state annotation {Restoring, startedAt}        (write 1)
//!  Restoring:  scratch application <app>-verify-<hash> (labelled)             (write 2)
//!              RestoreJob <app>-verify-<hash> into it (labelled)              (write 3)
//!              RestoreJob Succeeded ─► Checking (Postgres) or Passed ─► CleaningUp   (write 4)
//!              RestoreJob Failed / deadline ─► Failed ─► CleaningUp
//!  Checking:   the check against the scratch database (the operator's `-app` Secret)
//!              ─► Passed / Failed ─► CleaningUp                               (write 5)
//!  CleaningUp: delete the RestoreJob, the application and what it rendered    (writes 6)
//!              everything gone ─► status.verification + Verified, annotation removed (write 7)
//! ```
//!
//! Invariants: every name is derived from the Backup's uid, so a restarted daemon finds what it
//! created instead of creating it again; the state lives on the Backup and the result replaces it
//! in one write, so a drill records exactly one result; a drill never writes to the live
//! application (its RestoreJob targets the scratch copy).

pub mod check;
pub mod run;

use std::time::Duration;

use api::backups::{Backup, BackupVerification, Plan, PlanVerification};
use api::contract::{drills, phases};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use schedule::Schedule;
use schedule::chrono_tz::UTC;
use serde::{Deserialize, Serialize};

/// The deadline of a drill when `timeoutSeconds` is unset.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long the deletion of a drill's objects may take before the result is recorded anyway
/// (with the objects still present named in the message).
pub const CLEANUP_TIMEOUT: Duration = Duration::from_secs(600);
/// The longest scratch application name: CloudNativePG names the recovery Job of Cluster
/// `postgres-<name>` `postgres-<name>-1-full-recovery`, which must stay within 63 characters.
pub const MAX_SCRATCH_NAME_LEN: usize = 35;

/// When drills of a Plan are due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// After this many successful Backups since the last drilled one.
    Every(u32),
    /// At each slot of this schedule.
    Schedule(Schedule),
}

/// A Plan's valid verification settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// When a drill is due.
    pub when: When,
    /// The query that must return a row (Postgres), if any.
    pub sql: Option<String>,
    /// The drill's deadline.
    pub timeout: Duration,
}

/// Why a Plan's `spec.verification` cannot be used: the field and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The field, e.g. `spec.verification.schedule`.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}; no restore drill of this Plan runs until it is fixed",
            self.field, self.problem
        )
    }
}

/// The Plan's drill rule: `Ok(None)` when it asks for no drills.
pub fn validate(plan: &Plan) -> Result<Option<Rule>, Invalid> {
    let Some(v) = plan.spec.verification.as_ref() else {
        return Ok(None);
    };
    rule(v).map(Some)
}

/// The rule of a verification block (also used for a drill requested on a Backup of a Plan
/// without one: then `v` is the default block with `every: 1`).
pub fn rule(v: &PlanVerification) -> Result<Rule, Invalid> {
    let when = match (v.every, v.schedule.as_deref()) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(Invalid {
                field: "spec.verification",
                problem: "exactly one of every and schedule must be set".into(),
            });
        }
        (Some(n), None) => match u32::try_from(n) {
            Ok(n) if n >= 1 => When::Every(n),
            _ => {
                return Err(Invalid {
                    field: "spec.verification.every",
                    problem: format!("must be at least 1, got {n}"),
                });
            }
        },
        (None, Some(spec)) => match Schedule::parse(spec, UTC) {
            Ok(s) => When::Schedule(s),
            Err(e) => {
                return Err(Invalid {
                    field: "spec.verification.schedule",
                    problem: format!("{spec:?} is not a valid schedule: {e}"),
                });
            }
        },
    };
    let sql = match v.sql.as_deref().map(str::trim) {
        Some("") => {
            return Err(Invalid {
                field: "spec.verification.sql",
                problem: "must not be empty (leave it unset for the default check)".into(),
            });
        }
        other => other.map(str::to_owned),
    };
    let timeout = match v.timeout_seconds {
        None => DEFAULT_TIMEOUT,
        Some(s) if s >= 1 => Duration::from_secs(s.unsigned_abs()),
        Some(s) => {
            return Err(Invalid {
                field: "spec.verification.timeoutSeconds",
                problem: format!("must be at least 1, got {s}"),
            });
        }
    };
    Ok(Rule { when, sql, timeout })
}

/// A Backup that can be drilled: `Ready` and not being deleted.
pub fn usable(b: &Backup) -> bool {
    b.metadata.deletion_timestamp.is_none()
        && b.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phases::READY)
}

/// The Plan's successful Backups (by `planRef`), newest `takenAt` first (then name, for ties).
pub fn plan_backups<'a>(plan: &Plan, backups: &'a [Backup]) -> Vec<&'a Backup> {
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    let ns = plan.metadata.namespace.as_deref();
    let mut out: Vec<&Backup> = backups
        .iter()
        .filter(|b| b.metadata.namespace.as_deref() == ns)
        .filter(|b| b.spec.plan_ref.as_ref().is_some_and(|r| r.name == name))
        .filter(|b| usable(b))
        .collect();
    out.sort_by(|a, b| {
        (b.spec.taken_at.0, b.metadata.name.as_deref())
            .cmp(&(a.spec.taken_at.0, a.metadata.name.as_deref()))
    });
    out
}

fn verification(b: &Backup) -> Option<&BackupVerification> {
    b.status.as_ref().and_then(|s| s.verification.as_ref())
}

/// The Backup a due drill verifies (the newest successful one), or `None` when nothing is due.
/// `backups` are the Plan's successful Backups, newest first ([`plan_backups`]).
pub fn due<'a>(
    rule: &Rule,
    plan: &Plan,
    backups: &[&'a Backup],
    now: Timestamp,
) -> Option<&'a Backup> {
    let newest = *backups.first()?;
    match &rule.when {
        When::Every(n) => {
            let since = backups
                .iter()
                .take_while(|b| verification(b).is_none())
                .count();
            (since >= *n as usize).then_some(newest)
        }
        When::Schedule(s) => {
            let last = backups
                .iter()
                .filter_map(|b| verification(b)?.last_verified_at.as_ref())
                .map(|t| t.0)
                .max()
                .or_else(|| plan.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
            let slot = s.next_after(chrono_of(last))?;
            (slot <= chrono_of(now)
                && verification(newest).is_none_or(|v| {
                    v.last_verified_at
                        .as_ref()
                        .is_none_or(|t| chrono_of(t.0) < slot)
                }))
            .then_some(newest)
        }
    }
}

fn chrono_of(t: Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond().max(0) as u32).unwrap_or_default()
}

/// FNV-1a over `s`: a stable short hash (the same on every replica and release).
fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The scratch application (and RestoreJob) of a drill of Backup `backup_uid` of application
/// `app`: `<app>-verify-<8 hex>`, the application part cut so the whole stays within
/// [`MAX_SCRATCH_NAME_LEN`].
pub fn scratch_name(app: &str, backup_uid: &str) -> String {
    let hash = format!("{:016x}", fnv1a(backup_uid));
    let suffix = format!("{}{}", drills::NAME_INFIX, &hash[..8]);
    let room = MAX_SCRATCH_NAME_LEN - suffix.len();
    let mut prefix: String = app.chars().take(room).collect();
    while prefix.ends_with(['-', '.']) {
        prefix.pop();
    }
    format!("{prefix}{suffix}")
}

/// Where a drill is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// The scratch application and the RestoreJob are created; waiting for the restore.
    Restoring,
    /// The restore succeeded; the check runs against the scratch database.
    Checking,
    /// The result is known; the drill's objects are being deleted.
    CleaningUp,
}

/// A drill's persisted state (the Backup's [`drills::STATE_ANNOTATION`], JSON). Never holds a
/// credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// Where the drill is.
    pub phase: Phase,
    /// The scratch application's (and RestoreJob's) name.
    pub scratch: String,
    /// When the drill started (RFC 3339).
    pub started_at: Timestamp,
    /// The deadline of the restore and the check, in seconds.
    pub timeout_seconds: u64,
    /// The query to check with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<String>,
    /// When the check started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_started_at: Option<Timestamp>,
    /// When the cleanup started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup_started_at: Option<Timestamp>,
    /// `Passed` or `Failed`, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// What was verified, or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Seconds from the start to the restore's terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_seconds: Option<i64>,
    /// Seconds the check took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_seconds: Option<i64>,
}

impl State {
    /// A new drill of `backup` (application `app`) at `now`.
    pub fn start(backup: &Backup, rule: &Rule, now: Timestamp) -> State {
        State {
            phase: Phase::Restoring,
            scratch: scratch_name(
                &backup.spec.application_ref.name,
                backup.metadata.uid.as_deref().unwrap_or_default(),
            ),
            started_at: now,
            timeout_seconds: rule.timeout.as_secs(),
            sql: rule.sql.clone(),
            check_started_at: None,
            cleanup_started_at: None,
            result: None,
            message: None,
            restore_seconds: None,
            check_seconds: None,
        }
    }

    /// The state a Backup carries, if a drill of it runs (`Err`: unreadable, with the reason).
    pub fn of(backup: &Backup) -> Option<Result<State, String>> {
        let raw = backup
            .metadata
            .annotations
            .as_ref()?
            .get(drills::STATE_ANNOTATION)?;
        Some(serde_json::from_str(raw).map_err(|e| e.to_string()))
    }

    /// True once the restore and check deadline has passed.
    pub fn overdue(&self, now: Timestamp) -> bool {
        seconds_between(self.started_at, now) >= self.timeout_seconds as i64
    }

    /// Moves to cleanup with `result` and `message`.
    pub fn conclude(mut self, result: &str, message: String, now: Timestamp) -> State {
        self.phase = Phase::CleaningUp;
        self.result = Some(result.into());
        self.message = Some(message);
        self.cleanup_started_at = Some(now);
        self
    }

    /// The `status.verification` recorded at `now`.
    pub fn verification(&self, now: Timestamp) -> BackupVerification {
        BackupVerification {
            last_verified_at: Some(Time(now)),
            result: self.result.clone(),
            message: self.message.clone(),
            restore_seconds: self.restore_seconds,
            check_seconds: self.check_seconds,
        }
    }
}

/// The RestoreJob's `restoreTimeoutSeconds` in a drill of deadline `timeout_seconds`: three
/// quarters of it, so the restore fails with its driver's own diagnosis before the drill's
/// deadline, leaving time for the check.
pub fn restore_timeout_seconds(timeout_seconds: u64) -> u64 {
    (timeout_seconds * 3 / 4).max(1)
}

/// Whole seconds from `from` to `to` (never negative).
pub fn seconds_between(from: Timestamp, to: Timestamp) -> i64 {
    (to.as_second() - from.as_second()).max(0)
}

/// The newest `Passed` verification among `backups` (the application's last verified time).
pub fn last_passed(backups: &[&Backup]) -> Option<Timestamp> {
    backups
        .iter()
        .filter_map(|b| verification(b))
        .filter(|v| v.result.as_deref() == Some(drills::PASSED))
        .filter_map(|v| v.last_verified_at.as_ref().map(|t| t.0))
        .max()
}

/// The scratch application's spec: the source's, with the chart-wired backups of a Postgres
/// application (`backup.enabled`) turned off, so that the copy writes nothing to the tenant's
/// backup destination (the restore still reads the source archive through its bootstrap).
pub fn scratch_spec(source: Option<&serde_json::Value>) -> serde_json::Value {
    let mut spec = source
        .filter(|s| s.is_object())
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    if let Some(backup) = spec.get_mut("backup").and_then(|b| b.as_object_mut())
        && backup.contains_key("enabled")
    {
        backup.insert("enabled".into(), serde_json::Value::Bool(false));
    }
    spec
}

/// Whether an application object is a drill's scratch copy (labelled [`drills::LABEL`]).
pub fn is_scratch(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(drills::LABEL))
        .is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests;
