//! The status transitions every driver makes on a BackupJob or RestoreJob, as pure functions over
//! the status value (upstream's `markBackupJobFailed`, `requeueWithReason`, the StartedAt idiom, the
//! success write). Conditions follow `meta.SetStatusCondition` (the `Ready` entry is replaced in
//! place; its transition time moves only when the status flips).

use api::backups::{BackupJobStatus, RestoreJobStatus};
use api::contract::{condition_types, phases};
use api::{Condition, ConditionStatus, LocalObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The fields BackupJob and RestoreJob statuses share.
pub trait JobStatus: Clone + Default {
    /// `status.phase`.
    fn phase_mut(&mut self) -> &mut Option<String>;
    /// `status.startedAt`.
    fn started_at_mut(&mut self) -> &mut Option<Time>;
    /// `status.completedAt`.
    fn completed_at_mut(&mut self) -> &mut Option<Time>;
    /// `status.message`.
    fn message_mut(&mut self) -> &mut Option<String>;
    /// `status.conditions`.
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

macro_rules! job_status {
    ($t:ty) => {
        impl JobStatus for $t {
            fn phase_mut(&mut self) -> &mut Option<String> {
                &mut self.phase
            }
            fn started_at_mut(&mut self) -> &mut Option<Time> {
                &mut self.started_at
            }
            fn completed_at_mut(&mut self) -> &mut Option<Time> {
                &mut self.completed_at
            }
            fn message_mut(&mut self) -> &mut Option<String> {
                &mut self.message
            }
            fn conditions_mut(&mut self) -> &mut Vec<Condition> {
                &mut self.conditions
            }
        }
    };
}

job_status!(BackupJobStatus);
job_status!(RestoreJobStatus);

/// Sets a condition of `type_` with `meta.SetStatusCondition` semantics.
pub fn set_condition<S: JobStatus>(
    status: &mut S,
    type_: &str,
    condition: ConditionStatus,
    reason: &str,
    message: &str,
    now: &Time,
) {
    api::meta::set_condition(
        status.conditions_mut(),
        Condition::new(type_, condition, reason, message, now.clone()),
    );
}

/// Terminal failure: `completedAt`, phase `Failed`, the message, and `Ready=False/<reason>`.
pub fn fail<S: JobStatus>(status: &mut S, reason: &str, message: &str, now: &Time) {
    *status.completed_at_mut() = Some(now.clone());
    *status.phase_mut() = Some(phases::FAILED.into());
    *status.message_mut() = Some(message.into());
    set_condition(
        status,
        condition_types::READY,
        ConditionStatus::False,
        reason,
        message,
        now,
    );
}

/// A transient wait: `Ready=False/<reason>` with the message (phase untouched unless `running`).
pub fn wait<S: JobStatus>(status: &mut S, reason: &str, message: &str, running: bool, now: &Time) {
    if running {
        *status.phase_mut() = Some(phases::RUNNING.into());
    }
    set_condition(
        status,
        condition_types::READY,
        ConditionStatus::False,
        reason,
        message,
        now,
    );
}

/// Ends a wait that is over: drops the `Ready=False` condition when its reason is one of `reasons`
/// (a gate's wait, such as `CredentialsProjectionPending`, once the gate has passed). A driver that
/// writes no `Ready` condition of its own (Velero) would otherwise leave a running or succeeded job
/// saying it still waits. True when something was dropped.
pub fn end_wait<S: JobStatus>(status: &mut S, reasons: &[&str]) -> bool {
    let conditions = status.conditions_mut();
    let before = conditions.len();
    conditions.retain(|c| {
        !(c.type_ == condition_types::READY
            && c.status == ConditionStatus::False
            && reasons.contains(&c.reason.as_str()))
    });
    conditions.len() != before
}

/// The first step of a driver: `startedAt` (and, for the drivers that do, phase `Running`).
pub fn start<S: JobStatus>(status: &mut S, running: bool, now: &Time) {
    *status.started_at_mut() = Some(now.clone());
    if running {
        *status.phase_mut() = Some(phases::RUNNING.into());
    }
}

/// A driver is working: phase `Running`.
pub fn running<S: JobStatus>(status: &mut S) {
    *status.phase_mut() = Some(phases::RUNNING.into());
}

/// Terminal success of a BackupJob: `backupRef` (= the Backup's name), `completedAt`, phase
/// `Succeeded`, and `Ready=True/BackupCompleted/<message>` unless the driver writes no Ready
/// condition (Velero).
pub fn backup_succeeded(
    status: &mut BackupJobStatus,
    backup_name: &str,
    ready_message: Option<&str>,
    now: &Time,
) {
    status.backup_ref = Some(LocalObjectReference::new(backup_name));
    succeeded(
        status,
        api::contract::reasons::BACKUP_COMPLETED,
        ready_message,
        now,
    );
}

/// Terminal success of a RestoreJob: `completedAt`, phase `Succeeded`, and
/// `Ready=True/RestoreCompleted/<message>` unless the driver writes none (Velero).
pub fn restore_succeeded(status: &mut RestoreJobStatus, ready_message: Option<&str>, now: &Time) {
    succeeded(
        status,
        api::contract::reasons::RESTORE_COMPLETED,
        ready_message,
        now,
    );
}

/// Terminal success: `completedAt`, phase `Succeeded`, and `Ready=True/<reason>/<message>` when
/// there is a message.
fn succeeded<S: JobStatus>(status: &mut S, reason: &str, ready_message: Option<&str>, now: &Time) {
    *status.completed_at_mut() = Some(now.clone());
    *status.phase_mut() = Some(phases::SUCCEEDED.into());
    if let Some(message) = ready_message {
        set_condition(
            status,
            condition_types::READY,
            ConditionStatus::True,
            reason,
            message,
            now,
        );
    }
}

/// The `Ready` condition, if set.
pub fn ready(conditions: &[Condition]) -> Option<&Condition> {
    conditions
        .iter()
        .find(|c| c.type_ == condition_types::READY)
}

/// Formats a duration the way Go's `time.Duration.String()` does for whole seconds (`30m0s`,
/// `6h0m0s`, `45s`), as upstream's messages print deadlines.
pub fn go_duration(d: std::time::Duration) -> String {
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::time::Duration;

    #[test]
    fn end_wait_drops_only_a_false_ready_of_the_given_reasons() {
        let now = Time("2026-03-01T10:00:00Z".parse().unwrap());
        let mut status = api::backups::BackupJobStatus::default();
        wait(
            &mut status,
            "CredentialsProjectionPending",
            "waiting",
            false,
            &now,
        );
        assert!(!end_wait(&mut status, &["BackupClassNotFound"]));
        assert!(ready(&status.conditions).is_some());
        assert!(end_wait(&mut status, &["CredentialsProjectionPending"]));
        assert_eq!(ready(&status.conditions), None);
        backup_succeeded(&mut status, "b", Some("done"), &now);
        let mut kept = status.clone();
        kept.conditions[0].reason = "CredentialsProjectionPending".into();
        assert!(
            !end_wait(&mut kept, &["CredentialsProjectionPending"]),
            "a True Ready stays"
        );
    }

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn failure_replaces_ready_in_place_and_keeps_other_conditions() {
        let mut s = BackupJobStatus::default();
        set_condition(
            &mut s,
            "CredentialsProjected",
            ConditionStatus::True,
            "Projected",
            "ok",
            &t("2026-01-01T00:00:00Z"),
        );
        wait(
            &mut s,
            "StrategyNotReady",
            "waiting",
            false,
            &t("2026-01-01T00:00:01Z"),
        );
        fail(&mut s, "BackupFailed", "boom", &t("2026-01-01T00:00:02Z"));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.message.as_deref(), Some("boom"));
        assert_eq!(s.completed_at, Some(t("2026-01-01T00:00:02Z")));
        assert_eq!(s.conditions.len(), 2);
        let r = ready(&s.conditions).unwrap();
        assert_eq!(
            (r.reason.as_str(), r.message.as_str()),
            ("BackupFailed", "boom")
        );
        // Status stayed False: the transition time is the first False's.
        assert_eq!(r.last_transition_time, t("2026-01-01T00:00:01Z"));
    }

    #[test]
    fn success_writes_the_backup_ref_and_ready_unless_the_driver_has_none() {
        let mut s = BackupJobStatus::default();
        start(&mut s, false, &t("2026-01-01T00:00:00Z"));
        running(&mut s);
        backup_succeeded(
            &mut s,
            "job-1",
            Some("cnpg.io Backup completed"),
            &t("2026-01-01T00:01:00Z"),
        );
        assert_eq!(
            s.backup_ref.as_ref().map(|r| r.name.as_str()),
            Some("job-1")
        );
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        assert_eq!(ready(&s.conditions).unwrap().reason, "BackupCompleted");
        let mut v = BackupJobStatus::default();
        backup_succeeded(&mut v, "job-2", None, &t("2026-01-01T00:01:00Z"));
        assert!(v.conditions.is_empty(), "Velero writes no Ready condition");
    }

    #[test]
    fn go_duration_strings() {
        assert_eq!(go_duration(Duration::from_secs(1800)), "30m0s");
        assert_eq!(go_duration(Duration::from_secs(6 * 3600)), "6h0m0s");
        assert_eq!(go_duration(Duration::from_secs(180)), "3m0s");
        assert_eq!(go_duration(Duration::from_secs(45)), "45s");
        assert_eq!(go_duration(Duration::from_secs(2700)), "45m0s");
    }
}
