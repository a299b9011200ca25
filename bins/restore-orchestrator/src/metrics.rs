//! The orchestrator's metrics (bounded labels: namespace, driver, result, position) and the
//! Events that tell a RestoreJob's phase changes.

use api::backups::{Backup, RestoreJob, RestoreJobStatus};
use api::contract::{condition_types, phases};
use api::meta::find_condition;
use drivers::restore::Driver;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::EventType;

use crate::context::Context;

/// Counter `{namespace, driver, result}`: RestoreJobs that reached a terminal phase.
pub const RESTORES: &str = "cozy_backups_restore_orchestrator_restores_total";
/// Histogram `{driver, result}`: `startedAt` → terminal phase, in seconds.
pub const DURATION: &str = "cozy_backups_restore_orchestrator_restore_duration_seconds";
/// Histogram `{driver}`: creation of a RestoreJob → its application healthy again (`Succeeded`).
pub const TIME_TO_HEALTHY: &str = "cozy_backups_restore_orchestrator_time_to_healthy_seconds";
/// Histogram `{position}`: distance of a PostgreSQL point-in-time target from the recoverable
/// window when it was checked: `inside` (window end − target: how much newer history the restore
/// drops), `after` (target − window end: how far the archiver must still catch up), `before`
/// (window start − target: rejected).
pub const PITR_DISTANCE: &str = "cozy_backups_restore_orchestrator_pitr_target_distance_seconds";
/// Gauge: RestoreJobs this replica is driving (holds a work lease for).
pub const IN_FLIGHT: &str = "cozy_backups_restore_orchestrator_restores_in_flight";

/// Gauge `{namespace, application}`: when the newest `Passed` restore drill of an application a
/// Plan drills was recorded (Unix seconds).
pub const LAST_VERIFIED: &str = "cozy_backups_restore_orchestrator_last_verified_timestamp_seconds";
/// Gauge `{namespace, application}`: since when a passed restore drill of an application is
/// expected (Unix seconds: the creation of its oldest Plan that drills it) while none has passed;
/// NaN once one has, when no Plan drills it any more, or when this replica stops leading. With
/// [`LAST_VERIFIED`] it lets an application whose drills never pass be alerted on too.
pub const VERIFICATION_EXPECTED_SINCE: &str =
    "cozy_backups_restore_orchestrator_verification_expected_since_timestamp_seconds";
/// Counter `{result}` (`passed`, `failed`): restore drills recorded.
pub const VERIFICATIONS: &str = "cozy_backups_restore_orchestrator_verifications_total";

/// Describes every metric.
pub fn describe() {
    metrics::describe_counter!(
        RESTORES,
        "RestoreJobs that reached a terminal phase, by result."
    );
    metrics::describe_histogram!(
        DURATION,
        metrics::Unit::Seconds,
        "Time from a RestoreJob's start to its terminal phase."
    );
    metrics::describe_histogram!(
        TIME_TO_HEALTHY,
        metrics::Unit::Seconds,
        "Time from a RestoreJob's creation until its application is healthy again."
    );
    metrics::describe_histogram!(
        PITR_DISTANCE,
        metrics::Unit::Seconds,
        "Distance of a point-in-time recovery target from the recoverable window's edge."
    );
    metrics::describe_gauge!(
        LAST_VERIFIED,
        "When the newest passed restore drill of an application was recorded (Unix seconds)."
    );
    metrics::describe_gauge!(
        VERIFICATION_EXPECTED_SINCE,
        "Since when a passed restore drill of an application is expected while none has passed (Unix seconds; NaN otherwise)."
    );
    metrics::describe_counter!(VERIFICATIONS, "Restore drills recorded, by result.");
    metrics::describe_gauge!(
        IN_FLIGHT,
        "RestoreJobs this replica holds a work lease for."
    );
    crate::storage::NAMES.describe();
}

fn seconds(from: &Time, to: &Time) -> f64 {
    (to.0.duration_since(from.0).as_secs_f64()).max(0.0)
}

/// Tells a status change just written: the phase Event, the terminal metrics, the PITR distance.
pub async fn transition(
    ctx: &Context,
    job: &RestoreJob,
    before: &RestoreJobStatus,
    after: &RestoreJobStatus,
    driver: Option<(Driver, &Backup)>,
    now: &Time,
) {
    if let Some((Driver::Cnpg, backup)) = driver {
        let checked = |s: &RestoreJobStatus| {
            find_condition(&s.conditions, condition_types::RECOVERY_WINDOW_CHECKED).is_some()
        };
        if !checked(before) && checked(after) {
            pitr_distance(ctx, job, backup).await;
        }
    }
    if before.phase == after.phase {
        return;
    }
    let kind = driver.map(|(d, _)| d.kind()).unwrap_or("");
    let (type_, reason, note) = match after.phase.as_deref() {
        Some(phases::RUNNING) => (
            EventType::Normal,
            "RestoreStarted",
            format!("restoring from Backup {}", job.spec.backup_ref.name),
        ),
        Some(phases::SUCCEEDED) => (
            EventType::Normal,
            "RestoreSucceeded",
            drivers::status::ready(&after.conditions)
                .map(|r| r.message.clone())
                .unwrap_or_else(|| "restore completed".into()),
        ),
        Some(phases::FAILED) => (
            EventType::Warning,
            "RestoreFailed",
            after.message.clone().unwrap_or_default(),
        ),
        _ => return,
    };
    ctx.event(job, type_, reason, &note).await;
    if !phases::is_terminal(after.phase.as_deref()) {
        return;
    }
    let result = if after.phase.as_deref() == Some(phases::SUCCEEDED) {
        "succeeded"
    } else {
        "failed"
    };
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    metrics::counter!(RESTORES, "namespace" => ns, "driver" => kind, "result" => result)
        .increment(1);
    let end = after.completed_at.as_ref().unwrap_or(now);
    if let Some(started) = after.started_at.as_ref() {
        metrics::histogram!(DURATION, "driver" => kind, "result" => result)
            .record(seconds(started, end));
    }
    if result == "succeeded"
        && let Some(created) = job.metadata.creation_timestamp.as_ref()
    {
        metrics::histogram!(TIME_TO_HEALTHY, "driver" => kind).record(seconds(created, end));
    }
}

async fn pitr_distance(ctx: &Context, job: &RestoreJob, backup: &Backup) {
    let options = drivers::restore::options::cnpg(job.spec.options.as_ref()).options;
    let Ok(target) = drivers::restore::options::parse_rfc3339(&options.recovery_time) else {
        return;
    };
    let Ok(view) = crate::observe::CnpgView::read(ctx, job, backup).await else {
        return;
    };
    let Some(window) = view.window(backup) else {
        return;
    };
    let target = Time(target);
    let (position, distance) = match (&window.from, &window.to) {
        (Some(from), _) if target.0 < from.0 => ("before", seconds(&target, from)),
        (_, Some(to)) if target.0 > to.0 => ("after", seconds(to, &target)),
        (_, Some(to)) => ("inside", seconds(&target, to)),
        _ => return,
    };
    metrics::histogram!(PITR_DISTANCE, "position" => position).record(distance);
}
